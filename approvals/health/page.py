"""The queue-health page's content: the figures as charts and the tables they are drawn from."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from django.utils.safestring import SafeString

from approvals.health import charts
from approvals.health.figures import BudgetPeriod, BudgetRow, HealthFigures, HourRow


def duration(seconds: float | None) -> str:
    """ "45 s", "7.5 min", "2 h", "3 d"; None: "—"; beyond the last bucket: "> 30 d"."""
    if seconds is None:
        return "—"
    if math.isinf(seconds):
        return "> 30 d"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


@dataclass(frozen=True)
class HourChart:
    chart_id: str
    title: str
    svg: SafeString
    rows: list[HourRow]
    #: How an hour reads in the table (viewer's zone).
    labels: list[str]

    @property
    def table(self) -> list[tuple[str, HourRow]]:
        return list(zip(self.labels, self.rows, strict=True))


@dataclass(frozen=True)
class Figure:
    """One budget figure now and in the period before: "12", "was 9", and which way it went."""

    heading: str
    now: str
    before: str
    #: "up", "down", "same", or "" (either side unknown).
    trend: str


@dataclass(frozen=True)
class BudgetLine:
    agent_id: str
    tool_name: str
    #: In ``BUDGET_COLUMNS``' order.
    figures: list[Figure]


@dataclass(frozen=True)
class BudgetTable:
    table_id: str
    title: str
    lines: list[BudgetLine]


Shown = Callable[[float], str]

#: The budget's columns: heading, how a period gives the figure, how it reads.
BUDGET_COLUMNS: tuple[tuple[str, Callable[[BudgetPeriod], float | None], Shown], ...] = (
    ("Calls made", lambda p: p.calls, lambda v: f"{v:g}"),
    ("Interruptions per 100 calls", lambda p: p.per_100, lambda v: f"{v:.3g}"),
    ("Approval rate", lambda p: p.approval_rate, lambda v: f"{v:.3g} %"),
    ("Edit rate", lambda p: p.edit_rate, lambda v: f"{v:.3g} %"),
    ("Median time to decision", lambda p: p.median_wait, lambda v: f"≤ {duration(v)}"),
    ("Waited on reviewers", lambda p: p.person_seconds if p.person else None, duration),
)


def _figure(
    heading: str,
    now: BudgetPeriod,
    before: BudgetPeriod,
    value: Callable[[BudgetPeriod], float | None],
    shown: Shown,
) -> Figure:
    a, b = value(now), value(before)
    trend = ""
    if a is not None and b is not None:
        trend = "up" if a > b else "down" if a < b else "same"
    return Figure(heading, "—" if a is None else shown(a), "—" if b is None else shown(b), trend)


def budget_table(table_id: str, title: str, rows: list[BudgetRow], *, week: bool) -> BudgetTable:
    lines = []
    for r in rows:
        now, before = (r.week, r.prev_week) if week else (r.day, r.prev_day)
        figures = [_figure(h, now, before, get, shown) for h, get, shown in BUDGET_COLUMNS]
        lines.append(BudgetLine(r.agent_id, r.tool_name, figures))
    return BudgetTable(table_id, title, lines)


def budget_chart(rows: list[BudgetRow]) -> SafeString:
    """Interruptions per 100 calls of each agent and tool: the 7 days before, then the last 7 days."""
    bars = []
    for r in rows:
        for when, period in (("7 days before", r.prev_week), ("last 7 days", r.week)):
            if period.per_100 is not None:
                bars.append((f"{r.agent_id} · {r.tool_name}, {when}", round(period.per_100, 1)))
    return charts.bar_chart(
        "chart-budget",
        "Interruptions per 100 calls",
        bars,
        description=(
            "Interruptions per 100 tool calls made, per agent and tool, the last 7 days against the 7 "
            "days before. The tables below have every figure."
        ),
    )


BUDGET_HEADINGS = [heading for heading, _, _ in BUDGET_COLUMNS]


@dataclass(frozen=True)
class HealthPage:
    figures: HealthFigures
    pending_chart: SafeString
    day: HourChart
    week: HourChart
    budget_chart: SafeString
    budget_day: BudgetTable
    budget_week: BudgetTable

    @property
    def budget_headings(self) -> list[str]:
        return BUDGET_HEADINGS


def _local(hour: datetime, fmt: str) -> str:
    return timezone.localtime(hour).strftime(fmt)


def _hour_chart(chart_id: str, title: str, rows: list[HourRow], *, fmt: str, every: int) -> HourChart:
    ticks = [_local(r.hour, fmt) for r in rows]
    svg = charts.line_chart(
        chart_id,
        title,
        ticks,
        [
            charts.Line("parked", "parked", [r.parked for r in rows]),
            charts.Line("decided", "decided", [r.decided for r in rows]),
        ],
        every=every,
        description=(
            f"Calls parked and decided per hour: {sum(r.parked for r in rows)} parked, "
            f"{sum(r.decided for r in rows)} decided. The table below has every hour."
        ),
    )
    return HourChart(chart_id, title, svg, rows, [_local(r.hour, "%a %d %b %H:00") for r in rows])


def health_page(figures: HealthFigures) -> HealthPage:
    bars = [(f"{r.agent_id} · {r.tool_name}", float(r.count)) for r in figures.pending.rows]
    pending_chart = charts.bar_chart(
        "chart-pending",
        "Pending calls per agent and tool",
        bars,
        description=f"{figures.pending.total} calls wait for a decision.",
    )
    return HealthPage(
        figures=figures,
        pending_chart=pending_chart,
        day=_hour_chart("chart-day", "Last 24 hours", figures.day, fmt="%H:00", every=3),
        week=_hour_chart("chart-week", "Last 7 days", figures.week, fmt="%a", every=24),
        budget_chart=budget_chart(figures.budget),
        budget_day=budget_table("health-budget-day", "Last 24 hours", figures.budget, week=False),
        budget_week=budget_table("health-budget-week", "Last 7 days", figures.budget, week=True),
    )
