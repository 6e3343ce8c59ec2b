"""Deadlines at work: stamped on calls when they park, expired or escalated when due, extended.

An expiry is a decision like a reviewer's, made by a rule inside the store's atomic ``decide``
step: the rule checks the call is still undecided and due *there*, so exactly one of the reviewer
and the expiry wins, and the tool runs at most once. An escalation and an extension change the
call's deadline in the store's atomic ``change_deadline`` step (the run's version moves, so a
decision planned on the old state is re-planned).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Literal

from . import _loop
from ._context import AgentContext
from ._decisions import decision_rule, pick_call, settle
from .errors import (
    AgentsRuntimeError,
    RiskyNotConfirmed,
    RunAlreadyDecided,
    RunNotFound,
    ToolCallNotSuspended,
)
from .policy import DecisionRequest, Origin
from .store import (
    CallKind,
    Deadline,
    DeadlineChange,
    Decision,
    DecisionAction,
    ParkedCall,
    StoredRun,
    Vote,
    expiry_reason,
)
from .stream import RunStream

logger = logging.getLogger("agents_runtime")

#: Runs read per listing while expiring (a page of the due ones; the sweep reads until none is left).
SWEEP_PAGE = 200


class NotDue(AgentsRuntimeError):
    """The call is not (or no longer) due: a reviewer extended its deadline, or it never had one."""


class _Escalate(Exception):
    """Raised by the expiry's decision rule: this call escalates instead (nothing is decided)."""

    def __init__(self, deadline: Deadline) -> None:
        super().__init__("escalate")
        self.deadline = deadline


def _due(run: StoredRun, tool_call_id: str, at: datetime) -> ParkedCall:
    call = pick_call(run, tool_call_id)
    if call.decision is None and (call.expires_at is None or call.expires_at > at):
        raise NotDue(f"Tool call {tool_call_id!r} is not due")
    return call


async def expire_call(
    ctx: AgentContext, run_id: str, tool_call_id: str, at: datetime
) -> RunStream | Literal["escalated"] | None:
    """Expire (or escalate) one due call: the expired run's continuation to consume (or
    ``"escalated"``); None when nothing changed."""

    def rule(run: StoredRun) -> tuple[str, Decision | Vote]:
        # Read in the store's atomic step only (no read before it: the sweep's cost per call).
        due = _due(run, tool_call_id, at)
        deadline = due.deadline
        if deadline is None or due.expires_at is None:
            raise NotDue(f"Tool call {tool_call_id!r} has no deadline")
        if deadline.on_expiry == "escalate" and due.escalated_to is None:
            raise _Escalate(deadline)
        # A tool that may have run already (interrupted after it started) runs again only on a
        # person's confirmation: nobody answering declines it whatever the tool says.
        approve = (
            deadline.on_expiry == "approve" and due.kind == CallKind.APPROVAL and due.tool_started_at is None
        )
        request = DecisionRequest(
            run.run_id,
            due.tool_call_id,
            DecisionAction.EXPIRE,
            origin=Origin.DEADLINE,
            reason=expiry_reason(due.expires_at - run.suspended_at),
            resume_data={"approved": approve},
        )
        try:
            return decision_rule(ctx, request)(run)
        except RiskyNotConfirmed as refused:
            # The rules never let nobody answering approve a risky call: it is declined instead.
            declined = replace(
                request, reason=f"{request.reason} ({refused})", resume_data={"approved": False}
            )
            return decision_rule(ctx, declined)(run)

    try:
        try:
            stream = (await _loop.proceed(ctx, await settle(ctx, run_id, rule, None))).stream
        except _Escalate as escalation:
            await _escalate(ctx, run_id, tool_call_id, escalation.deadline, at)
            return "escalated"
    except (NotDue, RunAlreadyDecided, RunNotFound, ToolCallNotSuspended):
        return None  # a reviewer (or another sweeper) got there first, or the deadline moved
    return stream


async def _escalate(
    ctx: AgentContext, run_id: str, tool_call_id: str, deadline: Deadline, at: datetime
) -> None:
    def rule(run: StoredRun) -> DeadlineChange:
        due = _due(run, tool_call_id, at)
        if due.escalated_to is not None:
            raise NotDue(f"Tool call {tool_call_id!r} was escalated already")
        later = deadline.escalation_expires_after
        changed = ctx.clock()
        return DeadlineChange(
            tool_call_id=due.tool_call_id,
            action=DecisionAction.ESCALATE,
            expires_at=None if later is None else changed + later,
            changed_at=changed,
            escalated_to=deadline.escalate_to,
            reason=f"No reviewer answered in time; escalated to {deadline.escalate_to}",
        )

    await ctx.call(ctx.store.change_deadline, agent_id=ctx.agent_id, run_id=run_id, rule=rule)
    await ctx.notify("call-escalated", run_id, tool_call_id=tool_call_id)


async def expire_overdue(ctx: AgentContext, at: datetime) -> int:
    """Expire or escalate every call of ``agent``'s runs due at ``at``; how many changed."""
    done = 0
    seen: set[tuple[str, str]] = set()
    while True:
        page = await ctx.call(ctx.store.due_calls, ctx.agent_id, at, limit=SWEEP_PAGE)
        due = [key for key in page if key not in seen]
        if not due:
            return done
        # Every due call of the page is decided first, then the runs go on: a continuation (the
        # model, the tool) never makes the next expiry late.
        continuing: list[RunStream] = []
        for run_id, tool_call_id in due:
            seen.add((run_id, tool_call_id))
            try:
                outcome = await expire_call(ctx, run_id, tool_call_id, at)
            except Exception:
                # One broken run must not stop the others from expiring on time.
                logger.exception(
                    "Run %s of agent %r: expiring call %s failed", run_id, ctx.agent_id, tool_call_id
                )
                continue
            done += outcome is not None
            if isinstance(outcome, RunStream):
                continuing.append(outcome)
        for stream in continuing:
            try:
                await stream.result()
            except Exception:
                logger.exception(
                    "Run %s of agent %r: continuing after its expiry failed", stream.run_id, ctx.agent_id
                )


async def extend(
    ctx: AgentContext,
    run_id: str,
    tool_call_id: str,
    *,
    until: datetime | None,
    by: timedelta | None,
    reason: str,
    actor: str | None,
) -> datetime:
    """Move a waiting call's deadline later; the new deadline."""
    if (until is None) == (by is None):
        raise ValueError("Give the new deadline as until= (a datetime) or by= (a timedelta), not both")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("Extending a deadline needs a reason")
    if by is not None and (not isinstance(by, timedelta) or by <= timedelta(0)):
        raise ValueError("by must be a positive timedelta")
    if until is not None and (not isinstance(until, datetime) or until.tzinfo is None):
        raise ValueError("until must be an aware datetime")
    new: list[datetime] = []

    def rule(run: StoredRun) -> DeadlineChange:
        call = pick_call(run, tool_call_id)
        if call.expires_at is None:
            raise ValueError(f"Tool call {tool_call_id!r} has no deadline to extend")
        expires_at = until if until is not None else call.expires_at + (by or timedelta(0))
        if expires_at <= call.expires_at:
            raise ValueError("The new deadline must be later than the current one")
        new.append(expires_at)
        return DeadlineChange(
            tool_call_id=call.tool_call_id,
            action=DecisionAction.EXTEND,
            expires_at=expires_at,
            changed_at=ctx.clock(),
            escalated_to=call.escalated_to,
            actor=actor,
            reason=reason.strip(),
        )

    await ctx.call(ctx.store.change_deadline, agent_id=ctx.agent_id, run_id=run_id, rule=rule)
    await ctx.notify("deadline-extended", run_id, tool_call_id=tool_call_id, actor=actor)
    return new[-1]
