"""``/metrics``: the queue-health figures in Prometheus' text format, read at scrape time.

A custom collector on a registry of its own reads the database on each scrape (``figures.
metric_figures``), so every server process answers the same numbers: nothing is counted in a
process's memory. The counters are the rollup's all-time totals (``HealthCount`` rows at ``EVER``),
so they only grow, as Prometheus expects of a counter.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from approvals.health.counting import PROMETHEUS_BOUNDS
from approvals.health.figures import BudgetPeriod, BudgetRow, MetricFigures, merged_period, metric_figures

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class QueueHealthCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from metric_families(metric_figures())


def metric_families(figures: MetricFigures) -> Iterator[Metric]:
    pending = GaugeMetricFamily(
        "countersign_pending_calls", "Calls waiting for a decision", labels=["agent", "tool"]
    )
    for row in figures.pending.rows:
        pending.add_metric([row.agent_id, row.tool_name], row.count)
    yield pending
    oldest = GaugeMetricFamily(
        "countersign_oldest_pending_seconds",
        "How long the oldest waiting call of the agent has waited",
        labels=["agent"],
    )
    for agent in figures.pending.agents:
        oldest.add_metric([agent.agent_id], agent.oldest_age)
    yield oldest
    decisions = CounterMetricFamily(
        "countersign_decisions",
        "Decisions recorded in the audit log (outcome: took_effect, expired, vote_recorded, "
        "lost_race, invalid, refused)",
        labels=["agent", "action", "outcome"],
    )
    for (agent_id, action, outcome), count in sorted(figures.decisions.items()):
        decisions.add_metric([agent_id, action, outcome], count)
    yield decisions
    waits = HistogramMetricFamily(
        "countersign_time_to_decision_seconds",
        "From a call parked to its final decision (expiries included)",
        labels=["agent"],
    )
    for agent_id, (buckets, total) in sorted(figures.waits.items()):
        # The fine buckets nest in the exposed ones: each ``le`` counts every fine one up to it.
        cumulative = [
            (_le(le), float(sum(n for b, n in buckets.items() if b <= le))) for le in PROMETHEUS_BOUNDS
        ]
        waits.add_metric([agent_id], cumulative, sum_value=total)
    yield waits
    grants = CounterMetricFamily(
        "countersign_grants_used", "Decisions taken by standing grants", labels=["agent", "tool"]
    )
    per_tool: dict[tuple[str, str], int] = {}
    for grant in figures.grants:
        key = (grant.agent_id, grant.tool_name)
        per_tool[key] = per_tool.get(key, 0) + grant.week  # (all time: read from EVER)
    for (agent_id, tool_name), count in sorted(per_tool.items()):
        grants.add_metric([agent_id, tool_name], count)
    yield grants
    yield from budget_families(figures.budget)
    behind = GaugeMetricFamily(
        "countersign_health_rollup_behind_rows",
        "Audit rows not yet counted in these figures (the rollup catching up)",
    )
    behind.add_metric([], figures.behind)
    yield behind


#: Agent and tool pairs ``/metrics`` gives budget series of, the busiest of the last 7 days: the
#: others are summed under the tool ``_other`` (tool names come from model output: unbounded).
BUDGET_SERIES_MAX = 100
OTHER_TOOL = "_other"

_BUDGET_GAUGES = (
    ("calls", "countersign_tool_calls_24h", "Tool calls made in the last 24 hours (runs ended in them)"),
    ("asked", "countersign_interruptions_24h", "Calls a person or a deadline decided, last 24 hours"),
    ("per_100", "countersign_interruptions_per_100_calls_24h", "Interruptions per 100 calls, 24 h"),
    ("approval_rate", "countersign_approval_rate_24h", "Percent of a person's decisions that approved, 24 h"),
    ("edit_rate", "countersign_edit_rate_24h", "Percent of a person's approvals with edited arguments, 24 h"),
    ("median_wait", "countersign_median_time_to_decision_24h_seconds", "Median wait of interruptions, 24 h"),
    (
        "person_seconds",
        "countersign_reviewer_wait_24h_seconds",
        "Time calls decided by a person waited for them, last 24 hours (an upper bound of time spent)",
    ),
)


def bounded_budget(rows: list[BudgetRow]) -> list[tuple[str, str, BudgetPeriod]]:
    """The last 24 hours per agent and tool, at most ``BUDGET_SERIES_MAX`` pairs plus ``_other``."""
    busiest = sorted(rows, key=lambda r: (-(r.week.calls + r.week.asked), r.agent_id, r.tool_name))
    kept = [(r.agent_id, r.tool_name, r.day) for r in busiest[:BUDGET_SERIES_MAX]]
    if len(busiest) > BUDGET_SERIES_MAX:
        other: dict[str, BudgetPeriod] = {}
        for r in busiest[BUDGET_SERIES_MAX:]:
            other[r.agent_id] = merged_period(other.get(r.agent_id, BudgetPeriod()), r.day)
        kept += [(agent_id, OTHER_TOOL, period) for agent_id, period in sorted(other.items())]
    return kept


def budget_families(rows: list[BudgetRow]) -> Iterator[Metric]:
    kept = bounded_budget(rows)
    for attribute, name, documentation in _BUDGET_GAUGES:
        gauge = GaugeMetricFamily(name, documentation, labels=["agent", "tool"])
        for agent_id, tool_name, period in kept:
            value = getattr(period, attribute)
            if value is not None and not math.isinf(value):
                gauge.add_metric([agent_id, tool_name], float(value))
        yield gauge


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else str(float(bound))


registry = CollectorRegistry(auto_describe=False)
registry.register(QueueHealthCollector())


def exposition() -> bytes:
    return generate_latest(registry)
