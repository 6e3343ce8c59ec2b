"""Reading runs: which columns a run and its calls are read from, the statements that read them,
and rows <-> the runtime's records.

The hottest reads (every decision, claim and continuation reads one run and its calls by run id; a
listing's statement is ``listing``'s, compiled the same way) are the statements the ORM builds,
compiled once per shape. Building those queries (some thirty columns) costs about a millisecond of
CPU each, several times running them, and they never change: each is compiled once per shape (by run
id or by run id and agent, with or without the snapshot, locked or not) and database, then run on the
calling thread's connection through the ORM's own converters.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

from django.db import connections, models

from agents_runtime import deadlines
from agents_runtime.records import Decision, Delegation, ParkedCall, StoredRun, construct
from agents_runtime.vocabulary import CallKind, DecisionAction
from approvals.models import ParkedCallRecord, RunRecord
from approvals.server import database

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
                deadline=deadlines.to_json(call.deadline),
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


def parked_call(row: Row) -> ParkedCall:
    tool_call_id, tool_name = row["tool_call_id"], row["tool_name"]
    kind = _CALL_KINDS.get(row["kind"])
    if not isinstance(tool_call_id, str) or not tool_call_id or not isinstance(tool_name, str):
        raise CorruptRow(f"call row {row['id']} has no tool call id or tool name")
    if kind is None:
        raise CorruptRow(f"call {tool_call_id!r} has an unknown kind {row['kind']!r}")
    delegation = _optional_dict(row, "delegation")
    try:
        parsed_delegation = (
            None
            if delegation is None
            else Delegation(
                tool_call_id=str(delegation["tool_call_id"]),
                inner_run_id=str(delegation["inner_run_id"]),
                inner_tool_call_id=str(delegation["inner_tool_call_id"]),
                agent_id=None if delegation.get("agent_id") is None else str(delegation["agent_id"]),
            )
        )
    except KeyError as exc:
        raise CorruptRow(f"call {tool_call_id!r}: delegation lacks {exc}") from exc
    decision = None
    if row["action"] is not None:
        action = _ACTIONS.get(row["action"])
        if action is None or row["decided_at"] is None:
            raise CorruptRow(f"call {tool_call_id!r} has an invalid decision ({row['action']!r})")
        decision = Decision(
            action=action,
            decided_at=utc(row["decided_at"]),
            actor=row["actor"],
            reason=row["reason"],
            resume_data=row["resume_data"],
            edited_args=_optional_dict(row, "edited_args"),
            grant_id=row["grant_id"],
        )
    return construct(
        ParkedCall,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        kind=kind,
        args=_optional_dict(row, "args"),
        suspend_payload=row["suspend_payload"],
        suspend_schema=_optional_dict(row, "suspend_schema"),
        resume_schema=_optional_dict(row, "resume_schema"),
        delegation=parsed_delegation,
        decision=decision,
        tool_started_at=None if row["tool_started_at"] is None else utc(row["tool_started_at"]),
        context=context if isinstance(context := row.get("context"), dict) else None,
        expires_at=None if row["expires_at"] is None else utc(row["expires_at"]),
        deadline=_deadline(row),
        escalated_to=row["escalated_to"],
        votes=_votes(row),
    )


def _deadline(row: Row) -> deadlines.Deadline | None:
    if row["deadline"] is None:
        return None
    try:
        return deadlines.from_json(row["deadline"])
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


def stored_run(row: Row, calls: tuple[ParkedCall, ...], *, with_snapshot: bool) -> StoredRun:
    history = row["history"]
    if not isinstance(history, list) or not all(isinstance(entry, dict) for entry in history):
        raise CorruptRow("history is not a list of objects")
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
