"""The queue-health page's content: the figures as charts and the tables they are drawn from."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from django.utils.safestring import SafeString

from approvals.health import charts
from approvals.health.figures import HealthFigures, HourRow


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
class HealthPage:
    figures: HealthFigures
    pending_chart: SafeString
    day: HourChart
    week: HourChart


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
    )
