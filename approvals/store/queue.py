"""The reviewer's queue: the waiting runs of several agents in one order, read a page at a time from
where the last page ended (a position), never by offset: deciding the calls of a page does not move
the next one, so "Next" brings the calls that still wait after it and skips none.

The order: runs with an undecided call that has a deadline first, soonest deadline first; then the
others; ties and the rest by suspension, oldest first, then run id. Each part is an indexed walk
that stops at the page's end:

- runs with a deadline: the undecided calls' deadline index (``call_undecided_expiry_idx``), each
  run taken at its first such call (a probe of its own few calls says which is first);
- the others: the runs' queue index (``run_queue_idx``: status, then suspension order).

A page reads the first walk from its position, and the second once the first has run out. Its runs
and their calls are then read by id in one statement, as a listing's are.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef, Q

from agents_runtime.records import StoredRun
from approvals.models import ParkedCallRecord, QueueScope, RunRecord, queue_condition
from approvals.store.listing import by_run
from approvals.store.records import JOINED_CALL_COLUMNS, RUN_COLUMNS, parked_calls, stored_run, utc


@dataclass(frozen=True)
class QueuePosition:
    """A run's place in the queue: its soonest deadline (None: it has none), suspension, id."""

    deadline: datetime | None
    suspended_at: datetime
    run_id: str


@dataclass(frozen=True)
class QueueQuery:
    scope: QueueScope
    #: Parts of names, any case: runs with an undecided call of such a tool, of such a thread or
    #: end user (resource).
    tool: str | None = None
    thread: str | None = None
    resource: str | None = None
    #: Inclusive bounds on when the run was created (aware datetimes).
    created_from: datetime | None = None
    created_to: datetime | None = None
    #: The page starts after this place (None: at the start).
    after: QueuePosition | None = None
    limit: int = 20


@dataclass(frozen=True)
class QueuePage:
    runs: list[StoredRun]
    #: Each run's place, in the same order (the next page starts after the last).
    positions: list[QueuePosition]
    #: Whether any run follows the last of this page.
    more: bool


def page(using: str, query: QueueQuery) -> QueuePage:
    """The runs of ``query``'s page (each with its calls), their places, and whether more follow."""
    wanted = query.limit + 1  # one more than the page: whether anything follows it
    places: list[QueuePosition] = []
    if query.after is None or query.after.deadline is not None:
        places = _with_deadline(using, query, wanted)
    if len(places) < wanted:
        places += _without_deadline(using, query, wanted - len(places))
    more = len(places) > query.limit
    places = places[: query.limit]
    if not places:
        return QueuePage(runs=[], positions=[], more=False)
    rows = (
        RunRecord.objects.using(using)
        .filter(run_id__in=[p.run_id for p in places])
        .order_by("pk", "calls__position")
        .values(*RUN_COLUMNS, *JOINED_CALL_COLUMNS)
    )
    read = {
        run["run_id"]: stored_run(run, parked_calls(calls), with_snapshot=False)
        for run, calls in by_run(list(rows))
    }
    # (A run decided between the two reads is left out: it waits no more.)
    kept = [p for p in places if p.run_id in read]
    return QueuePage(runs=[read[p.run_id] for p in kept], positions=kept, more=more)


def _matching(query: QueueQuery, run: str = "") -> Q:
    """The query's filters and scope, on runs (``run``: the path to the run from the rows filtered)."""
    conditions = queue_condition(query.scope, run)
    if query.thread:
        conditions &= Q(**{f"{run}thread_id__icontains": query.thread})
    if query.resource:
        conditions &= Q(**{f"{run}resource_id__icontains": query.resource})
    if query.created_from is not None:
        conditions &= Q(**{f"{run}created_at__gte": query.created_from})
    if query.created_to is not None:
        conditions &= Q(**{f"{run}created_at__lte": query.created_to})
    if query.tool:
        key = OuterRef(run.removesuffix("__") or "pk")
        tools = ParkedCallRecord.objects.filter(run=key, tool_name__icontains=query.tool).undecided()
        conditions &= Q(Exists(tools))
    return conditions


def _with_deadline(using: str, query: QueueQuery, n: int) -> list[QueuePosition]:
    """Up to ``n`` places of runs with a deadline, after the query's: each run at its first
    undecided call that has one (deadline, then call id)."""
    due = OuterRef("expires_at")
    before = Q(expires_at__lt=due) | Q(expires_at=due, pk__lt=OuterRef("pk"))
    earlier = ParkedCallRecord.objects.filter(before, run=OuterRef("run"), expires_at__isnull=False)
    calls = (
        ParkedCallRecord.objects.using(using)
        .undecided()
        .filter(_matching(query, "run__"), expires_at__isnull=False)
        .exclude(Exists(earlier.undecided()))
    )
    after = query.after
    if after is not None and after.deadline is not None:
        calls = calls.filter(expires_at__gte=after.deadline).filter(
            Q(expires_at__gt=after.deadline)
            | Q(run__suspended_at__gt=after.suspended_at)
            | Q(run__suspended_at=after.suspended_at, run__run_id__gt=after.run_id)
        )
    found = calls.order_by("expires_at", "run__suspended_at", "run__run_id").values_list(
        "expires_at", "run__suspended_at", "run__run_id"
    )[:n]
    # (Every deadline here is set: ``expires_at__isnull=False``.)
    return [QueuePosition(due and utc(due), utc(suspended), run_id) for due, suspended, run_id in found]


def _without_deadline(using: str, query: QueueQuery, n: int) -> list[QueuePosition]:
    """Up to ``n`` places of runs without a deadline, after the query's, oldest suspension first."""
    due = ParkedCallRecord.objects.filter(run=OuterRef("pk"), expires_at__isnull=False).undecided()
    runs = RunRecord.objects.using(using).filter(_matching(query)).exclude(Exists(due))
    after = query.after
    if after is not None and after.deadline is None:
        runs = runs.filter(suspended_at__gte=after.suspended_at).filter(
            Q(suspended_at__gt=after.suspended_at) | Q(run_id__gt=after.run_id)
        )
    found = runs.order_by("suspended_at", "run_id").values_list("suspended_at", "run_id")[:n]
    return [QueuePosition(None, utc(suspended), run_id) for suspended, run_id in found]
