"""Held decisions (the undo window): the rows the one door (``services.decisions``) holds, undoes
and takes.

A decision taken in the browser (origin ``dashboard``) with ``DECISION_UNDO_SECONDS`` > 0 is checked
against every rule at once (``Agent.check_decision``) and, if it would be taken, held: a
``HeldDecision`` row, nothing else. Its reviewer may undo it until ``commit_at`` (the end of the
window, or the call's deadline if sooner); the sweep (``approvals.tasks``) then takes it through
the door, as if decided then.

The choice on races: a held call is taken. While the row exists ``DeskPolicy`` refuses every other
decision on the call (another reviewer's, the API's, the holder's own second one) as a lost race
(``CallHeld``), and the deadline's default waits for it. Undo and the commit race on the row: the
commit first marks it (``committing_since``) by a conditional update, undo deletes it only while it
is unmarked, so exactly one of them wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from agents_runtime import (
    AgentRun,
    Confirmation,
    DecisionRequest,
    Origin,
    RunAlreadyDecided,
    RunNotFound,
    escalated,
)
from agents_runtime.store import DecisionAction, Outcome, Verdict
from approvals import live
from approvals.models import AuditEntry, HeldDecision, ParkedCallRecord
from approvals.policy import DECIDE_PERMISSION, AgentAccess

#: A commit that started this long ago and left its row (its process died mid-way) is tried again:
#: the run store takes the decision at most once whatever happens.
STALE_COMMIT = timedelta(seconds=60)

UNDONE_DETAIL = "Undone within its undo window: nothing was decided, nothing ran."


def hold_create(
    access: AgentAccess, request: DecisionRequest, run: AgentRun, *, window: timedelta
) -> HeldDecision | None:
    """Hold ``request`` (the rules let it through just now) on the call of ``run`` it names for
    ``window``; None when another decision is held on the call already, ``RunAlreadyDecided`` when
    another door decided it since the rules were checked (the caller reports the lost race)."""
    call = next(c for c in run.tool_calls if c.tool_call_id == request.tool_call_id)
    now = timezone.now()
    commit_at = now + window
    if call.expires_at is not None:
        # A deadline that comes first is met by this decision, taken then (the sweep takes held
        # decisions before it expires calls).
        commit_at = min(commit_at, call.expires_at)
    who = access.access
    try:
        with transaction.atomic():
            held = HeldDecision.objects.create(
                agent_id=access.agent.id,
                run_id=run.run_id,
                tool_call_id=call.tool_call_id,
                user=who.user,
                username=who.username,
                action=request.action,
                reason=request.reason or "",
                resume_data=request.resume_data,
                edited_args=request.edited_args,
                seen=request.seen or "",
                confirmations=sorted(str(c) for c in request.confirmations),
                shown_at=request.shown_at,
                held_at=now,
                commit_at=commit_at,
            )
            _still_waiting(run.run_id, call.tool_call_id)
            _announce("call-held", held, call.escalated_to)
    except IntegrityError:
        return None
    return held


def _still_waiting(run_id: str, tool_call_id: str) -> None:
    """``RunAlreadyDecided`` (the hold taken back) if the call no longer waits: a door that decided it
    between the rules' check and the hold's row (any door after the row sees the hold, and waits)."""
    call = ParkedCallRecord.objects.filter(run__run_id=run_id, tool_call_id=tool_call_id)
    decided = call.values("action", "actor", "decided_at").first()
    if decided is None or decided["action"] is not None:
        by, at = (decided["actor"], decided["decided_at"]) if decided is not None else (None, None)
        raise RunAlreadyDecided(run_id=run_id, tool_call_id=tool_call_id, decided_by=by, decided_at=at)


def held_on(run_id: str, tool_call_id: str) -> HeldDecision | None:
    return HeldDecision.objects.filter(run_id=run_id, tool_call_id=tool_call_id).first()


def held_request(held: HeldDecision) -> DecisionRequest:
    """The decision as it was asked, to take now (``origin`` dashboard: the door it came through;
    the door stamps the holder's rights as they are now)."""
    return DecisionRequest(
        held.run_id,
        held.tool_call_id,
        DecisionAction(held.action),
        actor=held.username,
        origin=Origin.DASHBOARD,
        reason=held.reason or None,
        resume_data=held.resume_data,
        edited_args=held.edited_args,
        seen=held.seen or None,
        confirmations=frozenset(Confirmation(c) for c in held.confirmations),
        shown_at=held.shown_at,
    )


def holds_due(now: datetime | None = None) -> list[HeldDecision]:
    """The held decisions whose window ended, each marked as being taken by this caller (a row
    another sweeper marked is left to it, unless its commit went stale)."""
    now = now or timezone.now()
    mine = []
    for held in HeldDecision.objects.due(now).select_related("user")[:100]:
        free = Q(committing_since__isnull=True) | Q(committing_since__lt=now - STALE_COMMIT)
        if HeldDecision.objects.filter(free, pk=held.pk).update(committing_since=now) == 1:
            mine.append(held)
    return mine


def hold_forget(held: HeldDecision) -> None:
    """The held decision was taken (or refused, on record): the call is no longer held."""
    HeldDecision.objects.filter(pk=held.pk).delete()


@dataclass(frozen=True)
class Undo:
    undone: bool
    message: str
    audit_entry_id: int | None = None


def hold_undo(access: AgentAccess, *, run_id: str, tool_call_id: str) -> Undo:
    """Undo the user's decision held on this call, if its window is still open: nothing was decided,
    and the audit log records it as undone."""
    who = access.access
    who.require(DECIDE_PERMISSION, to="undo decisions")
    held = HeldDecision.objects.filter(run_id=run_id, tool_call_id=tool_call_id, user=who.user).first()
    if held is not None and held.agent_id != access.agent.id:
        # (Posted for another agent: its run would be read through the wrong one.)
        return Undo(False, "Nothing was undone: no decision of yours is held on this agent's call.")
    if held is None or held.committing_since is not None:
        return Undo(False, _too_late(run_id, tool_call_id, who.username))
    try:
        run = access.agent.get_suspended_run_sync(run_id)
    except RunNotFound:
        run = None
    call = next((c for c in run.tool_calls if c.tool_call_id == tool_call_id), None) if run else None
    with transaction.atomic():
        # Only while no sweep has started taking it (the commit marks the row first).
        if HeldDecision.objects.filter(pk=held.pk, committing_since__isnull=True).delete()[0] != 1:
            return Undo(False, _too_late(run_id, tool_call_id, who.username))
        entry = AuditEntry.objects.create(
            created_at=timezone.now(),
            user=who.user,
            username=who.username,
            agent_id=held.agent_id,
            run_id=run_id,
            thread_id=(run.thread_id if run else "") or "",
            resource_id=(run.resource_id if run else "") or "",
            tool_call_id=tool_call_id,
            tool_name=call.tool_name if call else "",
            via_agent_id=(call.via_agent_id if call else None) or "",
            args=call.args if call else None,
            suspend_payload=call.suspend_payload if call else None,
            action=held.action,
            reason=held.reason,
            resume_data=held.resume_data if held.action == DecisionAction.RESUME else None,
            edited_args=held.edited_args if held.action == DecisionAction.APPROVE else None,
            outcome=Outcome.UNDONE,
            outcome_detail=UNDONE_DETAIL,
            channel="dashboard",
        )
        # (A call that no longer waits is no group's: only its agent's pages show it.)
        _announce("call-undone", held, call.escalated_to if call else None)
    verdict = Verdict.of(DecisionAction(held.action), edited=held.edited_args is not None)
    return Undo(True, f"Undone: not {verdict.label.lower()}. Nothing ran.", entry.pk)


def _too_late(run_id: str, tool_call_id: str, username: str) -> str:
    decided = AuditEntry.objects.for_call(run_id, tool_call_id).winning().chronological().last()
    if decided is not None and decided.username == username:
        return (
            f"Too late to undo: your decision was taken at the end of its undo window "
            f"({timezone.localtime(decided.created_at):%H:%M:%S}). It stands."
        )
    return "Too late to undo: this decision is being taken (its undo window ended). It stands."


def _announce(kind: str, held: HeldDecision, escalated_to: str | None) -> None:
    # Also to the pages of the group the call was escalated to (``live.deliver``): its members may
    # decide it, and a colleague's held decision is theirs to see as the agent's reviewers do.
    event: dict[str, Any] = {
        "type": kind,
        "agent_id": held.agent_id,
        "run_id": held.run_id,
        "tool_call_id": held.tool_call_id,
        "actor": held.username,
        "escalated_to": escalated([escalated_to]),
    }
    transaction.on_commit(partial(live.announce, event), robust=True)
