"""The decide path: every decision (approve, decline, resume, a grant's, a deadline's) checked against
the parked call by the rules (``policy``), recorded atomically and announced (what it leads to, the
run going on, is the run loop's)."""

from __future__ import annotations

from typing import Any

from pydantic_ai import DeferredToolResults, ToolApproved, ToolDenied

from . import _pydantic, policy
from ._context import AgentContext
from .errors import (
    DecisionRefused,
    InvalidResumeData,
    InvalidToolArgs,
    RerunNotConfirmed,
    RunAlreadyDecided,
    RunNotFound,
    ToolCallNotSuspended,
)
from .policy import DecisionRequest, Would
from .store import (
    DEFAULT_DECLINE_REASON,
    CallKind,
    Decision,
    DecisionAction,
    DecisionReceipt,
    DecisionRule,
    ParkedCall,
    StoredRun,
    Vote,
    decision_conflict,
)
from .tools import Tool, _validate, to_jsonable
from .untrusted import check_decision, checked_json, reason_problem


async def decide(ctx: AgentContext, request: DecisionRequest) -> DecisionReceipt:
    """The one door: ``request`` recorded atomically if every rule lets it through, and announced."""
    return await settle(ctx, request.run_id, checked_rule(ctx, request), request.actor)


async def check(ctx: AgentContext, request: DecisionRequest) -> tuple[StoredRun, ParkedCall, Decision | Vote]:
    """What ``decide`` would do with ``request`` on the run as stored now, recording nothing: the run,
    the call and the verdict, or the refusal ``decide`` would meet, raised. The rules run again when
    the decision is taken; this only tells a host that holds a decision (an undo window) before it
    takes it what to say now."""
    run, call, verdict = await ctx.call(trial, ctx, request, checked_rule(ctx, request))
    if isinstance(verdict, Exception):
        raise verdict
    return run, call, verdict


async def would(ctx: AgentContext, request: DecisionRequest) -> Would:
    """What ``decide(request)`` would do now, recording nothing: ``check`` with its answer described
    (a preview, such as a bulk decision's, asks the rules rather than repeat them)."""
    try:
        _, call, verdict = await ctx.call(trial, ctx, request, checked_rule(ctx, request))
    except (RunNotFound, RunAlreadyDecided, ToolCallNotSuspended, InvalidResumeData):
        return Would("not_waiting")
    escalated_to = call.escalated_to
    if isinstance(verdict, DecisionRefused):
        holder = str(getattr(verdict, "holder", ""))
        return Would("refused", verdict.rule, str(verdict), holder=holder, escalated_to=escalated_to)
    if isinstance(verdict, RerunNotConfirmed):
        return Would("refused", "rerun", str(verdict), escalated_to=escalated_to)
    if isinstance(verdict, Vote):
        voters = tuple(v.actor or "" for v in verdict.votes)
        return Would("vote", votes=voters, required=verdict.required, escalated_to=escalated_to)
    return Would("decides", escalated_to=escalated_to)


def trial(
    ctx: AgentContext, request: DecisionRequest, rule: DecisionRule
) -> tuple[StoredRun, ParkedCall, Decision | Vote | DecisionRefused | RerunNotConfirmed]:
    """The store's atomic step on the run as stored, recording nothing: the run, its call and what
    ``rule`` makes of it, a rule's refusal returned rather than raised (a preview describes it); a
    call that no longer waits raises as ``decide`` would. Runs where the store runs its calls: the
    host's rules read what it keeps beside the runs (claims)."""
    run = ctx.store.get_run(request.run_id, with_snapshot=False)
    if run is None or run.agent_id != ctx.agent_id:
        raise RunNotFound(request.run_id)
    call = pick_call(run, request.tool_call_id)
    if call.decision is not None or run.status != "suspended":
        raise decision_conflict(run, call, call.tool_call_id)
    try:
        _, verdict = rule(run)
    except (DecisionRefused, RerunNotConfirmed) as refused:
        return run, call, refused
    return run, call, verdict


def checked_rule(ctx: AgentContext, request: DecisionRequest) -> DecisionRule:
    """``decision_rule`` for a request whose own data (run id, reason, resume data, edits) is first
    checked for size and shape, before any run is read."""
    if not isinstance(request.run_id, str) or not request.run_id:
        raise RunNotFound(str(request.run_id))
    check_decision(
        request.action,
        reason=request.reason,
        resume_data=request.resume_data,
        edited_args=request.edited_args,
    )
    return decision_rule(ctx, request)


def decision_rule(ctx: AgentContext, request: DecisionRequest) -> DecisionRule:
    """What the store's atomic step runs on the run as stored: the call ``request`` names, the rules
    (``agents_runtime.policy``), its data checked; the decision or vote to record, or a refusal."""

    def rule(run: StoredRun) -> tuple[str, Decision | Vote]:
        if run.parent_run_id is not None:
            raise ToolCallNotSuspended(
                f"Run {run.run_id!r} is a sub-agent run; decide it through its supervisor's run "
                f"{run.parent_run_id!r}",
                run_id=run.run_id,
                tool_call_id=request.tool_call_id,
            )
        call = pick_call(run, request.tool_call_id)
        policy.admit(request, run, call, ctx.policy)
        checked, why, stored_resume = validated_decision(
            ctx, call, request.action, request.reason, request.resume_data
        )
        edits = None if request.edited_args is None else validated_edits(ctx, call, request.edited_args)
        if edits is not None and policy.fingerprint(request.edited_args) == policy.fingerprint(call.args):
            edits = None  # nothing was changed: a plain approval, recorded as one
        tool = ctx.find_tool(call.tool_name)
        decision = Decision(
            action=checked,
            decided_at=ctx.clock(),
            actor=request.actor,
            reason=why,
            resume_data=stored_resume,
            edited_args=edits,
            grant_id=request.grant.id if request.grant is not None else None,
            rule_id=request.rule.id if request.rule is not None else None,
            fingerprint=policy.shown(call, tool.version if tool else "")
            if call.kind == CallKind.APPROVAL
            else None,
            shown_at=request.shown_at,
        )
        return call.tool_call_id, policy.verdict(request, run, call, tool, decision)

    return rule


async def settle(ctx: AgentContext, run_id: str, rule: DecisionRule, actor: str | None) -> DecisionReceipt:
    """Record the decision ``rule`` makes (the store's atomic step) and announce it; what it leads to
    is the run loop's (``_loop.proceed``)."""
    receipt: DecisionReceipt = await ctx.call(
        ctx.store.decide, agent_id=ctx.agent_id, run_id=run_id, rule=rule
    )
    call = receipt.call
    if receipt.vote is not None:
        # An approval recorded as one vote of several: the call still waits.
        approval = receipt.vote.approval
        await ctx.notify(
            "call-voted",
            run_id,
            tool_call_id=call.tool_call_id,
            action=approval.action,
            actor=approval.actor,
            edited=approval.edited_args is not None,
        )
        return receipt
    decision = call.decision
    assert decision is not None
    await ctx.notify(
        "call-decided",
        run_id,
        tool_call_id=call.tool_call_id,
        action=decision.action,
        actor=actor,
        edited=decision.edited_args is not None,
    )
    return receipt


def validated_decision(
    ctx: AgentContext, call: ParkedCall, action: DecisionAction, reason: str | None, resume_data: Any
) -> tuple[DecisionAction, str | None, Any]:
    """Check a decision fits the call; nothing is recorded when it does not."""
    if action == DecisionAction.EXPIRE:
        return action, reason, resume_data  # the deadline's own decision, built by its rule
    if call.kind == CallKind.APPROVAL:
        if action != DecisionAction.RESUME:
            return action, reason, None
        # On an approval, resume data is an approve/decline in disguise.
        if (
            isinstance(resume_data, dict)
            and set(resume_data) in ({"approved"}, {"approved", "reason"})
            and isinstance(resume_data["approved"], bool)
            and isinstance(resume_data.get("reason", ""), str)
        ):
            if resume_data["approved"]:
                return DecisionAction.APPROVE, None, None
            why = resume_data.get("reason")
            problem = reason_problem(why) if why is not None else None
            if problem:
                raise InvalidResumeData(
                    f"Invalid reason: {problem}", errors=[{"loc": ("reason",), "msg": problem}]
                )
            return DecisionAction.DECLINE, why, None
        raise InvalidResumeData(
            f"Tool call {call.tool_call_id!r} waits for approval: resume it with "
            '{"approved": true|false} and optionally "reason"',
            errors=[{"loc": (), "msg": 'expected {"approved": bool} or {"approved": bool, "reason": str}'}],
        )
    if action == DecisionAction.APPROVE:
        raise InvalidResumeData(
            f"Tool call {call.tool_call_id!r} called suspend(): answer it with resume_stream, not approve"
        )
    if action in (DecisionAction.DECLINE, DecisionAction.CANCEL):
        return action, reason, None
    spec = ctx.find_tool(call.tool_name)
    if spec is not None:
        validated = spec.validate_resume_data(resume_data)
    else:
        validated = _validate(call.resume_schema, resume_data, "resume data")
    return DecisionAction.RESUME, None, checked_json(validated, to_jsonable, "resume data")


def validated_edits(ctx: AgentContext, call: ParkedCall, edited_args: Any) -> dict[str, Any]:
    """Edited arguments of an approval, checked against the tool's parameters."""
    if call.kind != CallKind.APPROVAL:
        raise InvalidResumeData(
            f"Tool call {call.tool_call_id!r} called suspend(): it has no arguments to edit"
        )
    spec = call_tool(ctx, call)
    if spec is None:
        raise InvalidToolArgs(
            f"Tool {call.tool_name!r} is not known to agent {ctx.agent_id!r}: "
            "its arguments cannot be checked",
            errors=[{"loc": (), "msg": "unknown tool"}],
        )
    return spec.validate_args(edited_args)


def call_tool(ctx: AgentContext, call: ParkedCall) -> Tool | None:
    """The tool a call names, as it applies to this call: a call that brought its own argument schema
    and title (an external agent's request) is checked and shown by them."""
    spec = ctx.find_tool(call.tool_name)
    context = call.context or {}
    return None if spec is None else spec.for_call(context.get("args_schema"), context.get("title"))


def pick_call(run: StoredRun, tool_call_id: str | None) -> ParkedCall:
    if tool_call_id is None:
        waiting = run.undecided
        if len(waiting) != 1:
            raise ToolCallNotSuspended(
                f"Run {run.run_id!r} has {len(waiting)} parked calls; say which with tool_call_id",
                run_id=run.run_id,
                tool_call_id=None,
            )
        return waiting[0]
    call = next((c for c in run.calls if c.tool_call_id == tool_call_id), None) if tool_call_id else None
    if call is None:
        raise ToolCallNotSuspended(
            f"Tool call {tool_call_id!r} is not suspended on run {run.run_id!r}",
            run_id=run.run_id,
            tool_call_id=tool_call_id,
        )
    return call


def add_result(results: DeferredToolResults, call: ParkedCall) -> None:
    decision = call.decision
    assert decision is not None, "continuing a run with an undecided call"
    if decision.action == DecisionAction.APPROVE:
        results.approvals[call.tool_call_id] = ToolApproved(override_args=decision.edited_args)
    elif decision.action in (DecisionAction.DECLINE, DecisionAction.CANCEL) or (
        decision.action == DecisionAction.EXPIRE and decision.resume_data != {"approved": True}
    ):
        results.approvals[call.tool_call_id] = ToolDenied(decision.reason or DEFAULT_DECLINE_REASON)
    elif decision.action == DecisionAction.EXPIRE:
        # on_expiry="approve": the tool runs with the model's arguments.
        results.approvals[call.tool_call_id] = ToolApproved()
    else:
        results.approvals[call.tool_call_id] = ToolApproved()
        results.metadata[call.tool_call_id] = {_pydantic.RESUME_KEY: decision.resume_data}
