"""The audit row of a decision, as the run store writes it in the step that records the decision.

``DjangoRunStore.decide`` writes the row in the same transaction (SQLite) or the same statement
(PostgreSQL) as the decision itself, so a tool can never run without its decision on record; the
steps that end, park again or take back a run settle its ``continuing`` rows (``settle_sql``). The
words the audit log and the dashboard use for how a run went on are spelled here, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from agents_runtime.grants import Grant, GrantScope
from agents_runtime.records import Decision, ParkedCall, RunEnding, StoredRun, Vote
from agents_runtime.routing import Rule
from agents_runtime.untrusted import clean_text
from agents_runtime.vocabulary import (
    CONTINUING_DETAIL,
    CallKind,
    DecisionAction,
    Outcome,
    completed_detail,
    failed_detail,
    waiting_detail,
)
from approvals.models import DECIDING_BATCH, RECORD_FIELDS, AuditEntry, current_channel

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
