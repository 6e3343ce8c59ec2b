"""Audit rows as hourly counts: what each row adds to which series (pure; no database).

Both the fold (``rollup.fold``) and the read of rows not folded yet (``rollup.tail``) count with
``count_rows``, so a row adds the same whether it was folded or not.

A row's outcome may change once after it is written (``continuing`` becomes how the run went on),
so counts use the outcome's *class*, which never changes: every outcome a decision that took
effect can have is ``took_effect``; the others (expired, a vote, a lost race, ...) are their own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from agents_runtime.store import NOT_DECISIONS, DecisionAction, Outcome, tool_calls
from approvals.models import EVER, Series

TOOK_EFFECT = "took_effect"
_TOOK_EFFECT = frozenset(
    {Outcome.CONTINUING, Outcome.COMPLETED, Outcome.FAILED, Outcome.INTERRUPTED, Outcome.SUSPENDED_AGAIN}
)
#: The classes of a call's final decision: it stopped waiting (a vote or a lost race did not).
FINAL = frozenset({TOOK_EFFECT, Outcome.EXPIRED.value})
_REVIEWER_ACTIONS = frozenset({DecisionAction.APPROVE, DecisionAction.DECLINE, DecisionAction.RESUME})
_REVIEWER_CLASSES = frozenset({TOOK_EFFECT, Outcome.VOTE_RECORDED.value})

#: Upper bounds (seconds) of the time-to-decision buckets: fine enough for the page's p50 / p90
#: (each read as its bucket's bound), and a superset of ``PROMETHEUS_BOUNDS``.
WAIT_BOUNDS: tuple[float, ...] = (
    *(1, 2, 5, 10, 15, 20, 30, 45),
    *(60, 90, 120, 180, 240, 300, 450, 600, 900, 1200, 1800, 2700),
    *(3600, 5400, 7200, 10800, 14400, 21600, 28800, 43200, 64800),
    *(86400, 129600, 172800, 259200, 345600, 432000, 604800, 1209600, 2592000),
    math.inf,
)
#: The buckets ``/metrics`` exposes (a Prometheus histogram's ``le``).
PROMETHEUS_BOUNDS: tuple[float, ...] = (
    *(1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400),
    *(172800, 259200, 604800, math.inf),
)


def bound_label(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else str(int(bound))


def label_bound(label: str) -> float:
    return math.inf if label == "+Inf" else float(label)


def wait_bound(seconds: float) -> float:
    """The bucket a time to decision falls in (the first bound at or above it, as Prometheus' ``le``)."""
    return next(b for b in WAIT_BOUNDS if seconds <= b)


def outcome_class(outcome: str) -> str:
    return TOOK_EFFECT if outcome in _TOOK_EFFECT else outcome


def decided_label(action: str, klass: str) -> str:
    return f"{action}:{klass}"


def final_labels() -> list[str]:
    """The ``decided`` labels of final decisions (the page's "decided per hour")."""
    return [decided_label(a.value, k) for a in DecisionAction for k in sorted(FINAL)]


class AuditRow(NamedTuple):
    """The columns of an audit row the counts read (``rollup.AUDIT_COLUMNS``, in this order)."""

    id: int
    created_at: datetime
    parked_at: datetime | None
    agent_id: str
    tool_name: str
    action: str
    outcome: str
    username: str
    channel: str
    grant_id: int | None
    #: Not None: approved with edited arguments.
    edited_args: Any


class EndedRow(NamedTuple):
    """The columns of an ended run the calls made are counted from (``rollup.ENDED_COLUMNS``)."""

    id: int
    ended_at: datetime
    agent_id: str
    #: ``RunEnding.transcript``: a ``tool-call`` entry per call the model made (None once pruned).
    transcript: Any


#: ``Series.BUDGET`` labels: a call that interrupted someone (a final decision by a person or by its
#: deadline, not a grant), one a person decided (seconds: how long it waited for them), one a person
#: approved, one a person approved with edited arguments. ``wait:<bound>``: time to decision of the
#: interruptions, by bucket.
ASKED, PERSON, APPROVED, EDITED = "asked", "person", "approved", "edited"
WAIT_PREFIX = "wait:"


class Key(NamedTuple):
    series: str
    hour: datetime
    agent_id: str
    tool_name: str
    label: str


@dataclass
class Tally:
    count: int = 0
    seconds: float = 0.0


Counts = dict[Key, Tally]


def hour_of(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def grant_of(row: AuditRow) -> str | None:
    """The standing grant or routing rule that took this decision ("grant #3 of rita", "rule #2 of
    ada", as the audit log says it), or None (a person, the deadline).

    The one place that tells a decision nobody was asked for apart (``figures.grants_used`` reads
    what it counts; the interruption budget leaves it out): a row naming its grant, or of the
    ``grant`` or ``rule`` channel.
    """
    if row.grant_id is not None:
        return f"grant #{row.grant_id} of {row.username}"
    if row.channel == "grant":
        return f"grant of {row.username}"
    if row.channel == "rule":
        return row.username  # "rule #N of <user>": nobody was asked either
    return None


def count_rows(rows: Iterable[AuditRow]) -> Counts:
    """What ``rows`` add: per hour and all time (``EVER``) where ``/metrics`` needs the total."""
    counts: Counts = {}

    def add(
        series: Series, hour: datetime, row: AuditRow, tool: str, label: str, seconds: float = 0.0
    ) -> None:
        for at in (hour, EVER) if series in (Series.DECIDED, Series.WAIT, Series.GRANT) else (hour,):
            tally = counts.setdefault(Key(series.value, at, row.agent_id, tool, label), Tally())
            tally.count += 1
            tally.seconds += seconds

    for row in rows:
        if row.outcome in NOT_DECISIONS:
            continue  # a deadline moved, a grant made or revoked: not a decision
        klass = outcome_class(row.outcome)
        hour = hour_of(row.created_at)
        add(Series.DECIDED, hour, row, row.tool_name, decided_label(row.action, klass))
        grant = grant_of(row)
        if grant is not None and klass in FINAL:
            add(Series.GRANT, hour, row, row.tool_name, grant)
        if klass in FINAL and row.parked_at is not None:
            waited = max(0.0, (row.created_at - row.parked_at).total_seconds())
            add(Series.PARKED, hour_of(row.parked_at), row, row.tool_name, "")
            add(Series.WAIT, hour, row, "", bound_label(wait_bound(waited)), waited)
        if grant is None and klass in FINAL:
            _count_budget(add, hour, row)
        if (
            grant is None
            and row.username
            and row.channel != "deadline"
            and row.action in _REVIEWER_ACTIONS
            and klass in _REVIEWER_CLASSES
        ):
            add(Series.REVIEWER, hour, row, "", row.username)
    return counts


def _count_budget(add: Any, hour: datetime, row: AuditRow) -> None:
    """What an interruption (a final decision no grant took) adds to its agent and tool's budget."""
    waited = None if row.parked_at is None else max(0.0, (row.created_at - row.parked_at).total_seconds())
    add(Series.BUDGET, hour, row, row.tool_name, ASKED)
    if waited is not None:
        add(Series.BUDGET, hour, row, row.tool_name, WAIT_PREFIX + bound_label(wait_bound(waited)), waited)
    if row.channel == "deadline" or row.action == DecisionAction.EXPIRE:
        return
    add(Series.BUDGET, hour, row, row.tool_name, PERSON, waited or 0.0)
    if row.action == DecisionAction.APPROVE:
        add(Series.BUDGET, hour, row, row.tool_name, APPROVED)
        if row.edited_args is not None:
            add(Series.BUDGET, hour, row, row.tool_name, EDITED)


def count_ended(rows: Iterable[EndedRow]) -> Counts:
    """The tool calls each ended run made (``Series.CALLS``), by agent, tool and the hour it ended;
    a pruned run's transcript is gone and adds nothing."""
    counts: Counts = {}
    for row in rows:
        hour = hour_of(row.ended_at)
        for tool, n in tool_calls(row.transcript).items():
            counts.setdefault(Key(Series.CALLS.value, hour, row.agent_id, tool, ""), Tally()).count += n
    return counts


def merge(into: Counts, more: Counts) -> Counts:
    for key, tally in more.items():
        mine = into.setdefault(key, Tally())
        mine.count += tally.count
        mine.seconds += tally.seconds
    return into
