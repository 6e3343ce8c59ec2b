"""The one door: every decision a person takes at the desk, whatever the entry point.

The card's buttons and the keyboard (``views.decisions``), bulk batches (``services.batches``), the
v1 API and the Mastra-compatible routes (``api``) build a ``DecisionRequest`` and call ``decide``
(or ``adecide`` from async code); standing grants and deadlines decide inside the runtime, through
the same ``Agent.decide``. None of them checks a rule: the request goes to the runtime, whose atomic
decision step checks the desk's policy (``approvals.policy.DeskPolicy``: whose call it is, a
colleague's claim) and its own rules (re-runs, stale arguments, risky calls, separation of duties,
votes), each refusal named. What comes back is a receipt (``DecisionOutcome``): what happened in
one sentence, the audit row written, the run as it is now.

Who decides comes from the login, never from the request: ``decide`` stamps the user's name and
rights on it. Audit policy: every decision that reached the runtime gets one row. The run store
writes the row of a decision it took, in the very step that records it (the receipt carries its
id); this module writes the rows of attempts that changed nothing (a lost race, data or a rule the
runtime refused: ``recorded_refusal``) and of data a form refused before sending
(``attempt_invalid_record``). A refusal that asks for a confirmation (a re-run, a risky call, a
colleague's claim) and a call the user may not see leave no row, as a form's errors do not.

The undo window: a decision taken in the browser (origin ``dashboard``) is held, not taken, for
``DECISION_UNDO_SECONDS`` when that is above zero. Every rule is checked at once
(``Agent.check_decision``), so a refusal is said at once; a decision that would be taken is held
(``services.holds``: a row, nothing else changes, nothing runs) and its receipt says ``held``. The
sweep takes it when the window ends (``commit_held``), through this door with the same request, as if
decided then; an undo in the window records ``undone`` and nothing else. Every other door (bulk,
"approve and allow", the API, grants, deadlines, the sweep's own commit: ``hold=False``) decides at
once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from agents_runtime import (
    Agent,
    AgentRun,
    AgentRunToolCall,
    ApprovalTally,
    CallClaimed,
    DecisionRefused,
    DecisionRequest,
    InvalidResumeData,
    InvalidToolArgs,
    NotADecider,
    Origin,
    RerunNotConfirmed,
    RiskyNotConfirmed,
    RunAlreadyDecided,
    RunNotFound,
    RunResult,
    RunUnreadable,
    ToolCallNotSuspended,
    escalated,
)
from agents_runtime.store import (
    EFFECTIVE_OUTCOMES,
    DecisionAction,
    Outcome,
    Verdict,
    completed_detail,
    failed_detail,
    recheck_detail,
    suspended_again_detail,
    waiting_detail,
)
from agents_runtime.untrusted import MAX_REASON_LENGTH, clean_json, clean_text
from approvals import live
from approvals.models import DECIDING_BATCH, AuditEntry, Channel, HeldDecision, current_channel, using_channel
from approvals.policy import DECIDE_PERMISSION, Access, AgentAccess, CallHeld
from approvals.services import holds
from approvals.webhooks.events import endpoints_read_once

logger = logging.getLogger(__name__)

#: What the runtime refuses a decision with; each becomes an outcome (``outcomes.outcome_of``).
REFUSALS = (
    RunNotFound,
    ToolCallNotSuspended,
    RunAlreadyDecided,
    InvalidResumeData,
    RerunNotConfirmed,
    DecisionRefused,
)

#: The audit log's channel of each door.
CHANNELS: dict[Origin, Channel] = {
    Origin.DASHBOARD: "dashboard",
    Origin.BULK: "dashboard",
    Origin.API: "api",
    Origin.MASTRA: "api",
    Origin.GRANT: "grant",
    Origin.RULE: "rule",
    Origin.DEADLINE: "deadline",
    Origin.REQUESTER: "api",
}


def decide(access: Access | AgentAccess, request: DecisionRequest, *, hold: bool = True) -> DecisionOutcome:
    """``adecide`` from a request's thread (the dashboard's views, batches)."""
    return async_to_sync(adecide)(access, request, hold=hold)


async def adecide(
    access: Access | AgentAccess, request: DecisionRequest, *, hold: bool = True
) -> DecisionOutcome:
    """Take ``request`` through the runtime as the user ``access`` is of, and say what came of it.

    ``access`` is the run's agent with the user's right to it, or only the user's rights when no agent
    of theirs has the run waiting (the outcome then says who decided it, if anyone did). The
    runtime's call is awaited on this loop, the record's reads and writes on the database thread.
    ``hold``: a browser's decision is held for the undo window (if there is one) instead of taken;
    False takes it at once whatever its origin.
    """
    who = access.access if isinstance(access, AgentAccess) else access
    if not who.can_decide:
        # (The refusal names the groups that grant the permission: a query, off the loop.)
        await sync_to_async(who.require)(DECIDE_PERMISSION, to="decide on suspended runs")
    request = replace(
        request,
        actor=who.username,
        principal=who,
        reason=(request.reason or "").strip() or None,
    )
    if hold and isinstance(access, AgentAccess) and _held_here(request):
        return await _held(access, request)
    if isinstance(access, AgentAccess):
        with using_channel(CHANNELS.get(request.origin, current_channel())), endpoints_read_once():
            attempt = await _attempt(access, request)
    else:
        attempt = Attempt(error=RunNotFound(request.run_id), edited_args=request.edited_args)
    agent_id = access.agent.id if isinstance(access, AgentAccess) else ""
    if attempt.error is None and attempt.crash is None:
        # Taken, and the run went on: the store wrote the record in the deciding step and settles its
        # outcome as the run ends, and the run's own events (call-decided, then how it ended) tell
        # pages to look again: nothing is left to read or write (no hop to the database thread).
        return replace(_outcome(who, agent_id, attempt, request), audit_entry_id=attempt.record_id)
    return await sync_to_async(_recorded)(who, agent_id, attempt, request)


async def acancel(agent: Agent, run_id: str, tool_call_id: str, *, actor: str, reason: str | None) -> None:
    """The requester withdraws its request (an external agent's, ``services.requests``): a decision
    through the runtime's door like the others, taken or refused whole (``RunAlreadyDecided`` when
    someone decided first); its run ends at once, nothing runs."""
    request = DecisionRequest(
        run_id,
        tool_call_id,
        DecisionAction.CANCEL,
        actor=actor,
        origin=Origin.REQUESTER,
        reason=(reason or "").strip() or None,
    )
    with using_channel(CHANNELS[Origin.REQUESTER]):
        decided = await agent.decide(request)
    await decided.stream.result()


async def _attempt(access: AgentAccess, request: DecisionRequest) -> Attempt:
    """The decision through the runtime's one door, and how far the run went on."""
    attempt = Attempt(edited_args=request.edited_args)
    try:
        decided = await access.agent.decide(request)
    except REFUSALS as exc:
        attempt.error = exc
        return attempt
    attempt.call, attempt.record_id = decided.call, decided.record_id
    attempt.run_before = decided.run
    if request.edited_args is not None and same_json(request.edited_args, decided.call.args):
        attempt.edited_args = None  # (the runtime recorded the same arguments: a plain approval)
    try:
        attempt.result = await decided.stream.result()
    except REFUSALS as exc:
        attempt.error = exc
        return attempt
    except Exception as exc:
        # The decision is on record in the runtime; the continuation broke. Report it, do not 500.
        logger.exception("Run %s: continuation after %s failed", request.run_id, request.action)
        attempt.crash = f"{type(exc).__name__}: {exc}"
        return attempt
    if attempt.result.status == "suspended":
        if attempt.result.approvals is not None or _still_waits(decided.run, attempt.result):
            attempt.run_after = decided.run  # nothing ran: the run as the decision left it
        else:
            try:
                attempt.run_after = await access.agent.get_suspended_run(request.run_id)
            except RunNotFound:
                attempt.run_after = None
    return attempt


# -- the undo window: held, then taken ----------------------------------------------------------------


def _held_here(request: DecisionRequest) -> bool:
    """Whether this door holds the decision for an undo window: the browser's, when there is one."""
    return request.origin == Origin.DASHBOARD and bool(undo_window())


def undo_window() -> timedelta:
    """How long a decision taken in the browser is held (zero: taken at once)."""
    return timedelta(seconds=max(0, int(getattr(settings, "DECISION_UNDO_SECONDS", 0) or 0)))


async def _held(access: AgentAccess, request: DecisionRequest) -> DecisionOutcome:
    """The decision checked against every rule now and, if it would be taken, held for the window."""
    with using_channel(CHANNELS[request.origin]):
        try:
            run = await access.agent.check_decision(request)
        except REFUSALS as exc:
            attempt = Attempt(error=exc, edited_args=request.edited_args)
            return await sync_to_async(_recorded)(access.access, access.agent.id, attempt, request)
    return await sync_to_async(_hold)(access, request, run)


def _hold(access: AgentAccess, request: DecisionRequest, run: AgentRun) -> DecisionOutcome:
    if request.tool_call_id is None:
        # (The rules let it through: the run waits on exactly one call.)
        request = replace(request, tool_call_id=run.tool_calls[0].tool_call_id)
    call = next(c for c in run.tool_calls if c.tool_call_id == request.tool_call_id)
    if request.edited_args is not None and same_json(request.edited_args, call.args):
        request = replace(request, edited_args=None)  # a plain approval, held as one
    try:
        held = holds.hold_create(access, request, run, window=undo_window())
    except RunAlreadyDecided as decided:
        attempt = Attempt(error=decided, edited_args=request.edited_args)
        return _recorded(access.access, access.agent.id, attempt, request)
    if held is None:
        # Someone held a decision on the call since the check: theirs is first.
        other = holds.held_on(run.run_id, call.tool_call_id)
        error = CallHeld(
            run_id=run.run_id,
            tool_call_id=call.tool_call_id,
            held_by=other.username if other is not None else "another reviewer",
        )
        attempt = Attempt(error=error, edited_args=request.edited_args)
        return _recorded(access.access, access.agent.id, attempt, request)
    return held_outcome(held, run)


def held_outcome(held: HeldDecision, run: AgentRun) -> DecisionOutcome:
    """The receipt of a decision held for its undo window (on the page that took it, and on every
    page its reviewer opens until it is taken): the run as it waits on its other calls, if any."""
    call = next(c for c in run.tool_calls if c.tool_call_id == held.tool_call_id)
    others = [c for c in run.tool_calls if c.tool_call_id != held.tool_call_id]
    verdict = Verdict.of(DecisionAction(held.action), edited=held.edited_args is not None)
    return DecisionOutcome(
        status=Outcome.HELD,
        action=DecisionAction(held.action),
        agent_id=held.agent_id,
        run_id=run.run_id,
        tool_call_id=call.tool_call_id,
        decided_by=held.username,
        decided_at=held.held_at,
        tool_name=call.tool_name,
        via_agent_id=call.via_agent_id or "",
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        message=f"{verdict.label} by you. It is taken at {_at(held.commit_at)} unless you undo it; "
        "nothing runs until then.",
        run=replace(run, tool_calls=others) if others else None,
        args=call.args,
        edited_args=held.edited_args,
        held_until=held.commit_at,
    )


async def commit_held(now: datetime | None = None) -> int:
    """Take every held decision whose undo window ended (the sweep: ``approvals.tasks``), through
    this door with the request as it was asked, as if decided now: how many were taken or refused.

    A commit that breaks leaves its row marked, and the sweep tries it again once that goes stale
    (the run store decides a call once, so a second try of a decision taken is a lost race at worst).
    """
    taken = 0
    for held in await sync_to_async(holds.holds_due)(now):
        try:
            target = await sync_to_async(_holder)(held)
            await adecide(target, holds.held_request(held), hold=False)
        except PermissionDenied:
            # The reviewer may no longer decide at all: nothing is decided, the call waits again.
            logger.warning(
                "Held decision on %s/%s dropped: %s may not decide now",
                held.run_id,
                held.tool_call_id,
                held.username,
            )
        except Exception:
            logger.exception("Taking the held decision on %s/%s failed", held.run_id, held.tool_call_id)
            continue
        await sync_to_async(holds.hold_forget)(held)
        taken += 1
    return taken


def _holder(held: HeldDecision) -> Access | AgentAccess:
    """The holder's rights as they are now (the door checks them again), with the run's agent."""
    from approvals import agents

    access = Access.of(held.user)
    try:
        return access.for_agent(held.agent_id)
    except (PermissionDenied, agents.UnknownAgent):
        return access


def recorded_outcome(
    run_id: str, tool_call_id: str, *, visible: list[str], notice: str
) -> DecisionOutcome | None:
    """The decision on record that took effect on the call, as a receipt (an undo that came too late
    shows what was taken instead); None when there is none the user may see."""
    entry = (
        AuditEntry.objects.for_call(run_id, tool_call_id)
        .winning()
        .filter(agent_id__in=visible)
        .chronological()
        .last()
    )
    if entry is None:
        return None
    status = Outcome(entry.outcome)
    detail = entry.outcome_detail
    return DecisionOutcome(
        status=status,
        action=DecisionAction(entry.action),
        agent_id=entry.agent_id,
        run_id=run_id,
        tool_call_id=tool_call_id,
        decided_by=entry.username,
        decided_at=entry.created_at,
        tool_name=entry.tool_name,
        via_agent_id=entry.via_agent_id,
        thread_id=entry.thread_id or None,
        resource_id=entry.resource_id or None,
        message=detail,
        # (``completed_detail``'s words before the run's answer.)
        text=detail.removeprefix("Completed: ") if status == Outcome.COMPLETED else None,
        error=detail if status == Outcome.FAILED else None,
        args=entry.args,
        edited_args=entry.edited_args,
        audit_entry_id=entry.pk,
        notice=notice,
    )


def _still_waits(run: AgentRun, result: Any) -> bool:
    """The run was not continued: it waits on the calls the decision left."""
    return [c.tool_call_id for c in result.tool_calls] == [c.tool_call_id for c in run.tool_calls]


def _recorded(who: Access, agent_id: str, attempt: Attempt, request: DecisionRequest) -> DecisionOutcome:
    """What a refused or broken attempt came to, with its audit row (written here for a refusal; the
    store's, settled as failed, for a continuation that broke)."""
    if attempt.call is None and attempt.error is not None and agent_id:
        attempt.call, attempt.run_before = _as_shown(agent_id, request)
    outcome = _outcome(who, agent_id, attempt, request)
    if outcome.status in {Outcome.NOT_FOUND, Outcome.UNCONFIRMED}:
        # Nothing was decided and nothing of the run changed (as a form that fails validation).
        return outcome
    if attempt.crash is not None:
        # The store wrote the row when it took the decision; the continuation broke in this process
        # before the run settled: say so on the record.
        AuditEntry.objects.settle(request.run_id, Outcome.FAILED, clean_text(outcome.message))
        entry_id = attempt.record_id
    else:
        entry_id = recorded_refusal(who, outcome, attempt, request).pk
    # A record the run's events do not announce: pages that show decisions (the run page, the
    # audit log) refetch once it is there; those of the group the call was escalated to too.
    event = {
        "type": "decision-recorded",
        "agent_id": outcome.agent_id,
        "run_id": request.run_id,
        "tool_call_id": outcome.tool_call_id,
        "action": str(request.action),
        "actor": who.username,
        "escalated_to": escalated([attempt.call.escalated_to if attempt.call else None]),
    }
    transaction.on_commit(partial(live.announce, event), robust=True)
    return replace(outcome, audit_entry_id=entry_id)


def _outcome(who: Access, agent_id: str, attempt: Attempt, request: DecisionRequest) -> DecisionOutcome:
    """What the attempt came to, for the page that took it: who decided which call, as shown."""
    call = attempt.call
    base: dict[str, Any] = {
        "action": request.action,
        "agent_id": agent_id,
        "run_id": request.run_id,
        "tool_call_id": call.tool_call_id if call is not None else (request.tool_call_id or ""),
        "decided_by": who.username,
        "decided_at": timezone.now(),
        "tool_name": call.tool_name if call is not None else "",
        "via_agent_id": (call.via_agent_id if call is not None else None) or "",
        "thread_id": attempt.run_before.thread_id if attempt.run_before else None,
        "resource_id": attempt.run_before.resource_id if attempt.run_before else None,
        "args": call.args if call is not None else None,
        "edited_args": attempt.edited_args,
    }
    return outcome_of(attempt, base, visible=list(who.agent_ids))


def _as_shown(agent_id: str, request: DecisionRequest) -> tuple[Any, AgentRun | None]:
    """The call a refused decision was about, as it waits (for the record), if it still does."""
    from approvals import agents

    try:
        run = agents.get(agent_id).get_suspended_run_sync(request.run_id)
    except (RunNotFound, agents.UnknownAgent):
        return None, None
    wanted = request.tool_call_id
    call = next((c for c in run.tool_calls if wanted is None or c.tool_call_id == wanted), None)
    return call, run


def recorded_refusal(
    who: Access, outcome: DecisionOutcome, attempt: Attempt, request: DecisionRequest
) -> AuditEntry:
    """The row of an attempt that changed nothing (a lost race, data or a rule the runtime refused)."""
    call = attempt.call
    action = request.action
    refused_rule = attempt.error.rule if isinstance(attempt.error, DecisionRefused) else ""
    detail = f"{outcome.message} ({refused_rule})" if refused_rule else outcome.message
    return AuditEntry.objects.create(
        created_at=outcome.decided_at,
        user=who.user if getattr(who.user, "pk", None) else None,
        username=who.username,
        agent_id=outcome.agent_id,
        run_id=request.run_id,
        thread_id=outcome.thread_id or "",
        resource_id=outcome.resource_id or "",
        tool_call_id=outcome.tool_call_id,
        tool_name=outcome.tool_name,
        via_agent_id=outcome.via_agent_id,
        args=call.args if call else None,
        suspend_payload=call.suspend_payload if call else None,
        action=action,
        # (Bounded: a reason refused for its length is not kept whole, however often it is sent.)
        reason=clean_text(request.reason or "")[:MAX_REASON_LENGTH],
        # Refused data is kept as sent, in the normal form a database can hold (NaN, NUL...).
        resume_data=clean_json(request.resume_data) if action == DecisionAction.RESUME else None,
        edited_args=clean_json(attempt.edited_args) if action == DecisionAction.APPROVE else None,
        outcome=outcome.status,
        outcome_detail=clean_text(detail),
        channel=CHANNELS.get(request.origin, current_channel()),
        batch_id=DECIDING_BATCH.get(),
        shown_at=request.shown_at,
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
    no agent of the user's has waiting (the card then says it is gone), nor for a call that is not
    theirs to decide (seen only for escalations: one not escalated to them).
    """
    if not isinstance(access, AgentAccess):
        return None
    who = access.access
    who.require(DECIDE_PERMISSION, to="decide on suspended runs")
    try:
        run = access.agent.get_suspended_run_sync(run_id)
    except RunNotFound:
        return None
    call = next((c for c in run.tool_calls if c.tool_call_id == tool_call_id), None)
    if call is None or not access.decides(call):
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
        via_agent_id=call.via_agent_id or "",
        args=call.args,
        suspend_payload=call.suspend_payload,
        action=action,
        outcome=Outcome.INVALID,
        outcome_detail=clean_text(f"Not sent (the form refused it): {errors}"),
    )


# -- the receipt: what a decision did, as the page that took it shows it ---------------------------


@dataclass(frozen=True)
class DecisionOutcome:
    """What a decision did, for the page that took it."""

    status: Outcome
    action: DecisionAction
    agent_id: str
    run_id: str
    tool_call_id: str
    #: Who took this decision (the user) and when.
    decided_by: str
    decided_at: datetime
    tool_name: str = ""
    #: A supervisor's mirror: the sub-agent whose call it is (its tool reads the call; "": the agent's own).
    via_agent_id: str = ""
    thread_id: str | None = None
    resource_id: str | None = None
    #: One sentence for the reviewer (also the audit row's detail).
    message: str = ""
    #: The run's final answer (``completed``).
    text: str | None = None
    #: The error (``failed``).
    error: str | None = None
    #: The run as it waits now (``suspended_again``): render it as a card.
    run: AgentRun | None = None
    #: ``lost_race``: who won, and when, when known.
    winner: str | None = None
    winner_at: datetime | None = None
    #: ``invalid``: ``[{"loc": (...), "msg": ...}]`` from the runtime.
    field_errors: list[dict[str, Any]] = field(default_factory=list)
    #: ``invalid``: what the runtime refused were the edited arguments (``field_errors`` are about
    #: them, ``loc`` relative to the argument object), not the decision itself.
    refused_args: bool = False
    #: The call's arguments as the card showed them (the model's).
    args: Any = None
    #: Approved with edited arguments: what the tool runs with instead of ``args`` (None: as shown).
    edited_args: dict[str, Any] | None = None
    audit_entry_id: int | None = None
    #: ``vote_recorded``: the approvals so far ("1 of 2 approvals").
    approvals: ApprovalTally | None = None
    #: ``held``: when the held decision is taken unless undone.
    held_until: datetime | None = None
    #: A word on the receipt besides the outcome ("Too late to undo: ...").
    notice: str = ""
    #: "Approve and allow": the standing grant made with the approval, in words.
    grant_note: str = ""
    #: The rule that refused the decision (``DecisionRefused.rule``: "claimed", "risky_unconfirmed",
    #: "separation_of_duties", ...; "rerun_unconfirmed"; "run_unreadable"), or "".
    refusal: str = ""

    @property
    def verb(self) -> str:
        return DecisionAction(self.action).verb

    @property
    def verdict(self) -> Verdict | None:
        """What was decided (None: this decision was not taken: lost a race, refused, unconfirmed, or
        the call was not waiting, which says nothing of why it stopped: no deadline's "Expired")."""
        if self.status == Outcome.HELD:
            # Decided, not yet taken: what the reviewer chose, undoable.
            return Verdict.of(DecisionAction(self.action), edited=self.edited_args is not None)
        if self.status not in EFFECTIVE_OUTCOMES and self.status != Outcome.INTERRUPTED:
            return None
        if self.status == Outcome.VOTE_RECORDED:
            return None  # one approval of several: nothing is decided yet
        return Verdict.of(DecisionAction(self.action), edited=self.edited)

    @property
    def status_label(self) -> str:
        return "Unreadable" if self.refusal == RunUnreadable.rule else Outcome(self.status).status_label

    @property
    def undo_seconds_left(self) -> int:
        """``held``: whole seconds left to undo it (0: it is being taken)."""
        if self.held_until is None:
            return 0
        return max(0, int((self.held_until - timezone.now()).total_seconds() + 0.999))

    @property
    def took_effect(self) -> bool:
        return self.status in EFFECTIVE_OUTCOMES

    @property
    def edited(self) -> bool:
        """Approved (and taken) with the reviewer's arguments instead of the model's."""
        return self.edited_args is not None and self.took_effect


@dataclass
class Attempt:
    """What happened in the runtime (filled in by the async part, turned into an outcome after)."""

    call: AgentRunToolCall | None = None
    run_before: AgentRun | None = None
    result: RunResult | None = None
    run_after: AgentRun | None = None
    error: Exception | None = None
    crash: str | None = None
    #: The edited arguments sent to the runtime (None: a plain approval, or the same as shown).
    edited_args: dict[str, Any] | None = None
    #: The audit row the run store wrote with the decision it took.
    record_id: int | None = None


def _at(when: datetime | None) -> str:
    if when is None:
        return ""
    return timezone.localtime(when).strftime("%Y-%m-%d %H:%M:%S %Z")


def outcome_of(attempt: Attempt, base: dict[str, Any], *, visible: list[str]) -> DecisionOutcome:
    """What the attempt came to, for the page that took it (``base``: who, which call, as shown)."""
    if attempt.error is not None:
        return _refused(attempt.error, base, visible)
    if attempt.crash is not None:
        return DecisionOutcome(
            status=Outcome.FAILED, message=f"Failed: {attempt.crash}", error=attempt.crash, **base
        )
    return _went_on(attempt, base)


#: Nothing was decided because of what the decider sent or may do: the outcome of each refusal.
_NOT_TAKEN: tuple[tuple[type[Exception], Outcome, str], ...] = (
    # A confirmation to ask for (a colleague's claim, "I checked this"): nothing was decided.
    (CallClaimed, Outcome.UNCONFIRMED, ""),
    (RiskyNotConfirmed, Outcome.UNCONFIRMED, ""),
    # Separation of duties, a second vote by the same reviewer, a stale card: nothing recorded.
    (DecisionRefused, Outcome.REFUSED, ""),
    (
        RerunNotConfirmed,
        Outcome.UNCONFIRMED,
        "Interrupted after the tool started — it may have run. Nothing was decided: tick “Run it again” "
        "to confirm.",
    ),
    (InvalidResumeData, Outcome.INVALID, ""),
)


def _refused(error: Exception, base: dict[str, Any], visible: list[str]) -> DecisionOutcome:
    if isinstance(error, NotADecider):
        # Not theirs to decide (an escalation-only reviewer's other calls): as unknown as a call that
        # never existed.
        hidden = {**base, "tool_name": "", "thread_id": None, "resource_id": None, "args": None}
        return DecisionOutcome(status=Outcome.NOT_FOUND, message=NOT_WAITING, **hidden)
    if isinstance(error, RunAlreadyDecided | RunNotFound | ToolCallNotSuspended):
        return _stale(error, base, visible)
    for kind, status, message in _NOT_TAKEN:
        if isinstance(error, kind):
            return DecisionOutcome(
                status=status,
                message=message or str(error),
                refusal=getattr(error, "rule", "") or ("rerun_unconfirmed" if message else ""),
                field_errors=list(getattr(error, "errors", [])),
                refused_args=isinstance(error, InvalidToolArgs),
                **base,
            )
    raise error


NOT_WAITING = "This run is not waiting for a decision any more (it ended, or it does not exist)."
#: The refusal of a decision on a run whose stored rows do not read (its code: ``RunUnreadable.rule``).
UNREADABLE = (
    "This run's stored record can no longer be read, so it cannot be decided or continued: nothing was "
    "changed. The server's log says what is wrong with it; an administrator can repair or remove it."
)


def _stale(error: Exception, base: dict[str, Any], visible: list[str]) -> DecisionOutcome:
    """The card was stale: if someone decided this call, say who; otherwise nothing happened."""
    if isinstance(error, CallHeld):
        return _held_by_someone(base, error.held_by)
    if isinstance(error, RunUnreadable):
        return DecisionOutcome(
            status=Outcome.NOT_FOUND, message=UNREADABLE, refusal=RunUnreadable.rule, **base
        )
    # Who decided a call is told only about agents the user may see: to anyone else, a call of a
    # foreign run is as unknown as one that never existed.
    decisions = (
        AuditEntry.objects.for_call(base["run_id"], base["tool_call_id"])
        .winning()
        .filter(agent_id__in=visible)
    )
    if isinstance(error, RunAlreadyDecided) and error.decided_by is not None:
        return lost_race(base, error.decided_by, error.decided_at)
    previous = decisions.chronological().first()
    if previous is not None:
        base = {
            **base,
            "agent_id": base["agent_id"] or previous.agent_id,
            "tool_name": base["tool_name"] or previous.tool_name,
            "thread_id": base["thread_id"] or previous.thread_id or None,
            "resource_id": base["resource_id"] or previous.resource_id or None,
        }
        return lost_race(base, previous.username, previous.created_at)
    if isinstance(error, RunAlreadyDecided):
        return lost_race(base, None, None)
    if not base["agent_id"]:
        logger.info(
            "%s posted a decision on %s/%s: no run of an agent they may see has it",
            base["decided_by"],
            base["run_id"],
            base["tool_call_id"],
        )
    message = str(error) if isinstance(error, ToolCallNotSuspended) else NOT_WAITING
    return DecisionOutcome(status=Outcome.NOT_FOUND, message=message, **base)


def _went_on(attempt: Attempt, base: dict[str, Any]) -> DecisionOutcome:
    """A decision the runtime took, and how far the run went on with it."""
    result = attempt.result
    assert result is not None
    if result.status == "success":
        return DecisionOutcome(
            status=Outcome.COMPLETED, message=completed_detail(result.text), text=result.text, **base
        )
    if result.status == "running":
        return DecisionOutcome(
            status=Outcome.CONTINUING,
            message="Recorded; the run continues in the background. Its page shows how it ends.",
            **base,
        )
    if result.status == "failed":
        return DecisionOutcome(
            status=Outcome.FAILED, message=failed_detail(result.error), error=result.error, **base
        )
    if result.approvals is not None:
        tally = result.approvals
        return DecisionOutcome(
            status=Outcome.VOTE_RECORDED,
            message=f"Your approval is recorded: {tally}. The call runs once "
            f"{tally.required - len(tally.approved_by)} more reviewer(s) approve it.",
            run=attempt.run_after,
            approvals=tally,
            **base,
        )
    waiting = attempt.run_after.tool_calls if attempt.run_after else result.tool_calls
    sent_back = _sent_back(waiting, base["tool_call_id"])
    if sent_back is not None:
        return DecisionOutcome(status=sent_back[0], message=sent_back[1], run=attempt.run_after, **base)
    before = {c.tool_call_id for c in attempt.run_before.tool_calls} if attempt.run_before else set()
    if waiting and all(c.tool_call_id in before for c in waiting):
        message = waiting_detail(c.tool_name for c in waiting)
    else:
        message = suspended_again_detail(c.tool_name for c in waiting)
    return DecisionOutcome(status=Outcome.SUSPENDED_AGAIN, message=message, run=attempt.run_after, **base)


def _sent_back(waiting: Iterable[Any], tool_call_id: str) -> tuple[Outcome, str] | None:
    """The outcome of an approval its recheck sent back before the tool ran (``tool(recheck=True)``):
    the decided call waits again; None when it does not."""
    call = next((c for c in waiting if c.tool_call_id == tool_call_id), None)
    recheck = call.context.recheck if call is not None and call.context is not None else None
    if recheck is None:
        return None
    error = recheck.get("error")
    failed = isinstance(error, str) and bool(error)
    return (
        Outcome.RECHECK_FAILED if failed else Outcome.RECHECK_CHANGED,
        recheck_detail(error if failed else None),
    )


def same_json(left: Any, right: Any) -> bool:
    """Equal as JSON: ``1``, ``1.0`` and ``true`` differ (Python's ``==`` says they are equal)."""
    return json.dumps(left, sort_keys=True, default=str) == json.dumps(right, sort_keys=True, default=str)


def _held_by_someone(base: dict[str, Any], holder: str) -> DecisionOutcome:
    """A lost race to a decision held for its undo window (the call is taken until it ends)."""
    if holder == base["decided_by"]:
        message = "You decided this call a moment ago and can still undo it: nothing more was decided."
    else:
        message = (
            f"{holder} decided this call a moment ago and may still undo it: nothing was decided by "
            "you. Look again in a few seconds."
        )
    return DecisionOutcome(status=Outcome.LOST_RACE, message=message, winner=holder, **base)


def lost_race(base: dict[str, Any], winner: str | None, winner_at: datetime | None) -> DecisionOutcome:
    who = f" by {winner}" if winner else ""
    when = f" at {_at(winner_at)}" if winner_at else ""
    return DecisionOutcome(
        status=Outcome.LOST_RACE,
        message=f"This call was already decided{who}{when}. Nothing ran twice.",
        winner=winner,
        winner_at=winner_at,
        **base,
    )
