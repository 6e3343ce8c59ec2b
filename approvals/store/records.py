"""Rows <-> the runtime's records: which columns a run and a call are read from, and back."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from agents_runtime import deadlines
from agents_runtime.records import Decision, Delegation, ParkedCall, StoredRun, construct
from agents_runtime.vocabulary import CallKind, DecisionAction
from approvals.models import ParkedCallRecord

logger = logging.getLogger(__name__)


# Stored value -> word; a dict lookup per row is cheaper than calling the enum.
_CALL_KINDS = {kind.value: kind for kind in CallKind}
_ACTIONS = {action.value: action for action in DecisionAction}

#: Columns a StoredRun is built from (the snapshot is added only where it is handed out).
_RUN_COLUMNS = (
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
_LEASE_COLUMNS = ("lease_expires_at",)
_CALL_COLUMNS = (
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
_JOINED_CALL_COLUMNS = tuple(f"calls__{name}" for name in _CALL_COLUMNS if name != "run_id")


def _utc(value: datetime) -> datetime:
    if value.tzinfo is UTC:  # as psycopg reads them in a UTC session: kept, not copied
        return value
    # Naive datetimes are taken as UTC, like everywhere else in the runtime.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class CorruptRow(ValueError):
    """A stored row that cannot be turned back into the runtime's records."""


def _decision_columns(decision: Decision) -> dict[str, Any]:
    return {
        "action": decision.action,
        "actor": decision.actor,
        "decided_at": _utc(decision.decided_at),
        "reason": decision.reason,
        "resume_data": decision.resume_data,
        "edited_args": decision.edited_args,
        "grant_id": decision.grant_id,
    }


def _votes_column(votes: Iterable[Decision]) -> list[dict[str, Any]]:
    return [replace(v, decided_at=_utc(v.decided_at)).to_json() for v in votes]


def _decided(call: ParkedCall, decision: Decision) -> ParkedCall:
    # What a round trip through the database gives back (aware UTC times).
    return replace(call, decision=replace(decision, decided_at=_utc(decision.decided_at)))


def _stored_call(call: ParkedCall) -> ParkedCall:
    return call if call.decision is None else _decided(call, call.decision)


def _overturned(row: Row) -> dict[str, Any]:
    """A history entry for a decision an interrupted continuation did not carry out.

    Same shape as ``agents_runtime.store.reclaimed_calls`` writes; tolerant of odd rows, because
    reclaiming must never fail.
    """
    decided_at = row["decided_at"]
    return {
        "tool_call_id": row["tool_call_id"],
        "tool_name": row["tool_name"],
        "action": row["action"],
        "decided_at": None if decided_at is None else _utc(decided_at).isoformat(),
        "actor": row["actor"],
        "reason": row["reason"],
        "resume_data": row["resume_data"],
        "edited_args": row["edited_args"],
    }


def _call_records(run_pk: int, calls: Iterable[ParkedCall]) -> list[ParkedCallRecord]:
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
                votes=_votes_column(call.votes),
                tool_started_at=None if call.tool_started_at is None else _utc(call.tool_started_at),
                expires_at=None if call.expires_at is None else _utc(call.expires_at),
                deadline=deadlines.to_json(call.deadline),
                escalated_to=call.escalated_to,
                **({} if call.decision is None else _decision_columns(call.decision)),
            )
        )
    return records


def _optional_dict(row: Row, name: str) -> dict[str, Any] | None:
    value = row[name]
    if value is not None and not isinstance(value, dict):
        raise CorruptRow(f"call {row['tool_call_id']!r}: {name} is a {type(value).__name__}, not an object")
    return value


def _parked_call(row: Row) -> ParkedCall:
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
            decided_at=_utc(row["decided_at"]),
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
        tool_started_at=None if row["tool_started_at"] is None else _utc(row["tool_started_at"]),
        context=context if isinstance(context := row.get("context"), dict) else None,
        expires_at=None if row["expires_at"] is None else _utc(row["expires_at"]),
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


def _parked_calls(rows: Iterable[Row]) -> tuple[ParkedCall, ...]:
    return tuple(_parked_call(row) for row in rows)


def _stored_run(row: Row, calls: tuple[ParkedCall, ...], *, with_snapshot: bool) -> StoredRun:
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
        created_at=_utc(row["created_at"]),
        suspended_at=_utc(row["suspended_at"]),
        status=cast(Any, str(row["status"])),
        version=row["version"],
        interrupted=row["interrupted"],
        calls=calls,
        snapshot=snapshot,
        history=tuple(history),
        started_by=row.get("started_by"),
    )
