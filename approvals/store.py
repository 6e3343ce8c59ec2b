"""``DjangoRunStore``: the runtime's run store on the Django ORM (SQLite by default, PostgreSQL), one
module for one job: reading and writing runs. It behaves exactly like
``agents_runtime.store.InMemoryRunStore`` (the reference), but the runs live in the database, so
every process and server instance on it sees the same suspended runs.

Sections, in the order each needs the one before: rows and records (the runtime's records <->
rows, and the fixed statements compiled once per shape), the audit row of a decision, the store's
raw SQL, the tables and leases its parts share (``Tables``), grants, routing rules, deciding a call
(``Decisions``), deadlines, listings, the reviewer's queue across agents, and ``DjangoRunStore``
itself, which owns one of each part.

- Listings filter, order, count and page in SQL, in one statement: the page with its calls, the
  exact total (a counter the database keeps, or a COUNT of a filter's matches), snapshots never
  loaded.
- Exactly once: claims, and decisions on SQLite, happen in a short transaction that locks the run
  row (``SELECT ... FOR UPDATE`` on PostgreSQL; on SQLite ``BEGIN IMMEDIATE`` serializes writers),
  then write with conditional UPDATEs (``action IS NULL``; ``status`` and ``version`` unchanged), so
  a lost race changes nothing. On PostgreSQL a decision is one conditional statement at the version
  read instead (the approval path's round trips), tried again when another decision came first.
- No transaction outlives a store call, and no store call waits on a model or a tool.
- Reads use plain rows (``values()``), not model instances: listings are on the dashboard's hot path."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, NamedTuple, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Exists, F, Field, OuterRef, Q, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from agents_runtime import Continuation, RunAlreadyDecided, RunNotFound, RunUnreadable
from agents_runtime.grants import (
    Grant,
    GrantNotFound,
    GrantRequest,
    GrantScope,
    GrantStore,
    GrantUnavailable,
    narrowest_first,
)
from agents_runtime.routing import Route, Rule, RuleNotFound, RuleRequest, RuleStore, renumbered
from agents_runtime.store import (
    CONTINUING_DETAIL,
    INTERRUPTED_AFTER_START_DETAIL,
    INTERRUPTED_DETAIL,
    AgentRun,
    AgentRunToolCall,
    CallKind,
    Deadline,
    DeadlineChange,
    DeadlineRule,
    Decision,
    DecisionAction,
    DecisionReceipt,
    DecisionRule,
    Delegation,
    Outcome,
    ParkedCall,
    RunEnding,
    RunQuery,
    RunStore,
    StoredRun,
    Suspension,
    Vote,
    completed_detail,
    construct,
    deadline_from_json,
    deadline_to_json,
    decision_conflict,
    failed_detail,
    recheck_detail,
    suspended_again_detail,
    waiting_call,
    waiting_detail,
    waiting_run,
)
from agents_runtime.untrusted import clean_text
from approvals.models import (
    DECIDING_BATCH,
    RECORD_FIELDS,
    AuditEntry,
    EndedRun,
    GrantRecord,
    ParkedCallRecord,
    ParkedCallRecordQuerySet,
    QueueScope,
    RoutingRule,
    RunRecord,
    RunRecordQuerySet,
    RunStatus,
    Series,
    ThreadMessage,
    add_counts,
    current_channel,
    queue_condition,
)
from approvals.server import database

# Rows and records ---------------------------------------------------------------------------------
# Reading runs: which columns a run and its calls are read from, the statements that read them,
# and rows <-> the runtime's records.
#
# The hottest reads (every decision, claim and continuation reads one run and its calls by run id; a
# listing's statement is ``listing_page``'s, compiled the same way) are the statements the ORM builds,
# compiled once per shape. Building those queries (some thirty columns) costs about a millisecond of
# CPU each, several times running them, and they never change: each is compiled once per shape (by run
# id or by run id and agent, with or without the snapshot, locked or not) and database, then run on the
# calling thread's connection through the ORM's own converters.

logger = logging.getLogger(__name__)


# Stored value -> word; a dict lookup per row is cheaper than calling the enum.
_CALL_KINDS = {kind.value: kind for kind in CallKind}
_ACTIONS = {action.value: action for action in DecisionAction}

#: Columns a StoredRun is built from (the snapshot is added only where it is handed out).
RUN_COLUMNS = (
    "pk",
    "run_id",
    "agent_id",
    "thread_id",
    "resource_id",
    "parent_run_id",
    "created_at",
    "suspended_at",
    "status",
    "version",
    "interrupted",
    "history",
    "started_by",
)
#: Also read where one run is fetched to act on, to reclaim it first if its lease ran out.
LEASE_COLUMNS = ("lease_expires_at",)
CALL_COLUMNS = (
    "id",
    "run_id",  # the run row's primary key
    "tool_call_id",
    "tool_name",
    "kind",
    "args",
    "suspend_payload",
    "suspend_schema",
    "resume_schema",
    "delegation",
    "action",
    "actor",
    "decided_at",
    "reason",
    "resume_data",
    "edited_args",
    "grant_id",
    "tool_started_at",
    "context",
    "expires_at",
    "deadline",
    "escalated_to",
    "votes",
)

Row = Mapping[str, Any]
JOINED_CALL_COLUMNS = tuple(f"calls__{name}" for name in CALL_COLUMNS if name != "run_id")


def utc(value: datetime) -> datetime:
    if value.tzinfo is UTC:  # as psycopg reads them in a UTC session: kept, not copied
        return value
    # Naive datetimes are taken as UTC, like everywhere else in the runtime.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class CorruptRow(ValueError):
    """A stored row that cannot be turned back into the runtime's records."""


def decision_columns(decision: Decision) -> dict[str, Any]:
    return {
        "action": decision.action,
        "actor": decision.actor,
        "decided_at": utc(decision.decided_at),
        "reason": decision.reason,
        "resume_data": decision.resume_data,
        "edited_args": decision.edited_args,
        "grant_id": decision.grant_id,
    }


def votes_column(votes: Iterable[Decision]) -> list[dict[str, Any]]:
    return [replace(v, decided_at=utc(v.decided_at)).to_json() for v in votes]


def decided_call(call: ParkedCall, decision: Decision) -> ParkedCall:
    # What a round trip through the database gives back (aware UTC times).
    return replace(call, decision=replace(decision, decided_at=utc(decision.decided_at)))


def stored_call(call: ParkedCall) -> ParkedCall:
    return call if call.decision is None else decided_call(call, call.decision)


def overturned(row: Row) -> dict[str, Any]:
    """A history entry for a decision an interrupted continuation did not carry out.

    Same shape as ``agents_runtime.store.reclaimed_calls`` writes; tolerant of odd rows, because
    reclaiming must never fail.
    """
    decided_at = row["decided_at"]
    return {
        "tool_call_id": row["tool_call_id"],
        "tool_name": row["tool_name"],
        "action": row["action"],
        "decided_at": None if decided_at is None else utc(decided_at).isoformat(),
        "actor": row["actor"],
        "reason": row["reason"],
        "resume_data": row["resume_data"],
        "edited_args": row["edited_args"],
    }


def call_records(run_pk: int, calls: Iterable[ParkedCall]) -> list[ParkedCallRecord]:
    records = []
    for position, call in enumerate(calls):
        delegation = call.delegation
        records.append(
            ParkedCallRecord(
                run_id=run_pk,
                position=position,
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                kind=call.kind,
                args=call.args,
                suspend_payload=call.suspend_payload,
                suspend_schema=call.suspend_schema,
                resume_schema=call.resume_schema,
                delegation=None
                if delegation is None
                else {
                    "tool_call_id": delegation.tool_call_id,
                    "inner_run_id": delegation.inner_run_id,
                    "inner_tool_call_id": delegation.inner_tool_call_id,
                    "agent_id": delegation.agent_id,
                },
                context=call.context,
                votes=votes_column(call.votes),
                tool_started_at=None if call.tool_started_at is None else utc(call.tool_started_at),
                expires_at=None if call.expires_at is None else utc(call.expires_at),
                deadline=deadline_to_json(call.deadline),
                escalated_to=call.escalated_to,
                **({} if call.decision is None else decision_columns(call.decision)),
            )
        )
    return records


def _optional_dict(row: Row, name: str) -> dict[str, Any] | None:
    value = row[name]
    if value is not None and not isinstance(value, dict):
        raise CorruptRow(f"call {row['tool_call_id']!r}: {name} is a {type(value).__name__}, not an object")
    return value


def _call_head(row: Row) -> tuple[str, str, CallKind]:
    tool_call_id, tool_name = row["tool_call_id"], row["tool_name"]
    kind = _CALL_KINDS.get(row["kind"])
    if not isinstance(tool_call_id, str) or not tool_call_id or not isinstance(tool_name, str):
        raise CorruptRow(f"call row {row['id']} has no tool call id or tool name")
    if kind is None:
        raise CorruptRow(f"call {tool_call_id!r} has an unknown kind {row['kind']!r}")
    return tool_call_id, tool_name, kind


def _delegation(row: Row, tool_call_id: str) -> Delegation | None:
    delegation = _optional_dict(row, "delegation")
    if delegation is None:
        return None
    try:
        return Delegation(
            tool_call_id=str(delegation["tool_call_id"]),
            inner_run_id=str(delegation["inner_run_id"]),
            inner_tool_call_id=str(delegation["inner_tool_call_id"]),
            agent_id=None if delegation.get("agent_id") is None else str(delegation["agent_id"]),
        )
    except KeyError as exc:
        raise CorruptRow(f"call {tool_call_id!r}: delegation lacks {exc}") from exc


def _decision(row: Row, tool_call_id: str) -> Decision | None:
    if row["action"] is None:
        return None
    action = _ACTIONS.get(row["action"])
    if action is None or row["decided_at"] is None:
        raise CorruptRow(f"call {tool_call_id!r} has an invalid decision ({row['action']!r})")
    return Decision(
        action=action,
        decided_at=utc(row["decided_at"]),
        actor=row["actor"],
        reason=row["reason"],
        resume_data=row["resume_data"],
        edited_args=_optional_dict(row, "edited_args"),
        grant_id=row["grant_id"],
    )


def _context(row: Row) -> dict[str, Any] | None:
    return context if isinstance(context := row.get("context"), dict) else None


def _optional_utc(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


def parked_call(row: Row) -> ParkedCall:
    tool_call_id, tool_name, kind = _call_head(row)
    return construct(
        ParkedCall,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        kind=kind,
        args=_optional_dict(row, "args"),
        suspend_payload=row["suspend_payload"],
        suspend_schema=_optional_dict(row, "suspend_schema"),
        resume_schema=_optional_dict(row, "resume_schema"),
        delegation=_delegation(row, tool_call_id),
        decision=_decision(row, tool_call_id),
        tool_started_at=_optional_utc(row["tool_started_at"]),
        context=_context(row),
        expires_at=_optional_utc(row["expires_at"]),
        deadline=_deadline(row),
        escalated_to=row["escalated_to"],
        votes=_votes(row),
    )


def listed_call_from_row(row: Row) -> AgentRunToolCall | None:
    """An undecided call's row as listings show it (``waiting_call``), checked as ``parked_call``
    checks it; None for a decided call's row (checked too: an unreadable row leaves its run out)."""
    if row["action"] is not None:
        parked_call(row)
        return None
    tool_call_id, tool_name, kind = _call_head(row)
    delegation = _delegation(row, tool_call_id)
    deadline = _deadline(row)
    return waiting_call(
        kind,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        args=_optional_dict(row, "args"),
        suspend_payload=row["suspend_payload"],
        resume_schema=_optional_dict(row, "resume_schema"),
        suspend_schema=_optional_dict(row, "suspend_schema"),
        tool_started_at=_optional_utc(row["tool_started_at"]),
        context=_context(row),
        via_agent_id=None if delegation is None else delegation.agent_id,
        expires_at=_optional_utc(row["expires_at"]),
        on_expiry=None if deadline is None else deadline.on_expiry,
        escalated_to=row["escalated_to"],
        approved_by=tuple(vote.actor or "" for vote in _votes(row)),
    )


def _deadline(row: Row) -> Deadline | None:
    if row["deadline"] is None:
        return None
    try:
        return deadline_from_json(row["deadline"])
    except ValueError as exc:  # pydantic's ValidationError is one
        raise CorruptRow(f"call {row['tool_call_id']!r} has an unreadable deadline") from exc


def _votes(row: Row) -> tuple[Decision, ...]:
    votes = row.get("votes")
    if not votes:
        return ()
    try:
        return tuple(Decision.from_json(v) for v in votes)
    except (TypeError, ValueError) as exc:
        raise CorruptRow(f"call {row['tool_call_id']!r} has unreadable votes") from exc


def parked_calls(rows: Iterable[Row]) -> tuple[ParkedCall, ...]:
    return tuple(parked_call(row) for row in rows)


def _history(row: Row) -> list[dict[str, Any]]:
    history = row["history"]
    if not isinstance(history, list) or not all(isinstance(entry, dict) for entry in history):
        raise CorruptRow("history is not a list of objects")
    return history


def stored_run(row: Row, calls: tuple[ParkedCall, ...], *, with_snapshot: bool) -> StoredRun:
    history = _history(row)
    snapshot: dict[str, Any] | None = None
    if with_snapshot:
        snapshot = row["snapshot"]
        if not isinstance(snapshot, dict):
            raise CorruptRow(f"snapshot is a {type(snapshot).__name__}, not an object")
    return construct(
        StoredRun,
        run_id=row["run_id"],
        agent_id=row["agent_id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        parent_run_id=row["parent_run_id"],
        created_at=utc(row["created_at"]),
        suspended_at=utc(row["suspended_at"]),
        status=cast(Any, str(row["status"])),
        version=row["version"],
        interrupted=row["interrupted"],
        calls=calls,
        snapshot=snapshot,
        history=tuple(history),
        started_by=row.get("started_by"),
    )


def listed_run_from_rows(row: Row, call_rows: list[Row]) -> AgentRun:
    """A suspended run's row and its calls' as listings show it (``waiting_run``), checked as
    ``stored_run`` and ``parked_call`` check them, without making those records first."""
    _history(row)
    return waiting_run(
        run_id=row["run_id"],
        agent_id=row["agent_id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        suspended_at=utc(row["suspended_at"]),
        created_at=utc(row["created_at"]),
        tool_calls=[call for call in map(listed_call_from_row, call_rows) if call is not None],
        parent_run_id=row["parent_run_id"],
        started_by=row.get("started_by"),
        interrupted=row["interrupted"],
    )


def _stored_listed(row: Row, call_rows: list[Row]) -> StoredRun:
    return stored_run(row, parked_calls(call_rows), with_snapshot=False)


# -- the hottest reads, compiled once per shape ----------------------------------------------------

#: Stand-ins for the values, found again among the compiled statement's parameters.
_RUN_ID = "\x00run_id"
_AGENT_ID = "\x00agent_id"
_RUN_PKS = -424242  # (a primary key: the ORM checks the type of what ``run__in`` takes)


@dataclass(frozen=True)
class Statement:
    sql: str
    params: tuple[Any, ...]
    names: tuple[str, ...]
    #: The ORM's converters by column position (JSON, datetimes on SQLite...), as its iterables use them.
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]


#: Compiled statements by shape (and database), the least recently used dropped past ``_KEPT``:
#: a listing's page window is part of its shape, so shapes are not a fixed few.
_compiled: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_compiling = threading.Lock()
_KEPT = 512


def _columns(with_snapshot: bool) -> tuple[str, ...]:
    return (*RUN_COLUMNS, *LEASE_COLUMNS, *(("snapshot",) if with_snapshot else ()), *JOINED_CALL_COLUMNS)


def statement_of(query: Any, using: str) -> Statement:
    """A ``values()`` query's SQL, parameters, column names and the ORM's converters for them."""
    compiler = query.get_compiler(using)
    sql, params = compiler.as_sql()
    names = (*query.extra_select, *query.values_select, *query.annotation_select)
    if len(names) != len(compiler.select):
        raise AssertionError(f"Unexpected shape of a compiled read: {sql}")
    converters = compiler.get_converters([expression for expression, _, _ in compiler.select])
    return Statement(
        sql=sql,
        params=tuple(params),
        names=names,
        converters=tuple(
            (pos, tuple(_json_empties_first(c) for c in convs), expression)
            for pos, (convs, expression) in converters.items()
        ),
    )


def _json_empties_first(convert: Callable[..., Any]) -> Callable[..., Any]:
    """A JSON field's decoding, which gives the value most rows hold without the decoder: a run's
    history and a call's votes are ``[]`` nearly always; decoding them cost about an eighth of turning a
    listing's rows into records. Any other converter is kept as it is."""
    if not isinstance(getattr(convert, "__self__", None), models.JSONField):
        return convert

    def converted(value: Any, expression: Any, connection: Any) -> Any:
        if value == "[]":
            return []
        if value == "{}":
            return {}
        return convert(value, expression, connection)

    return converted


def _statement(query: Any, using: str, stand_ins: set[Any]) -> Statement:
    statement = statement_of(query, using)
    if set(statement.params) - stand_ins:
        raise AssertionError(f"Unexpected parameters in a compiled read: {statement.sql}")
    return statement


def compiled_for[T](key: tuple[Any, ...], compile_: Callable[[], T]) -> T:
    """What ``compile_()`` gives for the shape ``key``: compiled the first time it is asked for."""
    with _compiling:
        found = _compiled.get(key)
        if found is None:
            found = _compiled[key] = compile_()
            while len(_compiled) > _KEPT:
                _compiled.popitem(last=False)
        else:
            _compiled.move_to_end(key)
        return cast(T, found)


def run_statement(using: str, sql: str, params: list[Any], statement: Statement) -> list[Row]:
    """``sql`` (``statement``'s, or a variant of it) run with ``params``, its rows converted."""
    connection = connections[using]
    with database.cursor(using) as cursor:
        cursor.execute(sql, params)
        fetched = cursor.fetchall()
    names = statement.names
    converting = [(names[pos], convs, expression) for pos, convs, expression in statement.converters]
    rows: list[Row] = []
    for fetched_row in fetched:
        row = dict(zip(names, fetched_row, strict=True))
        for name, convs, expression in converting:
            value = row[name]
            if value is not None:  # every converter of ours and Django's gives NULL back as None
                for convert in convs:
                    value = convert(value, expression, connection)
                row[name] = value
        rows.append(row)
    return rows


def _compile_one_run(using: str, by_agent: bool, with_snapshot: bool, lock: bool) -> Statement:
    runs = RunRecord.objects.using(using).filter(run_id=_RUN_ID)
    if by_agent:
        runs = runs.filter(agent_id=_AGENT_ID)
    if lock:
        # OF: lock the run row only (PostgreSQL refuses to lock the nullable side of a join).
        runs = runs.select_for_update(of=("self",))
    query = runs.order_by("calls__position").values(*_columns(with_snapshot)).query
    return _statement(query, using, {_RUN_ID, _AGENT_ID})


def one_run_rows(
    using: str, *, run_id: str, agent_id: str | None, with_snapshot: bool, lock: bool
) -> list[Row]:
    """The run's row joined with each of its calls (one row with empty call columns when it has none),
    calls in their order; empty when no run has this id (and agent)."""
    vendor = connections[using].vendor
    statement = compiled_for(
        ("one run", using, vendor, agent_id is not None, with_snapshot, lock),
        lambda: _compile_one_run(using, agent_id is not None, with_snapshot, lock),
    )
    values = {_RUN_ID: run_id, _AGENT_ID: agent_id}
    return run_statement(using, statement.sql, [values[p] for p in statement.params], statement)


# The audit row of a decision ----------------------------------------------------------------------
# The audit row of a decision, as the run store writes it in the step that records the decision.
#
# ``DjangoRunStore.decide`` writes the row in the same transaction (SQLite) or the same statement
# (PostgreSQL) as the decision itself, so a tool can never run without its decision on record; the
# steps that end, park again or take back a run settle its ``continuing`` rows (``settle_sql``). The
# words the audit log and the dashboard use for how a run went on are spelled here, once.

# -- what the record says ------------------------------------------------------------------------


def ending_outcome(ending: RunEnding | None) -> tuple[str, str]:
    """The outcome and detail of a run that ended (``finish``)."""
    if ending is None or ending.status == "failed":
        error = ending.detail if ending is not None and ending.detail else "unknown error"
        return Outcome.FAILED, clean_text(failed_detail(error))
    return Outcome.COMPLETED, clean_text(completed_detail(ending.detail))


# -- the row -------------------------------------------------------------------------------------

#: Columns of the decision row: the record's fields, the user it links to, its bulk decision and when
#: the call was parked.
COLUMNS = (
    "user_id",
    *RECORD_FIELDS,
    "preview",
    "fingerprint",
    "shown_at",
    "batch_id",
    "grant_id",
    "parked_at",
    "via_agent_id",
)


def vote_detail(vote: Vote) -> str:
    names = ", ".join(v.actor or "?" for v in vote.votes)
    more = vote.required - len(vote.votes)
    return f"Approval {len(vote.votes)} of {vote.required} ({names}); the call waits for {more} more."


def decision_values(
    run: StoredRun,
    call: ParkedCall,
    decision: Decision,
    *,
    claims: bool,
    calls_after: Sequence[ParkedCall],
    vote: Vote | None = None,
) -> dict[str, Any]:
    """The audit row of ``decision`` on ``call`` (``user_id`` is looked up from the username)."""
    if vote is not None:
        outcome, detail = Outcome.VOTE_RECORDED, vote_detail(vote)
    elif claims:
        outcome, detail = Outcome.CONTINUING, CONTINUING_DETAIL
    else:
        waiting = [c for c in calls_after if c.decision is None]
        outcome, detail = Outcome.SUSPENDED_AGAIN, waiting_detail(c.tool_name for c in waiting)
    if decision.action == DecisionAction.EXPIRE:
        # Its own outcome, never settled into the run's: "nobody answered" stays apart from "no".
        taken = "approved" if decision.resume_data == {"approved": True} else "declined"
        outcome, detail = (
            Outcome.EXPIRED,
            f"{decision.reason or 'Nobody answered in time'}: {taken}. {detail}",
        )
    return call_row_values(
        run, call, at=decision.decided_at, actor=decision.actor, action=decision.action,
        reason=decision.reason, outcome=outcome, detail=detail,
    ) | {
        # (An expiry's is what its deadline did, {"approved": bool}: the record says it from there.)
        "resume_data": (
            decision.resume_data
            if decision.action in (DecisionAction.RESUME, DecisionAction.EXPIRE)
            else None
        ),
        "edited_args": decision.edited_args if decision.action == DecisionAction.APPROVE else None,
        "batch_id": DECIDING_BATCH.get(),
        "fingerprint": decision.fingerprint or "",
        "shown_at": decision.shown_at,
    } | _grant_values(decision)  # fmt: skip


def _grant_values(decision: Decision) -> dict[str, Any]:
    """An approval a standing grant gave: which grant, through the ``grant`` channel; a routing
    rule's decision, through the ``rule`` channel (its actor says which rule)."""
    if decision.rule_id is not None:
        return {"grant_id": None, "channel": "rule"}
    if decision.grant_id is None:
        return {"grant_id": None}
    return {"grant_id": decision.grant_id, "channel": "grant"}


def call_row_values(
    run: Any,
    call: Any,
    *,
    at: Any,
    actor: str | None,
    action: str,
    reason: str | None,
    outcome: str,
    detail: str,
) -> dict[str, Any]:
    """The audit row of something done to a parked call (a decision, a deadline change): who, what,
    which call as it was shown, and what came of it."""
    return {
        "created_at": at,
        "user_id": None,
        "username": clean_text(actor or "")[:150],
        "agent_id": run.agent_id,
        "run_id": run.run_id,
        "thread_id": run.thread_id or "",
        "resource_id": run.resource_id or "",
        "tool_call_id": call.tool_call_id,
        "tool_name": call.tool_name,
        "via_agent_id": (call.delegation.agent_id if call.delegation is not None else None) or "",
        "args": call.args if call.kind == CallKind.APPROVAL else None,
        "preview": (call.context or {}).get("preview") if call.kind == CallKind.APPROVAL else None,
        "suspend_payload": call.suspend_payload if call.kind == CallKind.INPUT else None,
        "action": action,
        "reason": clean_text(reason or ""),
        "resume_data": None,
        "edited_args": None,
        "outcome": outcome,
        "outcome_detail": detail,
        "channel": current_channel(),
        "batch_id": None,
        "parked_at": run.suspended_at,
    }


def grant_detail(grant: Grant) -> str:
    """What a grant allows, as its audit row says it: "refund for this thread t-1, at most 3 uses,
    until 2026-12-04 18:00 UTC, when amount_cents <= 10000"."""
    scope = GrantScope(grant.scope)
    parts = [f"{grant.tool_name} for {scope.label}" + (f" {grant.scope_value}" if grant.scope_value else "")]
    if grant.max_uses is not None:
        parts.append(f"at most {grant.max_uses} use{'s' if grant.max_uses != 1 else ''}")
    if grant.expires_at is not None:
        parts.append(f"until {grant.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC")
    parts.append(f"when {grant.condition}" if grant.condition else "whatever the arguments")
    if grant.covers_risky:
        parts.append("risky calls too")
    return f"Standing grant #{grant.id}: {', '.join(parts)}."


def grant_row_values(grant: Grant, *, action: DecisionAction, actor: str, at: datetime) -> dict[str, Any]:
    """The audit row of a standing grant made (``ALLOW``) or revoked (``REVOKE``) by ``actor``: the
    grant's terms in the detail, the run and call it was made from, and a link to the grant."""
    return {
        "created_at": at,
        "user_id": None,
        "username": clean_text(actor)[:150],
        "agent_id": grant.agent_id,
        "run_id": grant.from_run_id or "",
        "thread_id": grant.scope_value if grant.scope == GrantScope.THREAD else "",
        "resource_id": grant.scope_value if grant.scope == GrantScope.RESOURCE else "",
        "tool_call_id": grant.from_tool_call_id or "",
        "tool_name": grant.tool_name,
        "args": None,
        "suspend_payload": None,
        "action": action,
        "reason": "",
        "resume_data": None,
        "edited_args": None,
        "outcome": Outcome.RECORDED,
        "outcome_detail": grant_detail(grant),
        "channel": current_channel(),
        "batch_id": None,
        "grant_id": grant.id,
        "parked_at": None,
    }


def rule_detail(rule: Rule, change: str) -> str:
    """What a rule says, as its audit rows say it: "Rule #3 added (1st for refund): when
    amount_cents < 500, allow without asking."."""
    when = f"when {rule.condition}" if rule.condition else "whatever the arguments"
    why = f" Reason: {rule.reason}" if rule.reason else ""
    place = f"number {rule.position} for {rule.tool_name}"
    return f"Rule #{rule.id} {change} ({place}): {when}, {rule.route.label}.{why}"


def rule_row_values(rule: Rule, *, change: str, actor: str, at: datetime) -> dict[str, Any]:
    """The audit row of a routing rule ``change``d ("added", "changed", "deleted") by ``actor``."""
    return {
        "created_at": at,
        "user_id": None,
        "username": clean_text(actor)[:150],
        "agent_id": rule.agent_id,
        "run_id": "",
        "thread_id": "",
        "resource_id": "",
        "tool_call_id": "",
        "tool_name": rule.tool_name,
        "args": None,
        "suspend_payload": None,
        "action": DecisionAction.ROUTE,
        "reason": "",
        "resume_data": None,
        "edited_args": None,
        "outcome": Outcome.RECORDED,
        "outcome_detail": clean_text(rule_detail(rule, change)),
        "channel": current_channel(),
        "batch_id": None,
        "grant_id": None,
        "parked_at": None,
    }


def create_decision_row(using: str, values: dict[str, Any]) -> int:
    """The write for the store's locking transaction (SQLite); the row's id.

    One statement: the decider's user id is looked up inside the insert, as on PostgreSQL.
    """
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(insert_sql(None), insert_params(values, connection))
        (row_id,) = cursor.fetchone()
    return int(row_id)


def insert_sql(source: str | None) -> str:
    """A statement inserting the decision row (once per row of ``source``, a CTE's name, on
    PostgreSQL; once when None) and returning its id.

    Its parameters are ``insert_params``; the user is looked up in the same statement.
    """
    user = get_user_model()
    username_column = user._meta.get_field(user.USERNAME_FIELD).column  # type: ignore[union-attr]
    pk_column = user._meta.pk.column
    placeholders = ", ".join(
        f"(SELECT {pk_column} FROM {user._meta.db_table} WHERE {username_column} = %s)"
        if name == "user_id"
        else "%s"
        for name in COLUMNS
    )
    rows = f"VALUES ({placeholders})" if source is None else f"SELECT {placeholders} FROM {source}"
    return (
        f"INSERT INTO {AuditEntry._meta.db_table} ({', '.join(_column(n) for n in COLUMNS)})"
        f" {rows} RETURNING id"
    )


def insert_params(values: dict[str, Any], connection: BaseDatabaseWrapper) -> list[Any]:
    params: list[Any] = []
    for name in COLUMNS:
        if name == "user_id":
            params.append(values["username"])
            continue
        field = AuditEntry._meta.get_field(name)
        value = values[name] if name in values else field.get_default()  # type: ignore[union-attr]
        params.append(field.get_db_prep_save(value, connection))  # type: ignore[union-attr]
    return params


def settle_sql(run_id_param: str = "%s", *, guard: str = "") -> str:
    """SQL settling a run's ``continuing`` rows; parameters: outcome, detail, run id."""
    table = AuditEntry._meta.db_table
    return (
        f"UPDATE {table} SET outcome = %s, outcome_detail = %s"
        f" WHERE run_id = {run_id_param} AND outcome = '{Outcome.CONTINUING.value}'{guard}"
    )


def _column(name: str) -> str:
    column: str = AuditEntry._meta.get_field(name).column  # type: ignore[union-attr,assignment]
    return column


# Raw SQL ------------------------------------------------------------------------------------------
# The run store's raw SQL: statements on the approval path, one round trip each.


# Uses the partial index run_running_lease_idx; the status is a literal so SQLite can prove that.
EXPIRED_SQL = (
    f"SELECT id, version FROM {RunRecord._meta.db_table}"
    f" WHERE status = '{RunStatus.RUNNING.value}' AND lease_expires_at < %s"
)


FINISH_SQL = (
    f"DELETE FROM {RunRecord._meta.db_table}"
    f" WHERE run_id = %s AND version = %s AND status = '{RunStatus.RUNNING.value}' AND lease_expires_at >= %s"
    " RETURNING agent_id, thread_id, resource_id, parent_run_id, created_at"
)
#: The ended run's permanent record (``EndedRun``): the run's columns from ``ended``, then the
#: parameters ended_at, status, detail, transcript. A run id ends once; should one ever come back,
#: the first record stays and the run still ends.
_RECORD_ENDED_SQL = (
    f"INSERT INTO {EndedRun._meta.db_table}"
    " (run_id, agent_id, thread_id, resource_id, parent_run_id, created_at, ended_at, status, detail,"
    " transcript)"
    " SELECT %s, agent_id, thread_id, resource_id, parent_run_id, created_at, %s, %s, %s, %s FROM ended"
    " ON CONFLICT (run_id) DO NOTHING"
)
#: PostgreSQL: the same and the thread's new messages, in one statement.
FINISH_REMEMBERING_SQL = (
    f"WITH ended AS ({FINISH_SQL}), remembered AS ("
    f" INSERT INTO {ThreadMessage._meta.db_table} (agent_id, thread_id, messages, created_at)"
    " SELECT agent_id, thread_id, %s, now() FROM ended WHERE thread_id IS NOT NULL AND %s"
    " RETURNING 1),"
    f" recorded AS ({_RECORD_ENDED_SQL} RETURNING 1),"
    f" settled AS ({settle_sql(guard=' AND EXISTS (SELECT 1 FROM ended)')} RETURNING 1)"
    " SELECT count(*) FROM ended"
)


#: The write-ahead "the tool is starting" marker, only while the claim at a version holds (current
#: version, still running, lease not run out). One round trip: it is on every approval's path.
MARK_TOOL_STARTED_SQL = (
    f"UPDATE {ParkedCallRecord._meta.db_table} SET tool_started_at = %s"
    f" WHERE tool_call_id = %s AND run_id = (SELECT id FROM {RunRecord._meta.db_table}"
    f" WHERE run_id = %s AND version = %s AND status = '{RunStatus.RUNNING.value}'"
    " AND lease_expires_at >= %s)"
)

#: A claim's continuation takes its lease, once: only a claim without a lease yet takes one. One
#: round trip on every approval's path, as the mark above.
START_CONTINUATION_SQL = (
    f"UPDATE {RunRecord._meta.db_table} SET lease_expires_at = %s"
    f" WHERE run_id = %s AND version = %s AND lease_expires_at IS NULL"
    f" AND status = '{RunStatus.RUNNING.value}'"
)

DECISION_COLUMN_ORDER = ("action", "actor", "decided_at", "reason", "resume_data", "edited_args")


def _at_version_sql(columns: tuple[str, ...]) -> str:
    """PostgreSQL: write ``columns`` of an undecided call if its run is still at the version it was
    read at (see ``DjangoRunStore._write_decision_at_version``), with the audit row."""
    return (
        # A claim has no lease until its continuation starts (``DjangoRunStore.start_continuation``),
        # unless it starts at once (the decision's ``start``).
        f"WITH run AS (UPDATE {RunRecord._meta.db_table}"
        " SET version = %s, status = %s, lease_expires_at = %s"
        f" WHERE id = %s AND version = %s AND status = '{RunStatus.SUSPENDED.value}' RETURNING id),"
        f" call AS (UPDATE {ParkedCallRecord._meta.db_table}"
        f" SET {', '.join(f'{name} = %s' for name in columns)}"
        " WHERE id = %s AND action IS NULL AND EXISTS (SELECT 1 FROM run) RETURNING id),"
        # The decision's audit row, in the same statement: written exactly when the call's is.
        f" audit AS ({insert_sql('call')})"
        " SELECT (SELECT count(*) FROM run), (SELECT count(*) FROM call), (SELECT id FROM audit)"
    )


@cache
def decide_at_version_sql() -> str:
    # Built on first use: naming the user table needs the app registry.
    return _at_version_sql(DECISION_COLUMN_ORDER)


@cache
def vote_at_version_sql() -> str:
    """The same for a vote (``tool(approvals=N)``): the call's votes instead of its decision."""
    return _at_version_sql(("votes",))


#: How often a decision is tried again on PostgreSQL when other decisions on the run come first.
OPTIMISTIC_ATTEMPTS = 16


# Tables and leases --------------------------------------------------------------------------------
# What the run store's parts share: its settings, its tables, reading one run (after lease reclaim),
# taking back runs whose claim ran out, and giving back connections. ``DjangoRunStore`` owns one
# ``Tables`` and hands it to its parts (decisions, grants, deadlines).


_DEFAULT_LEASE_SECONDS = 300


def utc_now() -> datetime:
    return datetime.now(UTC)


class Tables:
    """Where and how the run store keeps runs: on the default database (or ``using``); safe to share
    between threads.

    ``lease`` defaults to ``settings.RUN_LEASE_SECONDS`` (300), read when first needed. Building a
    store never touches the database, so it may be built at import time.
    """

    def __init__(
        self,
        lease: timedelta | None = None,
        *,
        using: str = "default",
        listings_using: str | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._lease = lease
        self.using = using
        #: Where listings are read (a read replica: ``DATABASE_REPLICA_URL``); the rest is on ``using``.
        self.listings_using = listings_using or using
        #: Where "now" comes from (lease expiry); tests move it instead of sleeping.
        self.clock = clock

    @property
    def lease(self) -> timedelta:
        if self._lease is not None:
            return self._lease
        return timedelta(seconds=getattr(settings, "RUN_LEASE_SECONDS", _DEFAULT_LEASE_SECONDS))

    @lease.setter
    def lease(self, value: timedelta) -> None:
        self._lease = value

    # -- plumbing ---------------------------------------------------------------------------------

    def runs(self) -> RunRecordQuerySet:
        return RunRecord.objects.using(self.using)

    def calls(self) -> ParkedCallRecordQuerySet:
        return ParkedCallRecord.objects.using(self.using)

    def user(self, username: str) -> Any:
        """The user of that name (who made a grant or a rule), or None if there is none."""
        model = get_user_model()
        return (
            model._default_manager.db_manager(self.using).filter(**{model.USERNAME_FIELD: username}).first()
        )

    @contextmanager
    def connection_scope(self, using: str | None = None) -> Iterator[None]:
        """Give a server connection back after each call made outside a transaction.

        From purely async code the runtime's calls run on asgiref's shared thread (``run_sync``),
        which Django's request cycle never cleans up: without this it would keep a PostgreSQL
        connection (a pool slot) for its lifetime. In a request, the connection is not held while the
        run waits on a model. Closed as ``CONN_MAX_AGE`` says: at once on PostgreSQL (back to the
        pool), never on SQLite (a file handle the thread keeps) unless it became unusable.
        """
        try:
            yield
        finally:
            connection = connections[using or self.using]
            if not connection.in_atomic_block:
                connection.close_if_unusable_or_obsolete()

    def one_run(
        self, run_id: str, *, agent_id: str | None = None, with_snapshot: bool, lock: bool = False
    ) -> tuple[Row, list[Row]] | None:
        """One run row (of ``agent_id``'s, if given) and its call rows, in one query (a LEFT JOIN; the
        run row locked if asked)."""
        rows = one_run_rows(
            self.using, run_id=run_id, agent_id=agent_id, with_snapshot=with_snapshot, lock=lock
        )
        if not rows:
            return None
        run = {name: value for name, value in rows[0].items() if not name.startswith("calls__")}
        calls: list[Row] = [
            {name: row[f"calls__{name}"] for name in CALL_COLUMNS if name != "run_id"} | {"run_id": run["pk"]}
            for row in rows
            if row["calls__id"] is not None
        ]
        return run, calls

    def current_run(
        self, run_id: str, *, agent_id: str | None = None, with_snapshot: bool, lock: bool = False
    ) -> tuple[Row, list[Row]] | None:
        """``one_run`` as of after lease reclaim: a run whose claim ran out comes back suspended.

        Only this run is checked (its row says when its lease ends), not every claimed run: a
        global sweep would cost a query on every decision. A sub-agent's run also changes when its
        supervisor is reclaimed, so for those the sweep runs after all.
        """
        found = self.one_run(run_id, agent_id=agent_id, with_snapshot=with_snapshot, lock=lock)
        if found is None:
            return None
        row = found[0]
        now = self.clock()
        expires = row["lease_expires_at"]
        if row["status"] == RunStatus.RUNNING and expires is not None and utc(expires) < now:
            self.reclaim(row["pk"], row["version"], now)
        elif row["parent_run_id"] is None or not self.reclaim_expired():
            return found
        return self.one_run(run_id, agent_id=agent_id, with_snapshot=with_snapshot, lock=lock)

    # -- lease reclaim ----------------------------------------------------------------------------

    def reclaim_expired(self) -> list[tuple[str, str]]:
        """Suspend again every claimed run whose lease ran out (an indexed probe; usually empty).

        ``(agent_id, run_id)`` of each run it reclaimed.
        """
        now = self.clock()
        # Raw SQL: this runs before every listing, and the ORM would double its cost.
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(EXPIRED_SQL, [connection.ops.adapt_datetimefield_value(now)])
            expired = cursor.fetchall()
        reclaimed = (self.reclaim(pk, version, now) for pk, version in expired)
        return [run for run in reclaimed if run is not None]

    def reclaim(self, pk: int, version: int, now: datetime) -> tuple[str, str] | None:
        """Suspend the run again if its claim at ``version`` ran out: its ``(agent_id, run_id)``."""
        with transaction.atomic(using=self.using):
            held = self.runs().select_for_update().filter(pk=pk, version=version, lease_expires_at__lt=now)
            run = held.running().values("pk", "agent_id", "run_id", "version", "history").first()
            if run is None:  # renewed, finished or reclaimed by someone else meanwhile
                return None
            started = self.park_again(run, suspend=True)
            audit = AuditEntry.objects.using(self.using)
            if started:
                audit.settle(
                    run["run_id"],
                    Outcome.INTERRUPTED,
                    INTERRUPTED_AFTER_START_DETAIL,
                    tool_call_ids=started,
                )
            audit.settle(run["run_id"], Outcome.INTERRUPTED, INTERRUPTED_DETAIL)
            inner_runs = self.runs().select_for_update().children_of(run["run_id"])
            for inner in inner_runs.suspended().values("pk", "run_id", "version", "history"):
                self.park_again(inner, suspend=False)
            # One its continuation claimed but had not started yet when it died waits again too.
            unstarted = inner_runs.running().filter(lease_expires_at=None)
            for inner in unstarted.values("pk", "run_id", "version", "history"):
                self.park_again(inner, suspend=True)
        logger.warning(
            "Run %s: its continuation lost the lease; its calls wait for a decision again", run["run_id"]
        )
        return run["agent_id"], run["run_id"]

    def park_again(self, run: Row, *, suspend: bool) -> list[str]:
        """Move the run's decisions to its history and clear them (inside a transaction).

        Returns the decided calls whose tool had started (they keep their ``tool_started_at``).
        """
        decided = list(
            self.calls().filter(run=run["pk"]).decided().order_by("position").values(*CALL_COLUMNS)
        )
        if not decided and not suspend:
            return []
        history = run["history"] if isinstance(run["history"], list) else []
        self.calls().filter(pk__in=[row["id"] for row in decided]).update(
            action=None,
            actor=None,
            decided_at=None,
            reason=None,
            resume_data=None,
            edited_args=None,
            votes=[],
        )
        changes: dict[str, Any] = {
            "version": run["version"] + 1,
            "interrupted": True,
            "history": [*history, *(overturned(row) for row in decided)],
        }
        if suspend:
            changes.update(status=RunStatus.SUSPENDED, lease_expires_at=None)
        self.runs().filter(pk=run["pk"], version=run["version"]).update(**changes)
        return [row["tool_call_id"] for row in decided if row["tool_started_at"] is not None]


# Grants -------------------------------------------------------------------------------------------
# Standing grants in the Django store: keeping, revoking and finding them, and taking one use in the
# step that records the approval it gives (``Decisions``).
#
# A use is one conditional ``UPDATE ... SET uses = uses + 1`` on the grant's row, guarded by "not
# revoked, not used up, not expired", inside the decision's transaction. On PostgreSQL concurrent
# uses queue on the row's lock and each re-checks the guard on the row as the one before left it, so
# a grant of N uses approves exactly N calls; a revoke is the same row's update, so once it has
# committed no use passes the guard. If the decision itself then fails (the call was decided first),
# the transaction takes the use back.


def grant_of(row: GrantRecord) -> Grant:
    return Grant(
        id=row.pk,
        agent_id=row.agent_id,
        tool_name=row.tool_name,
        scope=GrantScope(row.scope),
        scope_value=row.scope_value or None,
        created_by=row.created_by_name,
        created_at=row.created_at,
        expires_at=row.expires_at,
        max_uses=row.max_uses,
        uses=row.uses,
        condition=row.condition,
        revoked_at=row.revoked_at,
        revoked_by=row.revoked_by_name or None,
        from_run_id=row.from_run_id or None,
        from_tool_call_id=row.from_tool_call_id or None,
        covers_risky=row.covers_risky,
        condition_failures=row.condition_failures,
        last_condition_error=row.last_condition_error or None,
        last_condition_error_at=row.last_condition_error_at,
    )


class Grants:
    """``GrantStore`` on the ORM: the part of ``DjangoRunStore`` that keeps grants. Making and revoking
    one writes its audit row in the same transaction (``grant_row_values``)."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def add_grant(self, request: GrantRequest) -> Grant:
        using = self.tables.using
        with self.tables.connection_scope(), transaction.atomic(using=using):
            creator = self.tables.user(request.created_by)
            row = GrantRecord.objects.db_manager(using).create(
                agent_id=request.agent_id,
                tool_name=request.tool_name,
                scope=GrantScope(request.scope).value,
                scope_value=request.scope_value or "",
                condition=request.condition,
                max_uses=request.max_uses,
                expires_at=request.expires_at,
                created_at=request.created_at,
                created_by=creator,
                created_by_name=request.created_by[:150],
                from_run_id=request.from_run_id or "",
                from_tool_call_id=request.from_tool_call_id or "",
                covers_risky=request.covers_risky,
            )
            grant = grant_of(row)
            record = grant_row_values(
                grant, action=DecisionAction.ALLOW, actor=request.created_by, at=request.created_at
            )
            create_decision_row(using, record)
            return grant

    def revoke_grant(self, grant_id: int, *, actor: str, at: datetime) -> Grant:
        using = self.tables.using
        with self.tables.connection_scope(), transaction.atomic(using=using):
            rows = GrantRecord.objects.db_manager(using)
            revoked = rows.filter(pk=grant_id, revoked_at__isnull=True).update(
                revoked_at=at, revoked_by_name=actor[:150]
            )
            row = rows.filter(pk=grant_id).first()
            if row is None:
                raise GrantNotFound(grant_id)
            grant = grant_of(row)
            if revoked:  # revoking twice keeps the first, and its one record
                create_decision_row(
                    using, grant_row_values(grant, action=DecisionAction.REVOKE, actor=actor, at=at)
                )
            return grant

    def get_grant(self, grant_id: int) -> Grant | None:
        with self.tables.connection_scope():
            row = GrantRecord.objects.db_manager(self.tables.using).filter(pk=grant_id).first()
            return None if row is None else grant_of(row)

    def live_grants(
        self, agent_id: str, tool_name: str, *, thread_id: str | None, resource_id: str | None, at: datetime
    ) -> list[Grant]:
        with self.tables.connection_scope():
            rows = GrantRecord.objects.db_manager(self.tables.using).filter(
                agent_id=agent_id, tool_name=tool_name
            )
            grants = [grant_of(row) for row in rows.live(at)]
        return narrowest_first([g for g in grants if g.in_scope(thread_id, resource_id)])

    def note_condition_failure(self, grant_id: int, *, error: str, at: datetime) -> None:
        with self.tables.connection_scope():
            GrantRecord.objects.db_manager(self.tables.using).filter(pk=grant_id).update(
                condition_failures=F("condition_failures") + 1,
                last_condition_error=clean_text(error)[:2000],
                last_condition_error_at=at,
            )

    def take_use(self, grant_id: int, *, agent_id: str, tool_name: str, at: datetime) -> bool:
        """One use of a live grant of this agent's tool, in the caller's transaction."""
        rows = GrantRecord.objects.db_manager(self.tables.using).filter(
            pk=grant_id, agent_id=agent_id, tool_name=tool_name
        )
        return rows.live(at).update(uses=F("uses") + 1) == 1


# Routing rules ------------------------------------------------------------------------------------
# Routing rules in the Django store: keeping, ordering, changing and deleting them, each change with
# its audit row in the same transaction (``rule_row_values``).
#
# A tool's rules keep positions 1..n: a change renumbers them (``routing.renumbered``) under the lock
# of the tool's rows (``select_for_update``: on PostgreSQL two admins placing rules at once queue; on
# SQLite the write transaction serialises them).


def rule_of(row: RoutingRule) -> Rule:
    return Rule(
        id=row.pk,
        agent_id=row.agent_id,
        tool_name=row.tool_name,
        position=row.position,
        route=Route(row.route),
        condition=row.condition,
        reason=row.reason,
        created_by=row.created_by_name,
        created_at=row.created_at,
        changed_by=row.changed_by_name or None,
        changed_at=row.changed_at,
    )


class Rules:
    """``RuleStore`` on the ORM: the part of ``DjangoRunStore`` that keeps routing rules."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def _place(self, agent_id: str, tool_name: str, moving: int | None, position: int | None) -> None:
        """Renumber the tool's rules (in the caller's transaction) with ``moving`` at ``position``."""
        rows = RoutingRule.objects.db_manager(self.tables.using)
        tool_rows = rows.select_for_update().filter(agent_id=agent_id, tool_name=tool_name)
        current = list(tool_rows.order_by("position", "id").values_list("id", "position"))
        wanted = renumbered([rule_id for rule_id, _ in current], moving, position)
        for rule_id, at in current:
            if wanted.get(rule_id, at) != at:
                rows.filter(pk=rule_id).update(position=wanted[rule_id])

    def add_rule(self, request: RuleRequest) -> Rule:
        using = self.tables.using
        with self.tables.connection_scope(), transaction.atomic(using=using):
            creator = self.tables.user(request.created_by)
            row = RoutingRule.objects.db_manager(using).create(
                agent_id=request.agent_id,
                tool_name=request.tool_name,
                position=2**31 - 1,
                route=Route(request.route).value,
                condition=request.condition,
                reason=request.reason,
                created_at=request.created_at,
                created_by=creator,
                created_by_name=request.created_by[:150],
            )
            self._place(row.agent_id, row.tool_name, row.pk, request.position)
            rule = rule_of(RoutingRule.objects.db_manager(using).get(pk=row.pk))
            create_decision_row(
                using, rule_row_values(rule, change="added", actor=request.created_by, at=request.created_at)
            )
            return rule

    def change_rule(self, rule_id: int, request: RuleRequest) -> Rule:
        using = self.tables.using
        with self.tables.connection_scope(), transaction.atomic(using=using):
            rows = RoutingRule.objects.db_manager(using)
            row = rows.select_for_update().filter(pk=rule_id).first()
            if row is None or (row.agent_id, row.tool_name) != (request.agent_id, request.tool_name):
                raise RuleNotFound(rule_id)
            rows.filter(pk=rule_id).update(
                route=Route(request.route).value,
                condition=request.condition,
                reason=request.reason,
                changed_at=request.created_at,
                changed_by=self.tables.user(request.created_by),
                changed_by_name=request.created_by[:150],
            )
            self._place(row.agent_id, row.tool_name, rule_id, request.position or row.position)
            rule = rule_of(rows.get(pk=rule_id))
            create_decision_row(
                using,
                rule_row_values(rule, change="changed", actor=request.created_by, at=request.created_at),
            )
            return rule

    def delete_rule(self, rule_id: int, *, actor: str, at: datetime) -> Rule:
        using = self.tables.using
        with self.tables.connection_scope(), transaction.atomic(using=using):
            rows = RoutingRule.objects.db_manager(using)
            row = rows.select_for_update().filter(pk=rule_id).first()
            if row is None:
                raise RuleNotFound(rule_id)
            rule = rule_of(row)
            row.delete()
            self._place(rule.agent_id, rule.tool_name, None, None)
            create_decision_row(using, rule_row_values(rule, change="deleted", actor=actor, at=at))
            return rule

    def get_rule(self, rule_id: int) -> Rule | None:
        with self.tables.connection_scope():
            row = RoutingRule.objects.db_manager(self.tables.using).filter(pk=rule_id).first()
            return None if row is None else rule_of(row)

    def rules_for(self, agent_id: str, tool_name: str) -> list[Rule]:
        with self.tables.connection_scope():
            rows = RoutingRule.objects.db_manager(self.tables.using).filter(
                agent_id=agent_id, tool_name=tool_name
            )
            return [rule_of(row) for row in rows.order_by("position", "id")]


# Deciding a call ----------------------------------------------------------------------------------
# Deciding a call: the plan a decision makes on the run as read, and its conditional writes.


class _Claim(NamedTuple):
    """What a decision that completes its run's decisions does: claim it (``when_complete``), and
    take the claim's lease now (``start``: its continuation starts at once, in this process)."""

    when_complete: bool
    start: bool


@dataclass(frozen=True)
class _DecisionPlan:
    run: StoredRun
    run_pk: int
    call: ParkedCall
    call_pk: int
    decision: Decision
    #: The run's calls once the decision is recorded.
    calls: tuple[ParkedCall, ...]
    version: int
    #: Whether this decision claims the run (without a lease, its continuation taking one when it
    #: starts, unless the continuation starts at once: then the lease it takes now).
    claimed: bool
    lease_expires_at: datetime | None = None
    #: Set when the rule recorded an approval as one vote of several (``decision`` is that approval).
    vote: Vote | None = None

    def audit_values(self) -> dict[str, Any]:
        return decision_values(
            self.run, self.call, self.decision, claims=self.claimed, calls_after=self.calls, vote=self.vote
        )

    def call_columns(self) -> dict[str, Any]:
        """What the call's row gets: its decision, or (a vote) its votes."""
        if self.vote is not None:
            return {"votes": votes_column(self.vote.votes)}
        return decision_columns(self.decision)

    def receipt(self, record_id: int | None) -> DecisionReceipt:
        decided = next(c for c in self.calls if c.tool_call_id == self.call.tool_call_id)
        after = replace(
            self.run,
            calls=self.calls,
            version=self.version,
            status="running" if self.claimed else "suspended",
        )
        return DecisionReceipt(
            run=after,
            call=decided,
            claimed_version=self.version if self.claimed else None,
            vote=self.vote,
            record_id=record_id,
        )


class Decisions:
    """``RunStore.decide`` on the ORM: the part of ``DjangoRunStore`` that records decisions."""

    def __init__(self, tables: Tables, grants: Grants) -> None:
        self.tables = tables
        self.grants = grants

    def decide(
        self,
        *,
        agent_id: str,
        run_id: str,
        rule: DecisionRule,
        claim_when_complete: bool = True,
        start: bool = False,
    ) -> DecisionReceipt:
        claim = _Claim(claim_when_complete, start)
        with self.tables.connection_scope():
            if connections[self.tables.using].vendor != "postgresql":
                return self._decide_locked(agent_id, run_id, rule, claim)
            # PostgreSQL: read, then one conditional statement, no transaction around them (two
            # round trips instead of five on every approval). Optimistic: when the run changed in
            # between (another call of it was decided), read it again and decide on what is current.
            for _ in range(OPTIMISTIC_ATTEMPTS):
                found = self.tables.current_run(run_id, agent_id=agent_id, with_snapshot=True)
                plan = self._plan_decision(run_id, found, rule, claim)
                if plan.decision.grant_id is not None:
                    # A grant's use commits with the approval it gives, or not at all.
                    return self._decide_locked(agent_id, run_id, rule, claim)
                record_id = self._write_decision_at_version(plan)
                if record_id is not None:
                    return plan.receipt(record_id)
            raise self._conflict(plan.run, plan.call_pk, plan.call.tool_call_id)

    def _decide_locked(
        self, agent_id: str, run_id: str, rule: DecisionRule, claim: _Claim
    ) -> DecisionReceipt:
        """The decision in one transaction holding the run row's lock (SQLite, and grants' uses)."""
        with transaction.atomic(using=self.tables.using):
            found = self.tables.current_run(run_id, agent_id=agent_id, with_snapshot=True, lock=True)
            plan = self._plan_decision(run_id, found, rule, claim)
            if not self._write_decision_locked(plan):
                raise self._conflict(plan.run, plan.call_pk, plan.call.tool_call_id)
            grant_id = plan.decision.grant_id
            if grant_id is not None and not self.grants.take_use(
                grant_id, agent_id=agent_id, tool_name=plan.call.tool_name, at=plan.decision.decided_at
            ):
                raise GrantUnavailable(grant_id)  # rolls the decision back with the transaction
            return plan.receipt(create_decision_row(self.tables.using, plan.audit_values()))

    def _plan_decision(
        self, run_id: str, found: tuple[Row, list[Row]] | None, rule: DecisionRule, claim: _Claim
    ) -> _DecisionPlan:
        """What a decision will write on the run as read, or the error that refuses it."""
        if found is None:
            raise RunNotFound(run_id)
        row, call_rows = found
        try:
            run = stored_run(row, parked_calls(call_rows), with_snapshot=True)
        except CorruptRow as exc:
            logger.warning("Run %s is unreadable and cannot be decided: %s", run_id, exc)
            raise RunUnreadable(run_id) from exc
        tool_call_id, verdict = rule(run)
        index = next((i for i, c in enumerate(run.calls) if c.tool_call_id == tool_call_id), None)
        if index is None:
            raise decision_conflict(run, None, tool_call_id)
        call, call_pk = run.calls[index], call_rows[index]["id"]
        if call.decision is not None or run.status != "suspended":
            raise self._conflict(run, call_pk, tool_call_id)
        vote = verdict if isinstance(verdict, Vote) else None
        decision = verdict.approval if isinstance(verdict, Vote) else verdict
        if vote is not None:
            votes = tuple(replace(v, decided_at=utc(v.decided_at)) for v in vote.votes)
            decided = replace(call, votes=votes)
        else:
            decided = decided_call(call, decision)
        calls = tuple(c if i != index else decided for i, c in enumerate(run.calls))
        claims = vote is None and claim.when_complete and all(c.decision is not None for c in calls)
        return _DecisionPlan(
            run=run,
            run_pk=row["pk"],
            call=call,
            call_pk=call_pk,
            decision=decision,
            calls=calls,
            version=run.version + (2 if claims else 1),
            claimed=claims,
            lease_expires_at=self.tables.clock() + self.tables.lease if claims and claim.start else None,
            vote=vote,
        )

    def _write_decision_locked(self, plan: _DecisionPlan) -> bool:
        """Both writes, in the transaction that locked the run row."""
        recorded = self.tables.calls().filter(pk=plan.call_pk).undecided()
        if recorded.update(**plan.call_columns()) != 1:
            return False
        changes: dict[str, Any] = {"version": plan.version}
        if plan.claimed:
            changes.update(status=RunStatus.RUNNING, lease_expires_at=plan.lease_expires_at)
        runs = self.tables.runs().filter(pk=plan.run_pk, version=plan.run.version).suspended()
        return runs.update(**changes) == 1

    def _write_decision_at_version(self, plan: _DecisionPlan) -> int | None:
        """Both writes in one statement, if the run is still at the version the plan was made on: the
        audit row's id (None: the run moved on, nothing written).

        The run row is updated first, so the statement holds its lock while it records the call.
        Every writer of a run's calls locks its run row first and moves its version, so a run
        still at that version has its calls as read: the call's update cannot miss.
        """
        connection = connections[self.tables.using]
        columns = plan.call_columns()
        names = DECISION_COLUMN_ORDER if plan.vote is None else ("votes",)
        with database.cursor(self.tables.using) as cursor:
            cursor.execute(
                decide_at_version_sql() if plan.vote is None else vote_at_version_sql(),
                [
                    plan.version,
                    (RunStatus.RUNNING if plan.claimed else RunStatus.SUSPENDED).value,
                    connection.ops.adapt_datetimefield_value(plan.lease_expires_at),
                    plan.run_pk,
                    plan.run.version,
                    *(
                        ParkedCallRecord._meta.get_field(name).get_db_prep_save(columns[name], connection)  # type: ignore[union-attr]
                        for name in names
                    ),
                    plan.call_pk,
                    *insert_params(plan.audit_values(), connection),
                ],
            )
            runs_written, calls_written, record_id = cursor.fetchone()
        if runs_written and not calls_written:
            logger.error("Run %s: moved to version %s without its decision", plan.run.run_id, plan.version)
        return int(record_id) if runs_written and calls_written and record_id is not None else None

    def _conflict(self, run: StoredRun, call_pk: int, tool_call_id: str) -> Exception:
        """The error for a call someone else decided, with who and when as committed.

        Read again in a statement of its own: on PostgreSQL the locking query's joined call rows
        may predate the decision that won (only the locked run row is re-read after the wait).
        """
        row = self.tables.calls().filter(pk=call_pk).values(*CALL_COLUMNS).first()
        try:
            call = None if row is None else parked_call(row)
        except CorruptRow:
            call = None
        if call is None or call.decision is None:
            return RunAlreadyDecided(run_id=run.run_id, tool_call_id=tool_call_id)
        return decision_conflict(run, call, tool_call_id)


# Deadlines ----------------------------------------------------------------------------------------
# Deadlines in the run store: the due calls the expiry sweep reads, and moving a call's deadline.
#
# An expiry itself is a decision (``Decisions``); escalating a call or extending its deadline is not: the
# call keeps waiting with a new deadline (and group), changed under the run row's lock with the run's
# version moved, so a decision planned on the old deadline is planned again. Its audit row (outcome
# ``rescheduled``) is written in the same transaction.


class Deadlines:
    """``DjangoRunStore.due_calls`` and ``change_deadline`` (a mixin on the store's queries)."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def due_calls(self, agent_id: str, before: datetime, *, limit: int) -> list[tuple[str, str]]:
        with self.tables.connection_scope():
            # A range scan of the partial index call_undecided_expiry_idx: only the due calls.
            rows = (
                self.tables.calls()
                .undecided()
                .filter(
                    expires_at__lte=utc(before),
                    run__agent_id=agent_id,
                    run__status=RunStatus.SUSPENDED,
                    run__parent_run_id__isnull=True,
                )
                .order_by("expires_at", "pk")
                .values_list("run__run_id", "tool_call_id")[:limit]
            )
            return [(str(run_id), str(tool_call_id)) for run_id, tool_call_id in rows]

    def change_deadline(self, *, agent_id: str, run_id: str, rule: DeadlineRule) -> StoredRun:
        with self.tables.connection_scope(), transaction.atomic(using=self.tables.using):
            found = self.tables.current_run(run_id, agent_id=agent_id, with_snapshot=False, lock=True)
            if found is not None and connections[self.tables.using].vendor == "postgresql":
                # Read again now that the run row is ours: after waiting for its lock, PostgreSQL
                # re-reads only the locked run row, and the joined call rows may predate the
                # decision (or the escalation) that held it.
                found = self.tables.one_run(run_id, agent_id=agent_id, with_snapshot=False)
            if found is None:
                raise RunNotFound(run_id)
            row, call_rows = found
            try:
                run = stored_run(row, parked_calls(call_rows), with_snapshot=False)
            except CorruptRow as exc:
                logger.warning("Run %s is unreadable and its deadline cannot change: %s", run_id, exc)
                raise RunUnreadable(run_id) from exc
            change = rule(run)
            index = next((i for i, c in enumerate(run.calls) if c.tool_call_id == change.tool_call_id), None)
            call = None if index is None else run.calls[index]
            if index is None or call is None or call.decision is not None or run.status != "suspended":
                raise decision_conflict(run, call, change.tool_call_id)
            expires_at = None if change.expires_at is None else utc(change.expires_at)
            self.tables.calls().filter(pk=call_rows[index]["id"]).undecided().update(
                expires_at=expires_at, escalated_to=change.escalated_to
            )
            self.tables.runs().filter(pk=row["pk"], version=run.version).update(version=run.version + 1)
            moved = replace(call, expires_at=expires_at, escalated_to=change.escalated_to)
            after = replace(
                run,
                version=run.version + 1,
                calls=tuple(moved if i == index else c for i, c in enumerate(run.calls)),
            )
            create_decision_row(self.tables.using, _audit_values(after, moved, change, call.expires_at))
            return after


def _audit_values(
    run: StoredRun, call: Any, change: DeadlineChange, before: datetime | None
) -> dict[str, Any]:
    new = "none" if change.expires_at is None else utc(change.expires_at).isoformat(timespec="seconds")
    old = "none" if before is None else utc(before).isoformat(timespec="seconds")
    if change.action == DecisionAction.ESCALATE:
        detail = f"Escalated to {change.escalated_to}; new deadline {new}."
    else:
        detail = f"Deadline moved from {old} to {new}."
    return call_row_values(
        run, call, at=change.changed_at, actor=change.actor, action=change.action,
        reason=change.reason, outcome=Outcome.RESCHEDULED, detail=detail,
    )  # fmt: skip


# Listings -----------------------------------------------------------------------------------------
# One page of an agent's suspended runs, their calls and how many match: one statement per listing.
#
# ``querysets`` builds a listing with the ORM from a ``RunQuery``: the matches (to count) and the
# page's run rows joined with their calls, in order. A page is picked by run id from the listing's
# index alone (``run_id`` and the sort columns are in it: an index-only scan, so a deep page skips
# index entries, not rows), then its rows and calls are read by that id. A page near the start
# (``NEAR_THE_START``), the one nearly every listing asks for, skips few runs: its run rows are read
# straight from the index, in order, and joined with their calls (``_page_from_the_index``), which
# spares the lookups by id and the sort after them. Building and compiling these
# (filters, subqueries, ordering) costs a few milliseconds of CPU per listing, more than running them.
# A listing's *shape* (which filters it has, its order and its window) fixes the SQL; only the values
# differ. So ``page`` builds each shape once with stand-in values, keeps the SQL, and runs it with the
# query's values in their places. A query the stand-ins cannot stand for (``escalated_to``: a list of
# groups) is built each time.
#
# The total rides in the same statement as a column: for a listing filtered only by agent (and
# ``delegated``) it is the sum of the agent's waiting counters (``approvals_waiting_count``, kept by
# triggers on the run table in the statements that park, claim, reclaim and finish runs: migration
# 0025), exact and constant-time; on PostgreSQL a listing filtered by thread or by end user alone
# sums that thread's or end user's counters, kept the same way (migration 0027), and one filtered by
# tool or by kind alone those of the runs waiting on it (0050); any other filtered listing counts its
# matches from their index. A second column says whether some claim's lease ran
# out (an indexed probe of the few running runs), so the store reclaims those and lists again only then,
# never a sweep of its own per listing. A page past the end (no rows to carry them) reads the two
# columns alone.
#
# A page in deadline order is the exception: in one statement it would compute every match's soonest
# deadline and sort them all (bench/inbox_page.py, docs/scaling.md). ``deadline_page`` reads it as the
# queue does, two walks that stop at the page (the runs with a deadline from the calls' deadline
# index, then the others in suspension order), after the header's statement; the whole listing (no
# window) is still the one statement, and the tests check each page against it.
#
# A deep page (``DEEP_OFFSET`` runs in or more) of a listing filtered by agent only, newest or oldest
# first, on PostgreSQL, does not skip every run before it in the index one by one: the statement first
# finds, from per-day waiting counters (``approvals_waiting_day``, kept by triggers like the others:
# migration 0026), the day of suspension its first run falls on and how many runs come before that
# day, then skips only the runs of that day before the page. The counters are read in the statement's
# own snapshot, so the page is exactly the one an OFFSET would give.

#: Stand-ins for the values of a query, found again among a compiled statement's parameters.
_STAND_INS: dict[str, Any] = {
    "agent_id": "\x00agent_id",
    "thread_id": "\x00thread_id",
    "resource_id": "\x00resource_id",
    "tool_name": "\x00tool_name",
    "kind": "\x00kind",
    "created_from": datetime(1901, 1, 1, 0, 0, 1, tzinfo=UTC),
    "created_to": datetime(1901, 1, 1, 0, 0, 2, tzinfo=UTC),
    "expiring_before": datetime(1901, 1, 1, 0, 0, 3, tzinfo=UTC),
}
_DATETIMES = ("created_from", "created_to", "expiring_before")
_NOW = "\x00now"
_OFFSET = "\x00offset"
#: The filters a waiting counter cannot answer (it is kept per agent and ``delegated`` only).
_FILTERS = (
    *("thread_id", "resource_id", "tool_name", "kind"),
    *("created_from", "created_to", "expiring_before", "escalated_to"),
)
_COUNTERS = "approvals_waiting_count"
#: The condition on the counters' ``delegated`` column for a query's ``delegated``.
_DELEGATED = {None: "", True: " AND delegated", False: " AND NOT delegated"}
#: The largest offset a page is read at (SQLite's and PostgreSQL's OFFSET are 64-bit integers).
_MAX_OFFSET = 2**62
#: From this offset on, an agent's listing starts at its page's day (PostgreSQL): skipping 1,000
#: index entries costs about what reading the day counters does.
DEEP_OFFSET = 1000
#: Pages that start before this offset are read straight from the listing's index: past it, skipping
#: runs' rows one by one costs more than picking the page's run ids from the index alone (where the two
#: cross: bench/list_suspended_runs.py, docs/scaling.md).
NEAR_THE_START = 200
#: Compiled into a deep page's statement in place of its offset, then replaced by the day's skip.
_DEEP_STAND_IN = 987_654_321_987
_DAYS = "approvals_waiting_day"
#: Waiting runs per agent and thread, and per agent and end user (migration 0027).
_THREADS = "approvals_waiting_thread"
_RESOURCES = "approvals_waiting_resource"
#: Which of them counts the runs of each name column.
_NAME_COUNTERS = {"thread_id": _THREADS, "resource_id": _RESOURCES}
#: The counters of a listing filtered by one of these alone: table, condition on its key, filter.
_KEYED_COUNTERS = {
    **{column: (table, f"{column} = %s", column) for column, table in _NAME_COUNTERS.items()},
    # Waiting runs per agent with an undecided call of a tool, or of a kind (migration 0050).
    "tool_name": ("approvals_waiting_call", "key = 'tool:' || %s", "tool_name"),
    "kind": ("approvals_waiting_call", "key = 'kind:' || %s", "kind"),
}

#: Whether a claim's lease ran out: the partial index run_running_lease_idx, status a literal.
_EXPIRED = (
    f"EXISTS (SELECT 1 FROM {RunRecord._meta.db_table}"
    f" WHERE status = '{RunStatus.RUNNING.value}' AND lease_expires_at < %s)"
)


def querysets(
    runs: RunRecordQuerySet, query: RunQuery, *, deep: bool = False
) -> tuple[RunRecordQuerySet, Any]:
    """The matches of ``query`` among ``runs`` (to count) and its page of run rows, each joined with
    its calls (one row with empty call columns for a run without), in order. ``deep``: the page is
    read from its day on (``_deep_day``), at ``_DEEP_STAND_IN`` for its offset in that day."""
    matches, ordered = _matches_in_order(runs, query, deep=deep)
    page = ordered
    if query.limit is not None:
        window = slice(query.offset, query.offset + query.limit)
        # The page's run ids first, from the listing's index alone, then its rows by id.
        page = runs.filter(run_id__in=ordered.values("run_id")[window]).in_suspension_order(**_order(query))
    page = page.order_by(*page.query.order_by, "calls__position")
    return matches, page.values(*RUN_COLUMNS, *JOINED_CALL_COLUMNS)


def _order(query: RunQuery) -> dict[str, bool]:
    return {"oldest_first": query.oldest_first, "by_deadline": query.by_deadline}


def _matches_in_order(
    runs: RunRecordQuerySet, query: RunQuery, *, deep: bool = False
) -> tuple[RunRecordQuerySet, RunRecordQuerySet]:
    """The matches of ``query`` (to count), and those it lists in its order (from its page's day on
    when ``deep``)."""
    matches = (
        runs.for_agent(query.agent_id)
        .suspended()
        .created_between(query.created_from, query.created_to)
        .waiting_on(tool_name=query.tool_name, kind=query.kind)
        .expiring_before(query.expiring_before)
        .escalated_to(query.escalated_to)
    )
    if query.thread_id is not None:
        matches = matches.filter(thread_id=query.thread_id)
    if query.resource_id is not None:
        matches = matches.filter(resource_id=query.resource_id)
    listed_matches = matches
    if query.delegated is not None:
        unfiltered = matches
        matches = listed_matches = matches.filter(parent_run_id__isnull=not query.delegated)
        if not query.delegated:
            # Counted from the (agent, status, parent_run_id) index, listed in the listing index's
            # order: written as an expression, the test cannot make the planner pick the counting
            # index (and sort every waiting run of the agent for a page).
            listed_matches = unfiltered.alias(parent_or_empty=Coalesce("parent_run_id", Value(""))).filter(
                parent_or_empty=""
            )
    ordered = listed_matches.in_suspension_order(**_order(query))
    if deep:
        bound = RawSQL("(SELECT bound FROM deep)", (), output_field=DateTimeField())
        ordered = (
            ordered.filter(suspended_at__gte=bound)
            if query.oldest_first
            else ordered.filter(suspended_at__lt=bound)
        )
    return matches, ordered


def listing_page(
    runs: RunRecordQuerySet, using: str, query: RunQuery, *, now: datetime
) -> tuple[Listing, int, bool]:
    """The page of runs ``query`` asks for (each with its call rows), how many runs match it, and
    whether some claim's lease ran out before ``now`` (then reclaim and list again)."""
    if query.limit is not None and query.offset > _MAX_OFFSET:
        # Past the end of any listing, and past what a database's OFFSET can hold: the total only.
        query = replace(query, limit=0, offset=0)
    connection = connections[using]
    values = _values(connection, query)
    values[_NOW] = connection.ops.adapt_datetimefield_value(now)
    if query.escalated_to is not None:
        matches, rows = querysets(runs, query)
        total = matches.count()
        return ([] if _past_the_end(query, total) else by_run(list(rows))), total, _expired(using, values)
    if query.by_deadline and query.limit:
        _, total, expired = listing_page(runs, using, replace(query, limit=0, offset=0), now=now)
        return ([] if _past_the_end(query, total) else deadline_page(runs, using, query)), total, expired
    # (A window of no rows compiles to no page: only the header is run for it.)
    compiled_as = query if (query.limit or 0) > 0 else replace(query, limit=None)
    deep = _is_deep(connection.vendor, compiled_as)
    if deep:
        values[_OFFSET] = query.offset
        compiled_as = replace(compiled_as, offset=_DEEP_STAND_IN)
    near = not deep and _is_near_the_start(compiled_as)
    header, listing = compiled_for(
        ("listing", *_shape(using, connection.vendor, compiled_as), near),
        lambda: _compile(runs, using, compiled_as, deep=deep, near=near),
    )
    found: list[Row] = []
    if query.limit is None or query.limit > 0:
        found = run_statement(using, listing.sql, [values.get(p, p) for p in listing.params], listing)
    if not found:
        found = run_statement(using, header.sql, [values.get(p, p) for p in header.params], header)
    total, expired = int(found[0]["total"] or 0), bool(found[0]["expired"])
    # (The header's own statement has no run columns; an empty near page, one row with empty ones.)
    return by_run([row for row in found if row.get("pk") is not None]), total, expired


#: A listing's runs in order, each with its call rows in theirs.
Listing = list[tuple[Row, list[Row]]]


#: Each call column's name in a joined row, by its own name.
_JOINED_NAMES = tuple((name, f"calls__{name}") for name in CALL_COLUMNS if name != "run_id")


def readable[R](listing: Listing, record: Callable[[Row, list[Row]], R]) -> list[R]:
    """The records ``record`` makes of a listing's runs, in order; an unreadable run is left out and
    logged (a listing, or the queue, still shows the others)."""
    made = []
    for run, call_rows in listing:
        try:
            made.append(record(run, call_rows))
        except CorruptRow as exc:
            logger.warning(
                "Suspended run %s is unreadable and left out of the listing: %s", run["run_id"], exc
            )
    return made


def by_run(rows: list[Row]) -> Listing:
    # (A run's first joined row stands for the run: it holds the run's columns, and its call
    # columns are never read as the run's.)
    listed: Listing = []
    calls: list[Row] = []
    for row in rows:
        if not listed or listed[-1][0]["pk"] != row["pk"]:
            calls = []
            listed.append((row, calls))
        if row["calls__id"] is not None:
            call = {name: row[joined] for name, joined in _JOINED_NAMES}
            call["run_id"] = row["pk"]
            calls.append(call)
    return listed


def deadline_page(runs: RunRecordQuerySet, using: str, query: RunQuery) -> Listing:
    """The page of ``query`` in deadline order, read as two walks that stop at the page: the runs
    with an undecided call that has a deadline, from the calls' deadline index, each run at its
    soonest; then, once they run out, the others in suspension order. The order of ``in_suspension_order
    (by_deadline=True)``, which sorts every match by its soonest deadline to give it."""
    assert query.limit is not None
    matches, _ = _matches_in_order(runs, replace(query, by_deadline=False))
    due = ParkedCallRecord.objects.filter(run=OuterRef("pk")).due()
    calls = ParkedCallRecord.objects.using(using).filter(run__in=matches.values("pk")).soonest_of_their_runs()
    start, end = query.offset, query.offset + query.limit
    run_ids = [run_id for _, _, run_id in _in_deadline_order(calls, start, end)]
    if len(run_ids) < query.limit:
        # Where the page starts among the runs without a deadline: after every run with one.
        with_deadline = start + len(run_ids) if run_ids or not start else matches.filter(Exists(due)).count()
        others = (
            matches.exclude(Exists(due)).order_by("suspended_at", "run_id").values_list("run_id", flat=True)
        )
        skip = max(0, start - with_deadline)
        run_ids += others[skip : skip + query.limit - len(run_ids)]
    return listed_by_id(runs.using(using), run_ids)


def _in_deadline_order(calls: ParkedCallRecordQuerySet, start: int, end: int) -> list[tuple[Any, ...]]:
    """Places ``start`` to ``end`` of ``calls`` (one a run: ``soonest_of_their_runs``) in deadline
    order, ties by the run's suspension then its id: each a (deadline, suspended at, run id).

    Read in the deadline index's own order, which any plan walks only as far as the page: sorted as a
    whole, a page was only as quick as PostgreSQL's statistics were right, and statistics from before
    many calls gained a deadline are not (``bench/stale_statistics.py``). Only when two of the
    deadlines read are alike does the index's order not settle the page: then it is sorted, up to the
    last deadline it holds."""
    columns = ("expires_at", "run__suspended_at", "run__run_id")
    # (With the place before the page and the one after it: a deadline alike across either edge.)
    first = max(start - 1, 0)
    walked = list(calls.order_by("expires_at").values_list(*columns)[first : end + 1])
    if len({place[0] for place in walked}) == len(walked):
        return walked[start - first : end - first]
    last = walked[min(end - first, len(walked)) - 1][0]
    return list(calls.filter(expires_at__lte=last).order_by(*columns).values_list(*columns)[start:end])


def listed_by_id(runs: RunRecordQuerySet, run_ids: list[str]) -> Listing:
    """The runs ``run_ids`` names, each with its call rows, in that order (a run gone is left out)."""
    rows = runs.filter(run_id__in=run_ids).order_by("pk", "calls__position")
    read = {
        run["run_id"]: (run, calls)
        for run, calls in by_run(list(rows.values(*RUN_COLUMNS, *JOINED_CALL_COLUMNS)))
    }
    return [read[run_id] for run_id in run_ids if run_id in read]


def _expired(using: str, values: dict[Any, Any]) -> bool:
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT {_EXPIRED}", [values[_NOW]])
        return bool(cursor.fetchone()[0])


def _past_the_end(query: RunQuery, total: int) -> bool:
    return total == 0 or (query.limit is not None and (query.limit <= 0 or query.offset >= total))


def _shape(using: str, vendor: str, query: RunQuery) -> tuple[Any, ...]:
    present = tuple(getattr(query, name) is not None for name in _STAND_INS)
    window = (query.limit, query.offset if query.limit is not None else 0)
    return (using, vendor, present, query.delegated, query.oldest_first, query.by_deadline, window)


def _compile(
    runs: RunRecordQuerySet, using: str, query: RunQuery, *, deep: bool = False, near: bool = False
) -> tuple[Statement, Statement]:
    """The header (total, expired) and page statements of ``query``'s shape, built with stand-ins
    for its values; the page carries the header's columns too. ``near``: the page is read straight
    from the listing's index (``_page_from_the_index``)."""
    stand_in = replace(
        query, **{name: value for name, value in _STAND_INS.items() if getattr(query, name) is not None}
    )
    matches, rows = querysets(runs, stand_in, deep=deep)
    delegated = _DELEGATED[query.delegated]
    if all(getattr(query, name) is None for name in _FILTERS):
        total = f"SELECT COALESCE(SUM(n), 0) FROM {_COUNTERS} WHERE agent_id = %s{delegated}"
        total_params: tuple[Any, ...] = (_STAND_INS["agent_id"],)
    elif (keyed := _keyed_counter(connections[using].vendor, query)) is not None:
        table, key, name = keyed
        total = f"SELECT COALESCE(SUM(n), 0) FROM {table} WHERE agent_id = %s AND {key}{delegated}"
        total_params = (_STAND_INS["agent_id"], _STAND_INS[name])
    else:
        # The count over the matches' primary keys, which both databases' planners flatten into the
        # plain count the ORM's ``count()`` sends (the same indexes, no rows visited for it).
        keys, params = matches.order_by().values("pk").query.get_compiler(using).as_sql()
        total, total_params = f"SELECT COUNT(*) FROM ({keys}) matches", tuple(params)
    columns = f"({total}) AS total, {_EXPIRED} AS expired"
    header = Statement(f"SELECT {columns}", (*total_params, _NOW), ("total", "expired"), ())
    if query.limit is not None and query.limit <= 0:
        return header, header
    listing = statement_of(rows.query, using)
    if near:
        sql, params = _page_from_the_index(runs, using, stand_in, columns)
        params = (*header.params, *params)
        return header, replace(listing, sql=sql, params=params, names=(*listing.names, *header.names))
    # The header's columns last in the select list (whose columns are plain: the first FROM is the
    # statement's), so the positions an ORDER BY may name stay right; their parameters come first.
    selected, found, rest = listing.sql.partition(" FROM ")
    if not found or not selected.startswith("SELECT ") or "(" in selected:
        raise AssertionError(f"Unexpected shape of a listing: {listing.sql}")
    sql, params = f"{selected}, {columns} FROM {rest}", (*header.params, *listing.params)
    if deep:
        window = f" OFFSET {_DEEP_STAND_IN}"
        if sql.count(window) != 1:
            raise AssertionError(f"Unexpected shape of a deep listing: {sql}")
        day, day_params = _deep_day(query)
        sql = f"WITH deep AS ({day}) " + sql.replace(window, " OFFSET (SELECT skip FROM deep)")
        params = (*day_params, *params)
    return header, Statement(
        sql=sql, params=params, names=(*listing.names, *header.names), converters=listing.converters
    )


def _is_near_the_start(query: RunQuery) -> bool:
    """Whether ``query``'s page is read straight from the listing's index (``_page_from_the_index``)
    rather than picked by run id first (``querysets``)."""
    return (
        query.limit is not None
        and query.limit > 0
        and query.offset < NEAR_THE_START
        and not query.by_deadline
        and query.escalated_to is None
    )


#: The calls' table, joined to a page read from the index.
_CALLS = ParkedCallRecord._meta.db_table


def _page_from_the_index(
    runs: RunRecordQuerySet, using: str, query: RunQuery, header: str
) -> tuple[str, tuple[Any, ...]]:
    """SQL (and parameters) of a page near the start of a listing: its run rows straight from the
    listing's index, in order, then joined with their calls; the header's columns after the calls',
    from the one row of the header the page is joined to, so that an empty page (no run waits, the
    common case of a desk that keeps up) is one row with the header's columns, not a second statement.
    Its columns are ``querysets``' rows' (the same names, in the same order), so their converters
    hold. PostgreSQL reads the page's runs straight from the index and sorts only the page's few rows
    at the end, where picking run ids first costs a hash of them and a lookup of each by run id
    (bench/list_suspended_runs.py)."""
    _, ordered = _matches_in_order(runs, query)
    window = slice(query.offset, query.offset + (query.limit or 0))
    inner = statement_of(ordered.values(*RUN_COLUMNS)[window].query, using)
    if inner.names != RUN_COLUMNS or ' AS "pk"' not in inner.sql:
        raise AssertionError(f"Unexpected shape of a listing's page: {inner.sql}")
    connection = connections[using]
    quote = connection.ops.quote_name
    run_columns = ", ".join(f"page.{quote(name)}" for name in RUN_COLUMNS)
    calls = quote(_CALLS)
    call_columns = ", ".join(
        f"{calls}.{quote(_call_column(joined.removeprefix('calls__')))} AS {quote(joined)}"
        for joined in JOINED_CALL_COLUMNS
    )
    direction = "ASC" if query.oldest_first else "DESC"
    sql = (
        f"SELECT {run_columns}, {call_columns}, header_row.total, header_row.expired"
        f" FROM (SELECT {header}) header_row LEFT OUTER JOIN ({inner.sql}) page ON TRUE"
        f" LEFT OUTER JOIN {calls} ON (page.{quote('pk')} = {calls}.{quote(_call_column('run'))})"
        f" ORDER BY page.{quote('suspended_at')} {direction}, page.{quote('run_id')} ASC,"
        f" {calls}.{quote(_call_column('position'))} ASC"
    )
    return sql, inner.params


def _call_column(name: str) -> str:
    field = ParkedCallRecord._meta.get_field(name)
    if not isinstance(field, Field) or not field.column:
        raise AssertionError(f"{name} is not a column of the calls' table")
    return field.column


def _keyed_counter(vendor: str, query: RunQuery) -> tuple[str, str, str] | None:
    """The counters that have the total of ``query``, a listing filtered by one of thread, end user
    (PostgreSQL: migration 0027), tool or kind (0050) alone: their table, the condition on their key
    (one parameter) and the filter that gives the parameter; None when its matches are counted."""
    if vendor != "postgresql":
        return None
    present = [name for name in _FILTERS if getattr(query, name) is not None]
    if len(present) != 1:
        return None
    return _KEYED_COUNTERS.get(present[0])


def _is_deep(vendor: str, query: RunQuery) -> bool:
    """Whether ``query``'s page starts from its day's counters (see the listings' section)."""
    return (
        vendor == "postgresql"
        and query.limit is not None
        and query.limit > 0
        and query.offset >= DEEP_OFFSET
        and not query.by_deadline
        and all(getattr(query, name) is None for name in _FILTERS)
    )


def _deep_day(query: RunQuery) -> tuple[str, tuple[Any, ...]]:
    """SQL for the one row (bound, skip) of a deep page: where its day begins in the listing's order
    (newest first: the end of the day; oldest first: its start) and how many of that day's runs come
    before the page. No row past the end of the listing (then the page is empty)."""
    delegated = _DELEGATED[query.delegated]
    direction, bound = ("ASC", "day") if query.oldest_first else ("DESC", "day + 1")
    days = (
        f"SELECT day, SUM(n) AS n, SUM(SUM(n)) OVER (ORDER BY day {direction}) - SUM(n) AS before"
        f" FROM {_DAYS} WHERE agent_id = %s{delegated} GROUP BY day"
    )
    sql = (
        f"SELECT ({bound})::timestamp AT TIME ZONE 'UTC' AS bound, (%s - before)::bigint AS skip"
        f" FROM ({days}) days WHERE before <= %s AND before + n > %s"
    )
    return sql, (_OFFSET, _STAND_INS["agent_id"], _OFFSET, _OFFSET)


def _values(connection: Any, query: RunQuery) -> dict[Any, Any]:
    """Each stand-in's parameter as the database gets it, mapped to the query's own value."""
    values: dict[Any, Any] = {}
    for name, stand_in in _STAND_INS.items():
        value = getattr(query, name)
        if value is None:
            continue
        if name in _DATETIMES:
            values[connection.ops.adapt_datetimefield_value(stand_in)] = (
                connection.ops.adapt_datetimefield_value(value)
            )
        else:
            values[stand_in] = str(value)
    return values


# The reviewer's queue across agents ---------------------------------------------------------------
# The reviewer's queue: the waiting runs of several agents in one order, read a page at a time from
# where the last page ended (a position), never by offset: deciding the calls of a page does not move
# the next one, so "Next" brings the calls that still wait after it and skips none.
#
# The order: runs with an undecided call that has a deadline first, soonest deadline first; then the
# others; ties and the rest by suspension, oldest first, then run id. Each part is an indexed walk
# that stops at the page's end:
#
# - runs with a deadline: the undecided calls' deadline index (``call_undecided_expiry_idx``), each
#   run taken at its first such call (a probe of its own few calls says which is first);
# - the others: the waiting runs' queue index (``run_queue_waiting_idx``: suspension order).
#
# A page reads the first walk from its position, and the second once the first has run out. Its runs
# and their calls are then read by id in one statement, as a listing's are.
#
# The tool filter takes any part of a name, in any case: matched against the names of the tools calls
# wait on (a few, found by skipping through their index), it becomes a filter on those exact names,
# which the planner can estimate and so walk the queue's order with (a pattern it cannot estimate, it
# read every matching call first). On PostgreSQL the thread and end-user filters are resolved the same
# way, from the names in the waiting counters (one row per agent and name: migration 0027), where a
# pattern read every waiting run. The threads and end users the filters suggest come, for the agents
# seen whole on PostgreSQL, from the same counters, in name order, rather than from every waiting run.


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
    #: The page's runs as listings show them.
    runs: list[AgentRun]
    #: Each run's place, in the same order.
    positions: list[QueuePosition]
    #: Where the next page starts: after the last run this page read, shown or not (a run decided
    #: meanwhile, or unreadable, is left out of ``runs``); None when no run follows.
    next_after: QueuePosition | None

    @property
    def more(self) -> bool:
        return self.next_after is not None


def queue_page(using: str, query: QueueQuery) -> QueuePage:
    """The runs of ``query``'s page (each with its calls), their places, and whether more follow."""
    wanted = query.limit + 1  # one more than the page: whether anything follows it
    matching = _matching(
        query,
        tools=tools_named_like(using, query.tool) if query.tool else None,
        threads=waiting_names_like(using, query.scope, "thread_id", query.thread),
        resources=waiting_names_like(using, query.scope, "resource_id", query.resource),
    )
    places: list[QueuePosition] = []
    if query.after is None or query.after.deadline is not None:
        places = _with_deadline(using, query, matching("run__"), wanted)
    if len(places) < wanted:
        places += _without_deadline(using, query, matching(""), wanted - len(places))
    more = len(places) > query.limit
    places = places[: query.limit]
    if not places:
        return QueuePage(runs=[], positions=[], next_after=None)
    listed = listed_by_id(RunRecord.objects.using(using), [p.run_id for p in places])
    read = {run.run_id: run for run in readable(listed, listed_run_from_rows)}
    # (A run decided between the two reads is left out: it waits no more.)
    kept = [p for p in places if p.run_id in read]
    return QueuePage(
        runs=[read[p.run_id] for p in kept], positions=kept, next_after=places[-1] if more else None
    )


def _matching(
    query: QueueQuery, *, tools: list[str] | None, threads: list[str] | None, resources: list[str] | None
) -> Callable[[str], Q]:
    """The query's filters and scope on runs, given the path to the run from the rows filtered
    (``"run__"`` from calls); ``tools``, ``threads``, ``resources``: the names the query's filters
    match (None: that filter is none, or a thread's or end user's is a pattern on the runs)."""

    def conditions(run: str) -> Q:
        found = queue_condition(query.scope, run)
        for column, part, names in (
            ("thread_id", query.thread, threads),
            ("resource_id", query.resource, resources),
        ):
            if names is not None:
                found &= Q(**{f"{run}{column}__in": names})
            elif part:
                found &= Q(**{f"{run}{column}__icontains": part})
        if query.created_from is not None:
            found &= Q(**{f"{run}created_at__gte": query.created_from})
        if query.created_to is not None:
            found &= Q(**{f"{run}created_at__lte": query.created_to})
        if tools is not None:
            key = OuterRef(run.removesuffix("__") or "pk")
            calls = ParkedCallRecord.objects.filter(run=key, tool_name__in=tools).undecided()
            found &= Q(Exists(calls))
        return found

    return conditions


#: The names of the tools undecided calls wait on, one index probe each (call_undecided_by_tool_idx).
_WAITING_TOOLS = """
WITH RECURSIVE tools(name) AS (
    SELECT MIN(tool_name) FROM {calls} WHERE action IS NULL
    UNION ALL
    SELECT (SELECT MIN(tool_name) FROM {calls} WHERE action IS NULL AND tool_name > tools.name)
    FROM tools WHERE tools.name IS NOT NULL
)
SELECT name FROM tools WHERE name IS NOT NULL
"""


def tools_named_like(using: str, part: str) -> list[str]:
    """The names of the tools undecided calls wait on that hold ``part``, in any case."""
    with database.cursor(using) as cursor:
        cursor.execute(_WAITING_TOOLS.format(calls=ParkedCallRecord._meta.db_table))
        names = [name for (name,) in cursor.fetchall()]
    part = part.casefold()
    return [name for name in names if part in name.casefold()]


#: The most names a thread or end-user filter of the queue is turned into; a part that more names
#: hold stays a pattern, which then matches so many runs that the queue's walk soon fills its page.
_MOST_NAMES = 500


def waiting_names_like(using: str, scope: QueueScope, column: str, part: str | None) -> list[str] | None:
    """The threads (``column`` "thread_id") or end users ("resource_id") that runs of ``scope``'s agents
    wait on and that hold ``part`` in any case, read from the waiting counters (PostgreSQL): a row an
    agent and name, where the runs are as many as wait. None without a part, past ``_MOST_NAMES``
    names, or on SQLite (no counters): the filter is then a pattern on the runs."""
    if not part or not scope or connections[using].vendor != "postgresql":
        return None
    table = _NAME_COUNTERS[column]
    pattern = f"%{connections[using].ops.prep_for_like_query(part)}%"
    with database.cursor(using) as cursor:
        cursor.execute(
            f"SELECT DISTINCT {column} FROM {table} WHERE agent_id = ANY(%s) AND NOT delegated AND n > 0"
            f" AND UPPER({column}) LIKE UPPER(%s) LIMIT %s",
            [[agent_id for agent_id, _ in scope], pattern, _MOST_NAMES + 1],
        )
        names = [name for (name,) in cursor.fetchall()]
    return names if len(names) <= _MOST_NAMES else None


def queue_names(using: str, scope: QueueScope, column: str, limit: int) -> list[str]:
    """Up to ``limit`` of the threads (``column`` "thread_id") or end users ("resource_id") the
    queue's runs wait on, in name order: on PostgreSQL, an agent seen whole gives its first ``limit``
    from its waiting counters; the others', and SQLite's, come from their runs, the first ``limit``
    found (sorting them all first would read every waiting run)."""
    whole = [agent_id for agent_id, groups in scope if groups is None]
    names: set[str] = set()
    from_runs = scope
    if connections[using].vendor == "postgresql" and whole:
        table = _NAME_COUNTERS[column]
        each = f"SELECT {column} FROM {table} WHERE agent_id = %s AND NOT delegated AND n > 0"
        with database.cursor(using) as cursor:
            cursor.execute(
                " UNION ALL ".join([f"({each} ORDER BY 1 LIMIT %s)"] * len(whole)),
                [value for agent_id in whole for value in (agent_id, limit)],
            )
            names.update(name for (name,) in cursor.fetchall())
        from_runs = tuple((agent_id, groups) for agent_id, groups in scope if groups is not None)
    if from_runs:
        runs = RunRecord.objects.using(using).in_queue(from_runs).exclude(**{column: None})
        names.update(runs.order_by().values_list(column, flat=True).distinct()[:limit])
    return sorted(names)[:limit]


def _with_deadline(using: str, query: QueueQuery, matching: Q, n: int) -> list[QueuePosition]:
    """Up to ``n`` places of runs with a deadline, after the query's: each run at its first
    undecided call that has one (deadline, then call id)."""
    calls = ParkedCallRecord.objects.using(using).filter(matching).soonest_of_their_runs()
    after = query.after
    if after is not None and after.deadline is not None:
        calls = calls.filter(expires_at__gte=after.deadline).filter(
            Q(expires_at__gt=after.deadline)
            | Q(run__suspended_at__gt=after.suspended_at)
            | Q(run__suspended_at=after.suspended_at, run__run_id__gt=after.run_id)
        )
    found = _in_deadline_order(calls, 0, n)
    # (Every deadline here is set: ``expires_at__isnull=False``.)
    return [QueuePosition(due and utc(due), utc(suspended), run_id) for due, suspended, run_id in found]


def _without_deadline(using: str, query: QueueQuery, matching: Q, n: int) -> list[QueuePosition]:
    """Up to ``n`` places of runs without a deadline, after the query's, oldest suspension first."""
    due = ParkedCallRecord.objects.filter(run=OuterRef("pk")).due()
    runs = RunRecord.objects.using(using).filter(matching).exclude(Exists(due))
    after = query.after
    if after is not None and after.deadline is None:
        runs = runs.filter(suspended_at__gte=after.suspended_at).filter(
            Q(suspended_at__gt=after.suspended_at) | Q(run_id__gt=after.run_id)
        )
    found = runs.order_by("suspended_at", "run_id").values_list("suspended_at", "run_id")[:n]
    return [QueuePosition(None, utc(suspended), run_id) for suspended, run_id in found]


# The run store ------------------------------------------------------------------------------------


class DjangoRunStore(RunStore, GrantStore, RuleStore):
    """The run store on the default database (or ``using``); safe to share between threads.

    ``lease`` defaults to ``settings.RUN_LEASE_SECONDS`` (300), read when first needed. Building a
    store never touches the database, so it may be built at import time. The run's life (parking,
    claiming, finishing) is written here; its parts do the rest on the same ``Tables``: decisions
    (``Decisions``), grants (``Grants``), routing rules (``Rules``), deadlines (``Deadlines``),
    listings (``listing_page``) and the queue (``queue_page``).
    """

    def __init__(
        self,
        lease: timedelta | None = None,
        *,
        using: str = "default",
        listings_using: str | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.tables = Tables(lease, using=using, listings_using=listings_using, clock=clock)
        self.grants = Grants(self.tables)
        self.rules = Rules(self.tables)
        self.decisions = Decisions(self.tables, self.grants)
        self.deadlines = Deadlines(self.tables)

    def __repr__(self) -> str:
        return f"DjangoRunStore(lease={self.tables.lease!r}, using={self.tables.using!r})"

    @property
    def using(self) -> str:
        return self.tables.using

    @property
    def lease(self) -> timedelta:
        return self.tables.lease

    @lease.setter
    def lease(self, value: timedelta) -> None:
        self.tables.lease = value

    #: How the runtime calls this store from async code: on the thread that holds the caller's
    #: database connection, so a request never needs a second one (``approvals.server.database``).
    run_sync = staticmethod(database.run_sync)

    # -- its parts --------------------------------------------------------------------------------

    def decide(
        self,
        *,
        agent_id: str,
        run_id: str,
        rule: DecisionRule,
        claim_when_complete: bool = True,
        start: bool = False,
    ) -> DecisionReceipt:
        return self.decisions.decide(
            agent_id=agent_id, run_id=run_id, rule=rule, claim_when_complete=claim_when_complete, start=start
        )

    def due_calls(self, agent_id: str, before: datetime, *, limit: int) -> list[tuple[str, str]]:
        return self.deadlines.due_calls(agent_id, before, limit=limit)

    def change_deadline(self, *, agent_id: str, run_id: str, rule: DeadlineRule) -> StoredRun:
        return self.deadlines.change_deadline(agent_id=agent_id, run_id=run_id, rule=rule)

    def add_rule(self, request: RuleRequest) -> Rule:
        return self.rules.add_rule(request)

    def change_rule(self, rule_id: int, request: RuleRequest) -> Rule:
        return self.rules.change_rule(rule_id, request)

    def delete_rule(self, rule_id: int, *, actor: str, at: datetime) -> Rule:
        return self.rules.delete_rule(rule_id, actor=actor, at=at)

    def get_rule(self, rule_id: int) -> Rule | None:
        return self.rules.get_rule(rule_id)

    def rules_for(self, agent_id: str, tool_name: str) -> list[Rule]:
        return self.rules.rules_for(agent_id, tool_name)

    def add_grant(self, request: GrantRequest) -> Grant:
        return self.grants.add_grant(request)

    def revoke_grant(self, grant_id: int, *, actor: str, at: datetime) -> Grant:
        return self.grants.revoke_grant(grant_id, actor=actor, at=at)

    def get_grant(self, grant_id: int) -> Grant | None:
        return self.grants.get_grant(grant_id)

    def live_grants(
        self, agent_id: str, tool_name: str, *, thread_id: str | None, resource_id: str | None, at: datetime
    ) -> list[Grant]:
        return self.grants.live_grants(
            agent_id, tool_name, thread_id=thread_id, resource_id=resource_id, at=at
        )

    def note_condition_failure(self, grant_id: int, *, error: str, at: datetime) -> None:
        self.grants.note_condition_failure(grant_id, error=error, at=at)

    # -- the run's life ---------------------------------------------------------------------------

    def insert_suspended(self, suspension: Suspension) -> StoredRun:
        with self.tables.connection_scope():
            try:
                with transaction.atomic(using=self.tables.using):
                    record = self.tables.runs().create(
                        run_id=suspension.run_id,
                        agent_id=suspension.agent_id,
                        thread_id=suspension.thread_id,
                        resource_id=suspension.resource_id,
                        parent_run_id=suspension.parent_run_id,
                        created_at=utc(suspension.created_at),
                        suspended_at=utc(suspension.suspended_at),
                        status=RunStatus.SUSPENDED,
                        version=1,
                        interrupted=False,
                        snapshot=suspension.snapshot,
                        history=[],
                        started_by=suspension.started_by,
                    )
                    self.tables.calls().bulk_create(call_records(record.pk, suspension.calls))
            except IntegrityError as exc:
                if self.tables.runs().filter(run_id=suspension.run_id).exists():
                    raise ValueError(f"Run {suspension.run_id!r} already exists") from exc
                raise
            return StoredRun(
                run_id=suspension.run_id,
                agent_id=suspension.agent_id,
                thread_id=suspension.thread_id,
                resource_id=suspension.resource_id,
                parent_run_id=suspension.parent_run_id,
                created_at=utc(suspension.created_at),
                suspended_at=utc(suspension.suspended_at),
                status="suspended",
                version=1,
                interrupted=False,
                calls=tuple(stored_call(c) for c in suspension.calls),
                snapshot=suspension.snapshot,
                started_by=suspension.started_by,
            )

    def resuspend(self, suspension: Suspension, *, expected_version: int) -> StoredRun | None:
        with self.tables.connection_scope(), transaction.atomic(using=self.tables.using):
            found = self.tables.current_run(suspension.run_id, with_snapshot=False, lock=True)
            if found is None:
                return None
            row = found[0]
            if row["status"] != RunStatus.RUNNING or row["version"] != expected_version:
                return None
            changes: dict[str, Any] = {
                "status": RunStatus.SUSPENDED,
                "version": expected_version + 1,
                "interrupted": False,
                "suspended_at": utc(suspension.suspended_at),
                "lease_expires_at": None,
                "snapshot": suspension.snapshot,
            }
            self.tables.runs().filter(pk=row["pk"]).update(**changes)
            run = {**row, **changes}
            # Replace, never append: repeated suspensions of one run keep the same row count.
            self.tables.calls().filter(run=run["pk"]).delete()
            self.tables.calls().bulk_create(call_records(run["pk"], suspension.calls))
            waiting = [c for c in suspension.calls if c.decision is None]
            audit = AuditEntry.objects.using(self.tables.using)
            for call in waiting:
                # An approval its recheck sent back (``tool(recheck=True)``): it did not run, and why.
                recheck = (call.context or {}).get("recheck")
                if isinstance(recheck, dict):
                    error = recheck.get("error")
                    outcome = Outcome.RECHECK_FAILED if error else Outcome.RECHECK_CHANGED
                    detail = recheck_detail(error if isinstance(error, str) else None)
                    audit.settle(suspension.run_id, outcome, detail, tool_call_ids=[call.tool_call_id])
            audit.settle(
                suspension.run_id,
                Outcome.SUSPENDED_AGAIN,
                suspended_again_detail(c.tool_name for c in waiting),
            )
        return stored_run(run, tuple(stored_call(c) for c in suspension.calls), with_snapshot=True)

    def get_run(self, run_id: str, *, with_snapshot: bool = True) -> StoredRun | None:
        with self.tables.connection_scope():
            found = self.tables.current_run(run_id, with_snapshot=with_snapshot)
            if found is None:
                return None
            run, call_rows = found
            try:
                return stored_run(run, parked_calls(call_rows), with_snapshot=with_snapshot)
            except CorruptRow as exc:
                logger.warning("Run %s is unreadable: %s", run_id, exc)
                raise RunUnreadable(run_id) from exc

    def list_suspended(self, query: RunQuery) -> tuple[list[StoredRun], int]:
        return self._listing(query, _stored_listed)

    def list_waiting(self, query: RunQuery) -> tuple[list[AgentRun], int]:
        """``list_suspended``'s runs as the runtime's listing shows them, made from the rows
        (``RunStore``: one layer of records less)."""
        return self._listing(query, listed_run_from_rows)

    def _listing[R](self, query: RunQuery, record: Callable[[Row, list[Row]], R]) -> tuple[list[R], int]:
        reading = self.tables.listings_using
        with self.tables.connection_scope(reading), self.tables.connection_scope():
            query = replace(
                query,
                created_from=None if query.created_from is None else utc(query.created_from),
                created_to=None if query.created_to is None else utc(query.created_to),
                expiring_before=None if query.expiring_before is None else utc(query.expiring_before),
            )
            # One statement: the page, its calls, the total, and whether a claim's lease ran out (then
            # those runs are reclaimed, waiting again, and the listing is read again).
            runs_read = RunRecord.objects.using(reading)
            runs, total, expired = listing_page(runs_read, reading, query, now=self.tables.clock())
            if expired and self.tables.reclaim_expired():
                runs, total, _ = listing_page(runs_read, reading, query, now=self.tables.clock())
            return readable(runs, record), total

    def queue(self, query: QueueQuery) -> QueuePage:
        """A page of the reviewer's queue across agents (``store.queue``; beyond the runtime's
        protocol: the dashboard's own read)."""
        with self.tables.connection_scope():
            # (An indexed probe, as before a listing: a run whose claim ran out waits again.)
            self.tables.reclaim_expired()
            return queue_page(self.tables.using, query)

    def queue_names(self, scope: QueueScope, column: str, limit: int) -> list[str]:
        """Threads or end users the queue's runs wait on, to suggest (``queue_names``)."""
        with self.tables.connection_scope():
            return queue_names(self.tables.using, scope, column, limit)

    def claim(
        self,
        run_id: str,
        *,
        expected_version: int | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> StoredRun | None:
        with self.tables.connection_scope(), transaction.atomic(using=self.tables.using):
            found = self.tables.current_run(run_id, with_snapshot=True, lock=True)
            if found is None or found[0]["status"] != RunStatus.SUSPENDED:
                return None
            if expected_version is not None and found[0]["version"] != expected_version:
                return None
            row, call_rows = found
            try:
                run = stored_run(row, parked_calls(call_rows), with_snapshot=True)
            except CorruptRow as exc:
                logger.warning("Run %s is unreadable and cannot be continued: %s", run_id, exc)
                return None
            calls = list(run.calls)
            for i, call in enumerate(calls):
                decision = (decisions or {}).get(call.tool_call_id)
                if call.decision is None and decision is not None:
                    recorded = self.tables.calls().filter(pk=call_rows[i]["id"]).undecided()
                    if recorded.update(**decision_columns(decision)) != 1:
                        transaction.set_rollback(True, using=self.tables.using)
                        return None
                    calls[i] = decided_call(call, decision)
            swapped = (
                self.tables.runs()
                .filter(pk=row["pk"], version=run.version)
                .suspended()
                # No lease until its continuation starts (``start_continuation``).
                .update(status=RunStatus.RUNNING, version=run.version + 1, lease_expires_at=None)
            )
            if swapped != 1:
                transaction.set_rollback(True, using=self.tables.using)
                return None
            return replace(run, status="running", version=run.version + 1, calls=tuple(calls))

    def _held_claim(self, run_id: str, version: int, now: datetime) -> RunRecordQuerySet:
        """The run while the claim at ``version`` holds: current version, lease not run out."""
        return self.tables.runs().filter(run_id=run_id, version=version, lease_expires_at__gte=now).running()

    def start_continuation(self, run_id: str, *, version: int) -> bool:
        connection = connections[self.tables.using]
        expires = connection.ops.adapt_datetimefield_value(self.tables.clock() + self.tables.lease)
        with self.tables.connection_scope(), database.cursor(self.tables.using) as cursor:
            cursor.execute(START_CONTINUATION_SQL, [expires, run_id, version])
            return bool(cursor.rowcount == 1)

    def reclaim_expired(self) -> list[tuple[str, str]]:
        with self.tables.connection_scope():
            return self.tables.reclaim_expired()

    def unstarted_claims(self, *, decided_before: datetime) -> list[Continuation]:
        """The continuations of claimed runs nobody started, though their last decision was before
        ``decided_before`` (beyond the protocol: for the sweep that queues them again)."""
        with self.tables.connection_scope():
            rows = self.tables.runs().unstarted_claims(decided_before)
            return [
                Continuation(agent_id=agent_id, run_id=run_id, version=version)
                for agent_id, run_id, version in rows.values_list("agent_id", "run_id", "version")
            ]

    def mark_tool_started(self, run_id: str, tool_call_id: str, *, version: int) -> bool:
        # Only while this claim holds (current version, lease not run out): a continuation that lost
        # its run must not run the tool. Committed (autocommit) before the tool is called.
        connection = connections[self.tables.using]
        now = connection.ops.adapt_datetimefield_value(self.tables.clock())
        with self.tables.connection_scope(), database.cursor(self.tables.using) as cursor:
            cursor.execute(MARK_TOOL_STARTED_SQL, [now, tool_call_id, run_id, version, now])
            return bool(cursor.rowcount == 1)

    def heartbeat(self, run_id: str, *, version: int) -> bool:
        with self.tables.connection_scope():
            now = self.tables.clock()
            # A claim whose lease already ran out is given back (reclaimed), never renewed.
            held = self._held_claim(run_id, version, now)
            if held.update(lease_expires_at=now + self.tables.lease) == 1:
                return True
            self.tables.reclaim_expired()
            return False

    def finish(
        self,
        run_id: str,
        *,
        version: int,
        thread_messages: Sequence[Any] = (),
        ending: RunEnding | None = None,
    ) -> bool:
        # One conditional DELETE: the claim must be current and its lease not run out (an expired
        # claim is reclaimed, never finished). The calls go with it (ON DELETE CASCADE). Raw SQL
        # for RETURNING, which tells the run's thread without a read of its own.
        connection = connections[self.tables.using]
        outcome, detail = ending_outcome(ending)
        ended_at = self.tables.clock()
        now = connection.ops.adapt_datetimefield_value(ended_at)
        with self.tables.connection_scope():
            if connection.vendor == "postgresql":
                # One statement and no transaction around it: three round trips fewer on a path
                # every approval takes.
                messages = ThreadMessage._meta.get_field("messages").get_db_prep_value(
                    list(thread_messages), connection
                )
                record = ended_record(ending)
                transcript = EndedRun._meta.get_field("transcript").get_db_prep_value(
                    record["transcript"], connection
                )
                with database.cursor(self.tables.using) as cursor:
                    cursor.execute(
                        FINISH_REMEMBERING_SQL,
                        [
                            *(run_id, version, now, messages, bool(thread_messages)),
                            *(run_id, now, record["status"], record["detail"], transcript),
                            *(outcome, detail, run_id),
                        ],
                    )
                    (ended,) = cursor.fetchone()
                return bool(ended)
            with transaction.atomic(using=self.tables.using), connection.cursor() as cursor:
                cursor.execute(FINISH_SQL, [run_id, version, now])
                row = cursor.fetchone()
                if row is None:
                    return False
                agent_id, thread_id, resource_id, parent_run_id, created_at = row
                if thread_id is not None and thread_messages:
                    ThreadMessage.objects.using(self.tables.using).create(
                        agent_id=agent_id, thread_id=thread_id, messages=list(thread_messages)
                    )
                EndedRun.objects.using(self.tables.using).bulk_create(
                    [
                        EndedRun(
                            run_id=run_id,
                            agent_id=agent_id,
                            thread_id=thread_id,
                            resource_id=resource_id,
                            parent_run_id=parent_run_id,
                            created_at=_raw_datetime(created_at),
                            ended_at=ended_at,
                            **ended_record(ending),
                        )
                    ],
                    ignore_conflicts=True,
                )
                AuditEntry.objects.using(self.tables.using).settle(run_id, outcome, detail)
                return True

    def append_thread_messages(self, agent_id: str, thread_id: str, messages: Sequence[Any]) -> None:
        if not messages:
            return
        with self.tables.connection_scope():
            ThreadMessage.objects.using(self.tables.using).create(
                agent_id=agent_id, thread_id=thread_id, messages=list(messages)
            )

    def count_calls(self, agent_id: str, calls: Mapping[str, int], *, at: datetime) -> None:
        # Into the health rollup's hourly rows as the fold counts a parked run's transcript
        # (``approvals.health.counting.count_ended``): one upsert.
        hour = utc(at).replace(minute=0, second=0, microsecond=0)
        rows = [(Series.CALLS.value, hour, agent_id, tool, "", n, 0.0) for tool, n in sorted(calls.items())]
        with self.tables.connection_scope():
            add_counts(rows, using=self.tables.using)

    def thread_messages(self, agent_id: str, thread_id: str, *, last_runs: int | None = None) -> list[Any]:
        with self.tables.connection_scope():
            messages: list[Any] = []
            rows = ThreadMessage.objects.using(self.tables.using).for_thread(agent_id, thread_id)
            read = rows.values_list("pk", "messages")
            chunks: Iterable[tuple[int, Any]] = read
            if last_runs is not None:
                # One row per ended run: the newest from the thread's index, then oldest first.
                chunks = reversed(list(read.reverse()[: max(last_runs, 0)]))
            for pk, chunk in chunks:
                if isinstance(chunk, list):
                    messages.extend(chunk)
                else:
                    logger.warning(
                        "Thread message row %s of %s/%s is not a JSON list; skipped", pk, agent_id, thread_id
                    )
            return messages


def ended_record(ending: RunEnding | None) -> dict[str, Any]:
    """The ``EndedRun`` columns that come from how the run ended (a run dropped without an ending,
    e.g. a sub-agent's run its supervisor no longer waits on, is recorded as failed)."""
    status, detail = Outcome.FAILED, ""
    transcript: list[Any] = []
    if ending is not None:
        status = Outcome.COMPLETED if ending.status == "completed" else Outcome.FAILED
        detail, transcript = clean_text(ending.detail), list(ending.transcript)
    return {"status": status, "detail": detail, "transcript": transcript}


def _raw_datetime(value: Any) -> datetime:
    """A datetime column read with raw SQL: SQLite hands back the stored text (UTC)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return utc(value)


# -- rows <-> records -----------------------------------------------------------------------------
