"""Queue health: how the queue of parked calls is doing (the health page, ``/metrics``).

``counting`` turns audit rows into hourly counts (pure), ``rollup`` folds the audit log into them
(``HealthCount``, by a watermark on the audit row id) and reads what is not folded yet,
``figures`` reads what the page and ``/metrics`` show (pending calls live from the parked calls,
the rest from the rollup), ``charts`` draws them as SVG and ``metrics`` is the Prometheus collector.
"""
