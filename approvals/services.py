"""State changes: decisions on parked tool calls and new runs, each with its audit record.

Views, the JSON API and consumers call these; none of them talks to the runtime's write methods
directly. Every function takes the acting user (the identity comes from the login, never from a form),
checks the permission, calls the runtime's public API, waits for the run to go as far as it goes
(completed, suspended again, failed) and records what happened in ``AuditEntry``.

Audit policy: every decision that reached the runtime gets one row. A decision the runtime accepted
is written by the run store in the very step that records it (``approvals.decision_records``), and
settled there when the run goes on; this module writes the rows of attempts that changed nothing:
lost races (``lost_race``: "already decided by X at T") and data the runtime refused (``invalid``).
Answers that fail the form's own validation never reach the runtime and leave no row; neither does a
decision on a run that no longer exists, or that the user may not see (``not_found``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any, Literal

from asgiref.sync import async_to_sync
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from agents_runtime import (
    Agent,
    AgentRun,
    AgentRunToolCall,
    InvalidResumeData,
    InvalidToolArgs,
    RunAlreadyDecided,
    RunNotFound,
    RunResult,
    ToolCallNotSuspended,
)
from agents_runtime.untrusted import clean_json
from approvals import decision_records, live
from approvals.access import REVIEWERS, agent_group_name, can_see_agent, visible_agent_ids
from approvals.models.audit import AuditAction, AuditEntry, AuditOutcome
from approvals.registry import get_runtime

logger = logging.getLogger(__name__)

DECIDE_PERMISSION = "approvals.decide_runs"
AUDIT_PERMISSION = "approvals.view_audit_log"
PERMISSION_LABELS = {
    DECIDE_PERMISSION: "Can approve, decline and answer suspended runs",
    AUDIT_PERMISSION: "Can view the audit log",
}

OutcomeStatus = Literal[
    "completed", "suspended_again", "continuing", "failed", "lost_race", "invalid", "not_found"
]
User = AbstractBaseUser | AnonymousUser


class UnknownAgent(LookupError):
    """No agent with this id is registered in the runtime."""


def groups_granting(permission: str) -> list[str]:
    """The names of the groups that hold ``permission`` ("app_label.codename")."""
    app_label, _, codename = permission.partition(".")
    return list(
        Group.objects.filter(permissions__codename=codename, permissions__content_type__app_label=app_label)
        .order_by("name")
        .values_list("name", flat=True)
    )


def require_permission(user: Any, permission: str, *, to: str) -> None:
    """Raise ``PermissionDenied`` naming the missing permission and the group that grants it."""
    if not user.has_perm(permission):
        label = PERMISSION_LABELS.get(permission, permission)
        groups = groups_granting(permission)
        if groups:
            names = " or ".join(f"“{g}”" for g in groups)
            flag = "--review AGENT" if REVIEWERS in groups else "--admin"
            ask = f"Ask an administrator to add you to the group {names} (manage.py grant USER {flag})."
        else:
            ask = "No group grants it yet: ask an administrator."
        raise PermissionDenied(f"You need the permission “{label}” ({permission}) to {to}. {ask}")


def require_agent_access(user: Any, agent_id: str) -> None:
    """Designated reviewers (groups ``agent:<id>``) see and decide only their agents."""
    if not can_see_agent(user, agent_id):
        raise PermissionDenied(
            f"You are not a reviewer of the agent “{agent_id}”. Ask an administrator to add you to its "
            f"group “{agent_group_name(agent_id)}” (manage.py grant USER --review {agent_id})."
        )


def agent_get(agent_id: str) -> Agent:
    try:
        return get_runtime().get_agent(agent_id)
    except KeyError:
        raise UnknownAgent(agent_id) from None


@dataclass(frozen=True)
class DecisionOutcome:
    """What a decision did, for the page that took it."""

    status: OutcomeStatus
    action: str
    agent_id: str
    run_id: str
    tool_call_id: str
    #: Who took this decision (the user) and when.
    decided_by: str
    decided_at: datetime
    tool_name: str = ""
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

    @property
    def verb(self) -> str:
        return {"approve": "approved", "decline": "declined", "resume": "answered"}.get(
            self.action, self.action
        )

    @property
    def status_label(self) -> str:
        return {
            "completed": "Completed",
            "suspended_again": "Waiting again",
            "continuing": "Continuing",
            "failed": "Failed",
            "lost_race": "Already decided",
            "invalid": "Refused",
            "not_found": "No longer waiting",
        }[self.status]

    @property
    def took_effect(self) -> bool:
        return self.status in {"completed", "suspended_again", "continuing", "failed"}

    @property
    def edited(self) -> bool:
        """Approved (and taken) with the reviewer's arguments instead of the model's."""
        return self.edited_args is not None and self.took_effect


@dataclass
class _Attempt:
    """What happened in the runtime (filled in by the async part, turned into an outcome after)."""

    call: AgentRunToolCall | None = None
    run_before: AgentRun | None = None
    result: RunResult | None = None
    run_after: AgentRun | None = None
    error: Exception | None = None
    crash: str | None = None
    #: The edited arguments sent to the runtime (None: a plain approval, or the same as shown).
    edited_args: dict[str, Any] | None = None


def _at(when: datetime | None) -> str:
    if when is None:
        return ""
    return timezone.localtime(when).strftime("%Y-%m-%d %H:%M:%S %Z")


async def _attempt(
    agent: Agent,
    *,
    action: str,
    run_id: str,
    tool_call_id: str,
    actor: str,
    reason: str | None,
    resume_data: Any,
    edited_args: dict[str, Any] | None = None,
) -> _Attempt:
    attempt = _Attempt(edited_args=edited_args)
    try:
        # What the reviewer decided on, for the record ("args as shown").
        attempt.run_before = await agent.get_suspended_run(run_id)
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
        and _same_json(attempt.edited_args, attempt.call.args)
    ):
        # Nothing was changed: a plain approval (and recorded as one).
        attempt.edited_args = None
    try:
        if action == AuditAction.APPROVE:
            stream = await agent.approve_tool_call(
                run_id=run_id, tool_call_id=tool_call_id, actor=actor, edited_args=attempt.edited_args
            )
        elif action == AuditAction.DECLINE:
            stream = await agent.decline_tool_call(
                run_id=run_id, tool_call_id=tool_call_id, reason=reason or None, actor=actor
            )
        else:
            stream = await agent.resume_stream(
                resume_data, run_id=run_id, tool_call_id=tool_call_id, actor=actor
            )
    except (RunNotFound, ToolCallNotSuspended, RunAlreadyDecided, InvalidResumeData) as exc:
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


def _decide(
    *,
    user: Any,
    agent_id: str,
    run_id: str,
    tool_call_id: str,
    action: AuditAction,
    reason: str = "",
    resume_data: Any = None,
    edited_args: dict[str, Any] | None = None,
) -> DecisionOutcome:
    require_permission(user, DECIDE_PERMISSION, to="decide on suspended runs")
    actor = user.get_username()
    if not agent_id:
        # No agent has this run waiting (the caller looked): report who decided it, if anyone here did.
        attempt = _Attempt(error=RunNotFound(run_id), edited_args=edited_args)
    else:
        agent = agent_get(agent_id)
        require_agent_access(user, agent_id)
        attempt = async_to_sync(_attempt)(
            agent,
            action=action,
            run_id=run_id,
            tool_call_id=tool_call_id,
            actor=actor,
            reason=reason,
            resume_data=resume_data,
            edited_args=edited_args,
        )
    base: dict[str, Any] = {
        "action": str(action),
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
    outcome = _outcome(
        attempt, base, run_id=run_id, tool_call_id=tool_call_id, visible=visible_agent_ids(user)
    )
    if outcome.status == "not_found":
        return outcome
    if outcome.took_effect:
        entry = (
            AuditEntry.objects.for_call(run_id, tool_call_id)
            .winning()
            .filter(username=actor)
            .order_by("-created_at", "-id")
            .first()
        )
        if attempt.crash is not None:
            # The continuation broke in this process before the run settled: say so on the record.
            detail = decision_records.storable_text(outcome.message)
            AuditEntry.objects.settle(run_id, AuditOutcome.FAILED, detail)
    else:
        entry = _refused_attempt_row(user, actor, outcome, attempt, action, reason, resume_data)
    # Pages that show decisions (the run page) refetch once the record is there.
    event = {
        "type": "decision-recorded",
        "agent_id": outcome.agent_id,
        "run_id": run_id,
        "tool_call_id": tool_call_id,
        "action": str(action),
        "actor": actor,
    }
    transaction.on_commit(partial(live.announce, event), robust=True)
    return replace(outcome, audit_entry_id=entry.pk if entry is not None else None)


def _refused_attempt_row(
    user: Any,
    actor: str,
    outcome: DecisionOutcome,
    attempt: _Attempt,
    action: AuditAction,
    reason: str,
    resume_data: Any,
) -> AuditEntry:
    """The row of an attempt that changed nothing (a lost race, or data the runtime refused)."""
    run_id, tool_call_id = outcome.run_id, outcome.tool_call_id
    text = decision_records.storable_text
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
        resume_data=clean_json(resume_data) if action == AuditAction.RESUME else None,
        edited_args=clean_json(attempt.edited_args) if action == AuditAction.APPROVE else None,
        outcome=outcome.status,
        outcome_detail=text(outcome.message),
    )


def _outcome(
    attempt: _Attempt, base: dict[str, Any], *, run_id: str, tool_call_id: str, visible: list[str]
) -> DecisionOutcome:
    error = attempt.error
    # Who decided a call is told only about agents the user may see: to anyone else, a call of a
    # foreign run is as unknown as one that never existed.
    decisions = AuditEntry.objects.for_call(run_id, tool_call_id).winning().filter(agent_id__in=visible)
    if isinstance(error, RunAlreadyDecided):
        winner, winner_at = error.decided_by, error.decided_at
        if winner is None:
            previous = decisions.chronological().first()
            if previous is not None:
                winner, winner_at = previous.username, previous.created_at
        return _lost_race(base, winner, winner_at)
    if isinstance(error, RunNotFound | ToolCallNotSuspended):
        # The card was stale. If someone decided this call, say who; otherwise nothing happened.
        previous = decisions.chronological().first()
        if previous is not None:
            base = {
                **base,
                "agent_id": base["agent_id"] or previous.agent_id,
                "tool_name": base["tool_name"] or previous.tool_name,
                "thread_id": base["thread_id"] or previous.thread_id or None,
                "resource_id": base["resource_id"] or previous.resource_id or None,
            }
            return _lost_race(base, previous.username, previous.created_at)
        if not base["agent_id"]:
            logger.info(
                "%s posted a decision on %s/%s: no run of an agent they may see has it",
                base["decided_by"],
                run_id,
                tool_call_id,
            )
        message = (
            str(error)
            if isinstance(error, ToolCallNotSuspended)
            else "This run is not waiting for a decision any more (it ended, or it does not exist)."
        )
        return DecisionOutcome(status="not_found", message=message, **base)
    if isinstance(error, InvalidToolArgs):
        return DecisionOutcome(
            status="invalid",
            message=str(error),
            field_errors=list(error.errors),
            refused_args=True,
            **base,
        )
    if isinstance(error, InvalidResumeData):
        return DecisionOutcome(status="invalid", message=str(error), field_errors=list(error.errors), **base)
    if attempt.crash is not None:
        return DecisionOutcome(
            status="failed", message=f"Failed: {attempt.crash}", error=attempt.crash, **base
        )
    result = attempt.result
    assert result is not None
    if result.status == "success":
        return DecisionOutcome(
            status="completed", message=f"Completed: {result.text or '(no text)'}", text=result.text, **base
        )
    if result.status == "running":
        return DecisionOutcome(
            status="continuing",
            message="Recorded; the run continues in the background. Its page shows how it ends.",
            **base,
        )
    if result.status == "failed":
        return DecisionOutcome(
            status="failed", message=f"Failed: {result.error or 'unknown error'}", error=result.error, **base
        )
    waiting = attempt.run_after.tool_calls if attempt.run_after else result.tool_calls
    before = {c.tool_call_id for c in attempt.run_before.tool_calls} if attempt.run_before else set()
    names = ", ".join(c.tool_name for c in waiting) or "nothing"
    if waiting and all(c.tool_call_id in before for c in waiting):
        message = f"Recorded; the run still waits on {len(waiting)} other call(s): {names}."
    else:
        message = f"The run continued and suspended again, waiting on: {names}."
    return DecisionOutcome(status="suspended_again", message=message, run=attempt.run_after, **base)


def _same_json(left: Any, right: Any) -> bool:
    """Equal as JSON: ``1``, ``1.0`` and ``true`` differ (Python's ``==`` says they are equal)."""
    return json.dumps(left, sort_keys=True, default=str) == json.dumps(right, sort_keys=True, default=str)


def _lost_race(base: dict[str, Any], winner: str | None, winner_at: datetime | None) -> DecisionOutcome:
    who = f" by {winner}" if winner else ""
    when = f" at {_at(winner_at)}" if winner_at else ""
    return DecisionOutcome(
        status="lost_race",
        message=f"This call was already decided{who}{when}. Nothing ran twice.",
        winner=winner,
        winner_at=winner_at,
        **base,
    )


def decision_approve(
    *,
    user: Any,
    agent_id: str,
    run_id: str,
    tool_call_id: str,
    edited_args: dict[str, Any] | None = None,
) -> DecisionOutcome:
    """Approve one parked call: the tool runs (once) when the run continues.

    With ``edited_args`` the tool runs with these arguments (the whole object) instead of the
    model's; the runtime checks them against the tool's parameters first, and refuses them
    (``invalid``, ``refused_args``, field errors) without deciding anything. Arguments equal to the
    model's are a plain approval.
    """
    return _decide(
        user=user,
        agent_id=agent_id,
        run_id=run_id,
        tool_call_id=tool_call_id,
        action=AuditAction.APPROVE,
        edited_args=edited_args,
    )


def decision_decline(
    *, user: Any, agent_id: str, run_id: str, tool_call_id: str, reason: str = ""
) -> DecisionOutcome:
    """Decline one parked call; the model receives ``reason`` (or the runtime's default) as the result."""
    return _decide(
        user=user,
        agent_id=agent_id,
        run_id=run_id,
        tool_call_id=tool_call_id,
        action=AuditAction.DECLINE,
        reason=reason.strip(),
    )


def decision_resume(
    *, user: Any, agent_id: str, run_id: str, tool_call_id: str, resume_data: Any
) -> DecisionOutcome:
    """Answer a ``suspend()``-ed call with data already validated against its resume schema."""
    return _decide(
        user=user,
        agent_id=agent_id,
        run_id=run_id,
        tool_call_id=tool_call_id,
        action=AuditAction.RESUME,
        resume_data=resume_data,
    )


def run_start(
    *, user: Any, agent_id: str, prompt: str, thread_id: str | None = None, resource_id: str | None = None
) -> RunResult:
    """Start a run of ``agent_id`` and wait until it completes, fails or suspends."""
    require_permission(user, DECIDE_PERMISSION, to="start runs")
    agent = agent_get(agent_id)
    require_agent_access(user, agent_id)
    logger.info("%s starts a run of %s (thread %s)", user.get_username(), agent_id, thread_id)
    return async_to_sync(agent.generate)(prompt, thread_id=thread_id or None, resource_id=resource_id or None)


__all__ = [
    "AUDIT_PERMISSION",
    "DECIDE_PERMISSION",
    "AuditOutcome",
    "DecisionOutcome",
    "UnknownAgent",
    "agent_get",
    "decision_approve",
    "decision_decline",
    "decision_resume",
    "require_agent_access",
    "require_permission",
    "run_start",
]
