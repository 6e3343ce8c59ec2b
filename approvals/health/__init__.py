"""Queue health: how the queue of parked calls is doing (the health page, ``/metrics``).

``counting`` turns audit rows into hourly counts (pure), ``rollup`` folds the audit log into them
(``HealthCount``, by a watermark on the audit row id) and reads what is not folded yet
(with the tool calls in ended runs' transcripts, and those of runs that never parked, which the run
store adds), ``figures`` reads what the page and ``/metrics`` show (pending calls live from the parked
calls, the rest from the rollup, the interruption budget per agent and tool among it), ``page``
shapes it for the template, ``charts`` draws it as SVG and ``metrics`` is the Prometheus collector.
"""
