"""State changes: decisions on parked tool calls and new runs, each with its audit record.

Views, the JSON API and consumers call these; none of them talks to the runtime's write methods
directly. Every function takes the acting user's rights as resolved for the request
(``approvals.access.AgentAccess``: the agent and the user's right to it, checked when it was built;
the identity comes from the login, never from a form), refuses a user who may not decide, calls the
runtime's public API, waits for the run to go as far as it goes
(completed, suspended again, failed) and records what happened in ``AuditEntry``.

Audit policy: every decision that reached the runtime gets one row. A decision the runtime accepted
is written by the run store in the very step that records it (``approvals.runstore.audit``), and
settled there when the run goes on; this module writes the rows of attempts that changed nothing:
lost races (``lost_race``: "already decided by X at T") and data the runtime refused (``invalid``).
Edited arguments, answers and reasons that fail the form's own validation never reach the runtime;
they are recorded as ``invalid`` too (``attempt_invalid_record``: who, when, which call, the
errors), kept apart from decisions by the audit log's default view. A decision on a run that no
longer exists, or that the user may not see (``not_found``), leaves no row.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction
from django.utils import timezone

from agents_runtime import (
    Agent,
    AgentRun,
    DecisionRefused,
    InvalidResumeData,
    RerunNotConfirmed,
    RunAlreadyDecided,
    RunNotFound,
    ToolCallNotSuspended,
)
from agents_runtime.untrusted import clean_json, clean_text
from agents_runtime.vocabulary import DecisionAction, Outcome
from approvals import audit_channel, live
from approvals.access import DECIDE_PERMISSION, Access, AgentAccess
from approvals.models.audit import AuditEntry
from approvals.models.batches import DECIDING_BATCH
from approvals.services.outcomes import Attempt, DecisionOutcome, outcome_of, same_json

logger = logging.getLogger(__name__)


async def _attempt(
    agent: Agent,
    *,
    action: DecisionAction,
    run_id: str,
    tool_call_id: str,
    actor: str,
    reason: str | None,
    resume_data: Any,
    edited_args: dict[str, Any] | None = None,
    confirm_rerun: bool = False,
    shown: AgentRun | None = None,
) -> Attempt:
    attempt = Attempt(edited_args=edited_args)
    try:
        # What the reviewer decided on, for the record ("args as shown"): as the caller read it
        # just now, if it did.
        attempt.run_before = shown if shown is not None else await agent.get_suspended_run(run_id)
        attempt.call = next(
            (c for c in attempt.run_before.tool_calls if c.tool_call_id == tool_call_id), None
        )
    except RunNotFound:
        # Gone, or claimed by a continuation right now: the decision call below raises the precise
        # error (``RunAlreadyDecided`` names the winner while the run is being continued).
        pass
    if (
        attempt.edited_args is not None
        and attempt.call is not None
        and same_json(attempt.edited_args, attempt.call.args)
    ):
        # Nothing was changed: a plain approval (and recorded as one).
        attempt.edited_args = None
    try:
        if action == DecisionAction.APPROVE:
            stream = await agent.approve_tool_call(
                run_id=run_id,
                tool_call_id=tool_call_id,
                actor=actor,
                edited_args=attempt.edited_args,
                confirm_rerun=confirm_rerun,
            )
        elif action == DecisionAction.DECLINE:
            stream = await agent.decline_tool_call(
                run_id=run_id, tool_call_id=tool_call_id, reason=reason or None, actor=actor
            )
        else:
            stream = await agent.resume_stream(
                resume_data,
                run_id=run_id,
                tool_call_id=tool_call_id,
                actor=actor,
                confirm_rerun=confirm_rerun,
            )
    except (
        RunNotFound,
        ToolCallNotSuspended,
        RunAlreadyDecided,
        InvalidResumeData,
        RerunNotConfirmed,
        DecisionRefused,
    ) as exc:
        attempt.error = exc
        return attempt
    try:
        attempt.result = await stream.result()
    except (RunNotFound, ToolCallNotSuspended, RunAlreadyDecided, InvalidResumeData) as exc:
        attempt.error = exc
        return attempt
    except Exception as exc:
        # The decision is on record in the runtime; the continuation broke. Report it, do not 500.
        logger.exception("Run %s: continuation after %s failed", run_id, action)
        attempt.crash = f"{type(exc).__name__}: {exc}"
        return attempt
    if attempt.result.status == "suspended":
        try:
            attempt.run_after = await agent.get_suspended_run(run_id)
        except RunNotFound:
            attempt.run_after = None
    return attempt


async def adecide(
    access: Access | AgentAccess,
    *,
    run_id: str,
    tool_call_id: str,
    action: DecisionAction,
    reason: str = "",
    resume_data: Any = None,
    edited_args: dict[str, Any] | None = None,
    confirm_rerun: bool = False,
    shown: AgentRun | None = None,
) -> DecisionOutcome:
    """A decision (``action`` on the call, with what it carries), from async code: the runtime's
    call awaited on this loop, the record's reads and writes on the caller's database thread (an
    async API view makes one hop to the database, not a round trip through a thread and back).
    ``decision_approve`` and the others say what each action takes."""
    who = access.access if isinstance(access, AgentAccess) else access
    if not who.can_decide:
        # (The refusal names the groups that grant the permission: a query, off the loop.)
        await sync_to_async(who.require)(DECIDE_PERMISSION, to="decide on suspended runs")
    agent_id = ""
    if isinstance(access, AgentAccess) and not await sync_to_async(access.may_decide_call)(
        run_id, tool_call_id
    ):
        # Seen only for calls escalated to the user's groups, and this is none of them.
        attempt = Attempt(error=RunNotFound(run_id), edited_args=edited_args)
    elif isinstance(access, AgentAccess):
        agent_id = access.agent.id
        attempt = await _attempt(
            access.agent,
            action=action,
            run_id=run_id,
            tool_call_id=tool_call_id,
            actor=who.username,
            reason=reason,
            resume_data=resume_data,
            edited_args=edited_args,
            confirm_rerun=confirm_rerun,
            shown=shown if shown is not None and shown.run_id == run_id else None,
        )
    else:
        # No agent of the user's has this run waiting (the caller looked): report who decided it,
        # if anyone here did.
        attempt = Attempt(error=RunNotFound(run_id), edited_args=edited_args)
    return await sync_to_async(_recorded)(
        who, agent_id, attempt, run_id=run_id, tool_call_id=tool_call_id, action=action,
        reason=reason, resume_data=resume_data,
    )  # fmt: skip


def _decide(access: Access | AgentAccess, **decision: Any) -> DecisionOutcome:
    """The decision, from a request's thread (the dashboard's views, batches)."""
    return async_to_sync(adecide)(access, **decision)


def _recorded(
    who: Access,
    agent_id: str,
    attempt: Attempt,
    *,
    run_id: str,
    tool_call_id: str,
    action: DecisionAction,
    reason: str,
    resume_data: Any,
) -> DecisionOutcome:
    """What the attempt came to, with its audit row (the store wrote it for a decision it took)."""
    user, actor = who.user, who.username
    base: dict[str, Any] = {
        "action": action,
        "agent_id": agent_id,
        "run_id": run_id,
        "tool_call_id": tool_call_id,
        "decided_by": actor,
        "decided_at": timezone.now(),
        "tool_name": attempt.call.tool_name if attempt.call else "",
        "thread_id": attempt.run_before.thread_id if attempt.run_before else None,
        "resource_id": attempt.run_before.resource_id if attempt.run_before else None,
        "args": attempt.call.args if attempt.call else None,
        "edited_args": attempt.edited_args,
    }
    outcome = outcome_of(attempt, base, run_id=run_id, tool_call_id=tool_call_id, visible=list(who.agent_ids))
    if outcome.status in {Outcome.NOT_FOUND, Outcome.UNCONFIRMED}:
        # Nothing was decided and nothing of the run changed (as a form that fails validation).
        return outcome
    if outcome.took_effect:
        written = AuditEntry.objects.for_call(run_id, tool_call_id).winning().filter(username=actor)
        entry_id = written.order_by("-created_at", "-id").values_list("pk", flat=True).first()
        if attempt.crash is None:
            # The store wrote the row when it took the decision, and settles its outcome as the run
            # ends: the run's own events (call-decided, then how it ended) tell pages to look again.
            return replace(outcome, audit_entry_id=entry_id)
        # The continuation broke in this process before the run settled: say so on the record.
        AuditEntry.objects.settle(run_id, Outcome.FAILED, clean_text(outcome.message))
    else:
        entry_id = _refused_attempt_row(user, actor, outcome, attempt, action, reason, resume_data).pk
    # A record the run's events do not announce: pages that show decisions (the run page, the
    # audit log) refetch once it is there.
    event = {
        "type": "decision-recorded",
        "agent_id": outcome.agent_id,
        "run_id": run_id,
        "tool_call_id": tool_call_id,
        "action": str(action),
        "actor": actor,
    }
    transaction.on_commit(partial(live.announce, event), robust=True)
    return replace(outcome, audit_entry_id=entry_id)


def _refused_attempt_row(
    user: Any,
    actor: str,
    outcome: DecisionOutcome,
    attempt: Attempt,
    action: DecisionAction,
    reason: str,
    resume_data: Any,
) -> AuditEntry:
    """The row of an attempt that changed nothing (a lost race, or data the runtime refused)."""
    run_id, tool_call_id = outcome.run_id, outcome.tool_call_id
    text = clean_text
    return AuditEntry.objects.create(
        created_at=outcome.decided_at,
        user=user if getattr(user, "pk", None) else None,
        username=actor,
        agent_id=outcome.agent_id,
        run_id=run_id,
        thread_id=outcome.thread_id or "",
        resource_id=outcome.resource_id or "",
        tool_call_id=tool_call_id,
        tool_name=outcome.tool_name,
        args=attempt.call.args if attempt.call else None,
        suspend_payload=attempt.call.suspend_payload if attempt.call else None,
        action=action,
        reason=text(reason or ""),
        # Refused data is kept as sent, in the normal form a database can hold (NaN, NUL...).
        resume_data=clean_json(resume_data) if action == DecisionAction.RESUME else None,
        edited_args=clean_json(attempt.edited_args) if action == DecisionAction.APPROVE else None,
        outcome=outcome.status,
        outcome_detail=text(outcome.message),
        channel=audit_channel.current(),
        batch_id=DECIDING_BATCH.get(),
    )


def decision_approve(
    access: Access | AgentAccess,
    *,
    run_id: str,
    tool_call_id: str,
    edited_args: dict[str, Any] | None = None,
    confirm_rerun: bool = False,
    shown: AgentRun | None = None,
) -> DecisionOutcome:
    """Approve one parked call: the tool runs (once) when the run continues.

    ``access`` is the run's agent with the user's right to it, or just the user's rights when no
    agent of theirs has the run waiting (the outcome then says who decided it, if anyone did).

    A call interrupted after its tool started may have run: approving it again needs
    ``confirm_rerun`` (else ``unconfirmed``, nothing decided).

    With ``edited_args`` the tool runs with these arguments (the whole object) instead of the
    model's; the runtime checks them against the tool's parameters first, and refuses them
    (``invalid``, ``refused_args``, field errors) without deciding anything. Arguments equal to the
    model's are a plain approval.

    ``shown``: the run as the caller read it just before (the API does, to check the data first):
    the record's "arguments as shown" come from it rather than from reading the run again.
    """
    return _decide(
        access,
        run_id=run_id,
        tool_call_id=tool_call_id,
        action=DecisionAction.APPROVE,
        edited_args=edited_args,
        confirm_rerun=confirm_rerun,
        shown=shown,
    )


def decision_decline(
    access: Access | AgentAccess,
    *,
    run_id: str,
    tool_call_id: str,
    reason: str = "",
    shown: AgentRun | None = None,
) -> DecisionOutcome:
    """Decline one parked call; the model receives ``reason`` (or the runtime's default) as the result
    (``shown`` as for ``decision_approve``)."""
    return _decide(
        access,
        run_id=run_id,
        tool_call_id=tool_call_id,
        action=DecisionAction.DECLINE,
        reason=reason.strip(),
        shown=shown,
    )


def decision_resume(
    access: Access | AgentAccess,
    *,
    run_id: str,
    tool_call_id: str,
    resume_data: Any,
    confirm_rerun: bool = False,
    shown: AgentRun | None = None,
) -> DecisionOutcome:
    """Answer a ``suspend()``-ed call with data already validated against its resume schema
    (``confirm_rerun`` and ``shown`` as for ``decision_approve``)."""
    return _decide(
        access,
        run_id=run_id,
        tool_call_id=tool_call_id,
        action=DecisionAction.RESUME,
        resume_data=resume_data,
        confirm_rerun=confirm_rerun,
        shown=shown,
    )


def attempt_invalid_record(
    access: Access | AgentAccess,
    *,
    run_id: str,
    tool_call_id: str,
    action: DecisionAction,
    errors: str,
) -> AuditEntry | None:
    """Record an attempt whose data failed the form's validation (nothing reached the runtime).

    The card shows the errors as before; the audit log keeps who tried what on which call, with the
    errors, as an ``invalid`` attempt (hidden from its default view). Nothing is recorded for a run
    no agent of the user's has waiting (the card then says it is gone).
    """
    if not isinstance(access, AgentAccess):
        return None
    who = access.access
    who.require(DECIDE_PERMISSION, to="decide on suspended runs")
    try:
        run = async_to_sync(access.agent.get_suspended_run)(run_id)
    except RunNotFound:
        return None
    call = next((c for c in run.tool_calls if c.tool_call_id == tool_call_id), None)
    if call is None:
        return None
    return AuditEntry.objects.create(
        created_at=timezone.now(),
        user=who.user if getattr(who.user, "pk", None) else None,
        username=who.username,
        agent_id=access.agent.id,
        run_id=run_id,
        thread_id=run.thread_id or "",
        resource_id=run.resource_id or "",
        tool_call_id=tool_call_id,
        tool_name=call.tool_name,
        args=call.args,
        suspend_payload=call.suspend_payload,
        action=action,
        outcome=Outcome.INVALID,
        outcome_detail=clean_text(f"Not sent (the form refused it): {errors}"),
    )
