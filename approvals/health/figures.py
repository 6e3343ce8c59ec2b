"""What the queue-health page and ``/metrics`` show, read in a constant number of small queries.

Pending calls are read live from the parked calls (one grouped query over the undecided calls of
waiting runs: ``call_undecided_tool_idx``); everything about decisions comes from the hourly
rollup (``HealthCount``) plus the audit rows not folded into it yet (``rollup.tail``), never from
a scan of the audit log. A sub-agent's inner runs are counted on their supervisor's mirror call,
as the overview counts them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Min, Q, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from approvals import agents
from approvals.health import rollup
from approvals.health.counting import (
    APPROVED,
    ASKED,
    EDITED,
    PERSON,
    WAIT_PREFIX,
    Counts,
    Key,
    final_labels,
    hour_of,
    label_bound,
)
from approvals.models import (
    EVER,
    AuditEntry,
    CallClaim,
    GrantRecord,
    HealthCount,
    ParkedCallRecord,
    RunStatus,
    Series,
)

DAY_HOURS = 24
WEEK_HOURS = 7 * 24


@dataclass(frozen=True)
class PendingRow:
    agent_id: str
    tool_name: str
    count: int
    oldest: datetime


@dataclass(frozen=True)
class AgentPending:
    agent_id: str
    count: int
    oldest: datetime
    #: Seconds the oldest pending call has waited.
    oldest_age: float


@dataclass(frozen=True)
class HourRow:
    hour: datetime
    parked: int
    decided: int


@dataclass(frozen=True)
class WaitRow:
    """Time to decision of one agent's final decisions: p50 / p90 as their buckets' upper bounds."""

    agent_id: str
    day_count: int
    day_p50: float | None
    day_p90: float | None
    week_count: int
    week_p50: float | None
    week_p90: float | None


@dataclass(frozen=True)
class ReviewerRow:
    username: str
    day: int
    week: int


@dataclass(frozen=True)
class GrantRow:
    agent_id: str
    tool_name: str
    grant: str
    day: int
    week: int


@dataclass(frozen=True)
class FailingGrantRow:
    """A standing grant whose condition could not be evaluated on some calls (they waited instead)."""

    agent_id: str
    tool_name: str
    grant: str
    condition: str
    failures: int
    last_error: str
    last_at: datetime


@dataclass(frozen=True)
class Pending:
    rows: list[PendingRow]
    agents: list[AgentPending]
    #: Pending calls by the UTC hour they were parked (for the parked-per-hour series).
    by_hour: dict[datetime, int]

    @property
    def total(self) -> int:
        return sum(r.count for r in self.rows)


@dataclass(frozen=True)
class AttentionRow:
    """One agent's calls that nobody answered in time, and those someone is on: escalated (waiting
    now, and in the last 7 days), expired (24 hours, 7 days) and claimed now, by whom."""

    agent_id: str
    agent_name: str
    escalated_now: int
    #: The groups the waiting ones were escalated to.
    escalated_to: list[str]
    escalated_week: int
    expired_day: int
    expired_week: int
    claimed_now: int
    #: Who holds the live claims: "Full Name (username)", or the username.
    claimed_by: list[str]


@dataclass(frozen=True)
class HealthFigures:
    now: datetime
    pending: Pending
    day: list[HourRow]
    week: list[HourRow]
    waits: list[WaitRow]
    reviewers: list[ReviewerRow]
    grants: list[GrantRow]
    #: Grants whose condition failed on a call in the last 7 days, latest first.
    failing_grants: list[FailingGrantRow]
    #: Audit rows not counted yet (the rollup is catching up); 0 normally.
    behind: int
    #: Escalated, expired and claimed calls per agent (agents with none left out).
    attention: list[AttentionRow]
    #: The interruption budget per agent and tool.
    budget: list[BudgetRow]


# -- pending calls (live) ----------------------------------------------------------------------------


#: The cache entry of every agent's pending groups (``pending_groups``).
PENDING_CACHE_KEY = "countersign:health:pending:v1"

PendingGroup = tuple[str, str, datetime, int, datetime]


def pending_groups() -> list[PendingGroup]:
    """Undecided calls of waiting runs, every agent's: ``(agent, tool, UTC hour parked, count,
    oldest)``. One grouped join of every undecided call to its run (bench/health_page.py measures
    it), so it is kept ``HEALTH_PENDING_CACHE_SECONDS`` (Django's cache; 0: not
    kept): the page refetches at most that often anyway, and a burst of viewers or scrapes counts
    once. The counts may lag a decision by that long; the decisions' own figures never do."""
    seconds = float(getattr(settings, "HEALTH_PENDING_CACHE_SECONDS", 5))
    if seconds > 0:
        found: list[PendingGroup] | None = cache.get(PENDING_CACHE_KEY)
        if found is not None:
            return found
    calls = ParkedCallRecord.objects.undecided().filter(
        run__status=RunStatus.SUSPENDED, run__parent_run_id__isnull=True
    )
    grouped = (
        calls.annotate(hour=TruncHour("run__suspended_at", tzinfo=UTC))
        .values_list("run__agent_id", "tool_name", "hour")
        .annotate(n=Count("pk"), oldest=Min("run__suspended_at"))
        .order_by()
    )
    groups: list[PendingGroup] = list(grouped)
    if seconds > 0:
        cache.set(PENDING_CACHE_KEY, groups, seconds)
    return groups


def pending(agent_ids: Collection[str] | None, *, now: datetime, since: datetime | None = None) -> Pending:
    """Undecided calls of waiting runs per agent and tool (``agent_ids`` None: every agent)."""
    wanted = None if agent_ids is None else set(agent_ids)
    per_tool: dict[tuple[str, str], tuple[int, datetime]] = {}
    by_hour: dict[datetime, int] = defaultdict(int)
    for agent_id, tool_name, hour, n, first in pending_groups():
        if wanted is not None and agent_id not in wanted:
            continue
        count, oldest = per_tool.get((agent_id, tool_name), (0, first))
        per_tool[(agent_id, tool_name)] = (count + n, min(oldest, first))
        if since is not None and hour >= since:
            by_hour[hour] += n
    rows = [PendingRow(a, t, n, oldest) for (a, t), (n, oldest) in sorted(per_tool.items())]
    per_agent: dict[str, tuple[int, datetime]] = {}
    for r in rows:
        count, oldest = per_agent.get(r.agent_id, (0, r.oldest))
        per_agent[r.agent_id] = (count + r.count, min(oldest, r.oldest))
    agents = [
        AgentPending(a, n, oldest, max(0.0, (now - oldest).total_seconds()))
        for a, (n, oldest) in sorted(per_agent.items())
    ]
    return Pending(rows, agents, dict(by_hour))


# -- the rollup, plus what is not folded yet ---------------------------------------------------------


@dataclass(frozen=True)
class _Scope:
    """What a read sums: the hours from ``since`` (``EVER``: the all-time rows), of ``agent_ids``
    (None: all), and the counts of the rows not folded yet."""

    since: datetime
    agent_ids: Collection[str] | None
    tail: Counts


def _summed(
    series: Series,
    fields: tuple[str, ...],
    scope: _Scope,
    *,
    labels: Collection[str] | None = None,
    split: datetime | None = None,
) -> dict[tuple[object, ...], list[float]]:
    """``series`` summed by ``fields`` in ``scope``: ``[count, seconds, count from split]`` per
    group, the rollup's and the tail's together."""
    since, agent_ids = scope.since, scope.agent_ids
    rows = HealthCount.objects.filter(series=series)
    rows = rows.filter(hour=EVER) if since == EVER else rows.filter(hour__gte=since).exclude(hour=EVER)
    if agent_ids is not None:
        rows = rows.filter(agent_id__in=list(agent_ids))
    if labels is not None:
        rows = rows.filter(label__in=list(labels))
    extra = {"split": Sum("count", filter=Q(hour__gte=split))} if split is not None else {}
    sums: dict[tuple[object, ...], list[float]] = {}
    for r in rows.values(*fields).annotate(n=Sum("count"), s=Sum("seconds"), **extra).order_by():
        sums[tuple(r[f] for f in fields)] = [r["n"], r["s"], r.get("split") or 0]
    wanted = _tail_filter(series, since, agent_ids, labels)
    for key, tally in scope.tail.items():
        if wanted(key):
            group = sums.setdefault(tuple(getattr(key, f) for f in fields), [0, 0.0, 0])
            group[0] += tally.count
            group[1] += tally.seconds
            if split is not None and key.hour >= split:
                group[2] += tally.count
    return sums


def _tail_filter(
    series: Series, since: datetime, agent_ids: Collection[str] | None, labels: Collection[str] | None
) -> Callable[[Key], bool]:
    agents = None if agent_ids is None else set(agent_ids)
    wanted_labels = None if labels is None else set(labels)

    def wanted(key: Key) -> bool:
        if key.series != series or (key.hour == EVER) != (since == EVER) or key.hour < since:
            return False
        if agents is not None and key.agent_id not in agents:
            return False
        return wanted_labels is None or key.label in wanted_labels

    return wanted


def quantile(buckets: dict[float, float], q: float) -> float | None:
    """The upper bound of the bucket holding the ``q`` quantile (None without any count)."""
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = math.ceil(q * total)
    seen = 0.0
    for bound in sorted(buckets):
        seen += buckets[bound]
        if seen >= rank:
            return bound
    return math.inf


def _hours(start: datetime, n: int) -> list[datetime]:
    return [start + timedelta(hours=i) for i in range(n)]


def health_figures(agent_ids: Collection[str], *, now: datetime | None = None) -> HealthFigures:
    """The page's figures for ``agent_ids`` (the agents the viewer may see)."""
    now = now or timezone.now()
    rollup.fold()  # bounded; the sweep usually did it already
    tail = rollup.tail()
    this_hour = hour_of(now)
    week_start = this_hour - timedelta(hours=WEEK_HOURS - 1)
    day_start = this_hour - timedelta(hours=DAY_HOURS - 1)
    waiting = pending(agent_ids, now=now, since=week_start)
    scope = _Scope(week_start, agent_ids, tail.counts)
    parked = _summed(Series.PARKED, ("hour",), scope)
    decided = _summed(Series.DECIDED, ("hour",), scope, labels=final_labels())
    week = [
        HourRow(
            h,
            int(parked.get((h,), [0])[0]) + waiting.by_hour.get(h, 0),
            int(decided.get((h,), [0])[0]),
        )
        for h in _hours(week_start, WEEK_HOURS)
    ]
    return HealthFigures(
        now=now,
        pending=waiting,
        day=week[-DAY_HOURS:],
        week=week,
        waits=_waits(scope, day_start),
        reviewers=_reviewers(scope, day_start),
        grants=grants_used(agent_ids, since=week_start, day_start=day_start, tail=tail.counts),
        failing_grants=failing_grants(agent_ids, since=week_start),
        behind=tail.behind,
        attention=attention(agent_ids, now=now, day_start=day_start, week_start=week_start),
        budget=budget(agent_ids, now=now, tail=tail.counts),
    )


def _blank_attention() -> dict[str, Any]:
    counts: dict[str, Any] = dict.fromkeys(
        ("escalated_now", "escalated_week", "expired_day", "expired_week", "claimed_now"), 0
    )
    return counts | {"escalated_to": [], "claimed_by": []}


def attention(
    agent_ids: Collection[str], *, now: datetime, day_start: datetime, week_start: datetime
) -> list[AttentionRow]:
    """Escalated, expired and claimed calls of ``agent_ids``, in three small queries: the waiting
    escalated calls (``call_escalated_idx``), the week's expiry and escalation rows of the audit log
    (``audit_agent_created``), the live claims (one row per call)."""
    waiting = (
        ParkedCallRecord.objects.undecided()
        .filter(escalated_to__isnull=False, run__agent_id__in=agent_ids, run__status=RunStatus.SUSPENDED)
        .values_list("run__agent_id", "escalated_to")
        .annotate(n=Count("pk"))
        .order_by()
    )
    audited = (
        AuditEntry.objects.filter(
            agent_id__in=agent_ids, created_at__gte=week_start, action__in=["expire", "escalate"]
        )
        .values_list("agent_id", "action")
        .annotate(week=Count("pk"), day=Count("pk", filter=Q(created_at__gte=day_start)))
        .order_by()
    )
    claims = (
        CallClaim.objects.filter(agent_id__in=agent_ids, expires_at__gt=now)
        .values_list("agent_id", "username", "user__first_name", "user__last_name")
        .annotate(n=Count("pk"))
        .order_by()
    )
    rows: dict[str, dict[str, Any]] = defaultdict(_blank_attention)
    for agent_id, group, n in waiting:
        rows[agent_id]["escalated_now"] += n
        rows[agent_id]["escalated_to"].append(group)
    for agent_id, action, week, day in audited:
        if action == "expire":
            rows[agent_id] |= {"expired_week": week, "expired_day": day}
        else:
            rows[agent_id]["escalated_week"] = week
    for agent_id, username, first, last, n in claims:
        full = f"{first} {last}".strip()
        rows[agent_id]["claimed_by"].append(f"{full} ({username})" if full else username)
        rows[agent_id]["claimed_now"] += n
    return [
        AttentionRow(
            agent_id=agent_id,
            agent_name=agents.name_of(agent_id),
            escalated_now=row["escalated_now"],
            escalated_to=sorted(row["escalated_to"]),
            escalated_week=row["escalated_week"],
            expired_day=row["expired_day"],
            expired_week=row["expired_week"],
            claimed_now=row["claimed_now"],
            claimed_by=sorted(row["claimed_by"]),
        )
        for agent_id in agent_ids
        if (row := rows.get(agent_id))
    ]


def failing_grants(agent_ids: Collection[str], *, since: datetime) -> list[FailingGrantRow]:
    """Grants of these agents whose condition failed on a call since ``since`` (the grant's record
    counts them as the runtime finds them: ``agents_runtime._loop.check_grants``)."""
    rows = GrantRecord.objects.filter(
        agent_id__in=agent_ids, condition_failures__gt=0, last_condition_error_at__gte=since
    ).order_by("-last_condition_error_at", "-id")[:FAILING_GRANTS_SHOWN]
    return [
        FailingGrantRow(
            agent_id=row.agent_id,
            tool_name=row.tool_name,
            grant=f"grant #{row.pk} of {row.created_by_name}",
            condition=row.condition,
            failures=row.condition_failures,
            last_error=row.last_condition_error,
            last_at=row.last_condition_error_at or since,
        )
        for row in rows
    ]


#: Grants listed as failing (the latest).
FAILING_GRANTS_SHOWN = 50


def _waits(scope: _Scope, day_start: datetime) -> list[WaitRow]:
    sums = _summed(Series.WAIT, ("agent_id", "label"), scope, split=day_start)
    day: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    week: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for (agent_id, label), (count, _, day_count) in sums.items():
        week[str(agent_id)][label_bound(str(label))] += count
        day[str(agent_id)][label_bound(str(label))] += day_count
    return [
        WaitRow(
            agent_id,
            int(sum(day[agent_id].values())),
            quantile(day[agent_id], 0.5),
            quantile(day[agent_id], 0.9),
            int(sum(buckets.values())),
            quantile(buckets, 0.5),
            quantile(buckets, 0.9),
        )
        for agent_id, buckets in sorted(week.items())
    ]


def _reviewers(scope: _Scope, day_start: datetime) -> list[ReviewerRow]:
    sums = _summed(Series.REVIEWER, ("label",), scope, split=day_start)
    rows = [ReviewerRow(str(label), int(v[2]), int(v[0])) for (label,), v in sums.items()]
    return sorted(rows, key=lambda r: (-r.week, r.username))


def grants_used(
    agent_ids: Collection[str] | None,
    *,
    since: datetime,
    day_start: datetime | None = None,
    tail: Counts | None = None,
) -> list[GrantRow]:
    """Decisions standing grants took, per agent, tool and grant (none: an empty list).

    The one read of grant use (what counts as one: ``counting.grant_of``); ``since=EVER`` gives
    the all-time totals ``/metrics`` exposes.
    """
    tail = rollup.tail().counts if tail is None else tail
    scope = _Scope(since, agent_ids, tail)
    sums = _summed(Series.GRANT, ("agent_id", "tool_name", "label"), scope, split=day_start)
    rows = [GrantRow(str(a), str(t), str(g), int(v[2]), int(v[0])) for (a, t, g), v in sums.items()]
    return sorted(rows, key=lambda r: (-r.week, r.agent_id, r.tool_name, r.grant))


# -- /metrics ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricFigures:
    pending: Pending
    #: (agent, action, outcome class) -> decisions, all time.
    decisions: dict[tuple[str, str, str], int]
    #: agent -> ({bucket bound: count}, sum of seconds), all time.
    waits: dict[str, tuple[dict[float, int], float]]
    grants: list[GrantRow]
    behind: int
    #: Per agent and tool, the last 24 hours (``BudgetRow.day``) and the rest.
    budget: list[BudgetRow]


def metric_figures(*, now: datetime | None = None) -> MetricFigures:
    """Every agent's figures, all time (what ``/metrics`` exposes)."""
    now = now or timezone.now()
    rollup.fold()
    tail = rollup.tail()
    scope = _Scope(EVER, None, tail.counts)
    decisions: dict[tuple[str, str, str], int] = {}
    for (agent_id, label), (count, _, _) in _summed(Series.DECIDED, ("agent_id", "label"), scope).items():
        action, _, klass = str(label).partition(":")
        decisions[(str(agent_id), action, klass)] = int(count)
    waits: dict[str, tuple[dict[float, int], float]] = {}
    for (agent_id, label), (count, seconds, _) in _summed(Series.WAIT, ("agent_id", "label"), scope).items():
        buckets, total = waits.get(str(agent_id), ({}, 0.0))
        buckets[label_bound(str(label))] = int(count)
        waits[str(agent_id)] = (buckets, total + seconds)
    grants = grants_used(None, since=EVER, tail=tail.counts)
    budget_rows = budget(None, now=now, tail=tail.counts)
    return MetricFigures(pending(None, now=now), decisions, waits, grants, tail.behind, budget_rows)


# -- the interruption budget ---------------------------------------------------------------------------

#: The budget's windows: the last 24 hours and 7 days, and the period before each (the trend).
BUDGET_WINDOWS = ("day", "prev_day", "week", "prev_week")


@dataclass
class BudgetPeriod:
    """One agent and tool over one window. ``calls``: tool calls made, counted from the transcripts
    of runs that ended in the window; the rest from the interruptions decided in it."""

    calls: int = 0
    #: Final decisions no grant took: a person's, or the deadline's.
    asked: int = 0
    #: Of those, a person's; ``person_seconds``: how long those calls waited for them.
    person: int = 0
    person_seconds: float = 0.0
    approved: int = 0
    edited: int = 0
    waits: dict[float, float] = field(default_factory=dict)

    @property
    def per_100(self) -> float | None:
        """Interruptions per 100 calls made (None: no call made)."""
        return None if not self.calls else 100 * self.asked / self.calls

    @property
    def approval_rate(self) -> float | None:
        """Of the calls a person decided, the share approved (%)."""
        return None if not self.person else 100 * self.approved / self.person

    @property
    def edit_rate(self) -> float | None:
        """Of the calls a person approved, the share approved with edited arguments (%)."""
        return None if not self.approved else 100 * self.edited / self.approved

    @property
    def median_wait(self) -> float | None:
        """Median time to decision of the interruptions (its bucket's upper bound)."""
        return quantile(self.waits, 0.5)


def merged_period(a: BudgetPeriod, b: BudgetPeriod) -> BudgetPeriod:
    waits = dict(a.waits)
    for bound, n in b.waits.items():
        waits[bound] = waits.get(bound, 0) + n
    return BudgetPeriod(
        calls=a.calls + b.calls,
        asked=a.asked + b.asked,
        person=a.person + b.person,
        person_seconds=a.person_seconds + b.person_seconds,
        approved=a.approved + b.approved,
        edited=a.edited + b.edited,
        waits=waits,
    )


@dataclass(frozen=True)
class BudgetRow:
    agent_id: str
    tool_name: str
    day: BudgetPeriod
    prev_day: BudgetPeriod
    week: BudgetPeriod
    prev_week: BudgetPeriod


def budget_windows(now: datetime) -> dict[str, tuple[datetime, datetime]]:
    end = hour_of(now) + timedelta(hours=1)
    day, week = end - timedelta(hours=DAY_HOURS), end - timedelta(hours=WEEK_HOURS)
    return {
        "day": (day, end),
        "prev_day": (day - timedelta(hours=DAY_HOURS), day),
        "week": (week, end),
        "prev_week": (week - timedelta(hours=WEEK_HOURS), week),
    }


def _add_to_period(period: BudgetPeriod, series: str, label: str, count: float, seconds: float) -> None:
    if series == Series.CALLS:
        period.calls += int(count)
    elif label == ASKED:
        period.asked += int(count)
    elif label == PERSON:
        period.person += int(count)
        period.person_seconds += seconds
    elif label == APPROVED:
        period.approved += int(count)
    elif label == EDITED:
        period.edited += int(count)
    elif label.startswith(WAIT_PREFIX):
        bound = label_bound(label.removeprefix(WAIT_PREFIX))
        period.waits[bound] = period.waits.get(bound, 0) + count


def budget(
    agent_ids: Collection[str] | None, *, now: datetime, tail: Counts | None = None
) -> list[BudgetRow]:
    """Per agent and tool, each window's calls made and interruptions (``BudgetPeriod``): one
    grouped read of the rollup's last 14 days, plus the rows not folded yet."""
    tail = rollup.tail().counts if tail is None else tail
    windows = budget_windows(now)
    earliest = min(start for start, _ in windows.values())
    rows = HealthCount.objects.filter(series__in=[Series.CALLS, Series.BUDGET], hour__gte=earliest)
    rows = rows.exclude(hour=EVER)
    if agent_ids is not None:
        rows = rows.filter(agent_id__in=list(agent_ids))
    sums: dict[str, Any] = {}
    for name, (start, end) in windows.items():
        within = Q(hour__gte=start, hour__lt=end)
        sums[f"{name}_n"] = Sum("count", filter=within)
        sums[f"{name}_s"] = Sum("seconds", filter=within)
    periods: dict[tuple[str, str], dict[str, BudgetPeriod]] = defaultdict(
        lambda: {name: BudgetPeriod() for name in BUDGET_WINDOWS}
    )
    grouped = rows.values("series", "agent_id", "tool_name", "label").annotate(**sums).order_by()
    for found in grouped:
        r: dict[str, Any] = dict(found)
        mine = periods[(r["agent_id"], r["tool_name"])]
        for name in BUDGET_WINDOWS:
            if r[f"{name}_n"]:
                _add_to_period(mine[name], r["series"], r["label"], r[f"{name}_n"], r[f"{name}_s"] or 0.0)
    agents = None if agent_ids is None else set(agent_ids)
    for key, tally in tail.items():
        if key.series not in (Series.CALLS, Series.BUDGET) or key.hour == EVER:
            continue
        if agents is not None and key.agent_id not in agents:
            continue
        for name, (start, end) in windows.items():
            if start <= key.hour < end:
                mine = periods[(key.agent_id, key.tool_name)]
                _add_to_period(mine[name], key.series, key.label, tally.count, tally.seconds)
    return [BudgetRow(a, t, **p) for (a, t), p in sorted(periods.items())]
