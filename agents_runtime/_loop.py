"""The engine: what an agent's runs do, worked from one frozen ``AgentContext`` that ``Agent`` builds.

Every part takes the context as its first argument and reaches the store, the runtime's listeners
and scheduler, the host's policy, the agent's tools and its sub-agents through it alone: calls run
one way, from the agent through the engine to the store, and the engine never imports ``agent`` (where
``Agent`` and ``Runtime`` live; an import-linter contract). Its parts, in this order:

- **The stream** (``RunStream``, ``Decided``): the chunks of a run as they happen, and its result.
- **Deciding**: every decision (approve, decline, resume, a grant's, a rule's, a deadline's) checked
  against the parked call by the rules (``policy``), recorded atomically and announced.
- **Parking**: the calls pydantic-ai deferred, each as the store keeps it, with why it waits. That is
  gathered once, when the run parks (the conversation is at hand; reading it back for every card of
  an inbox page would cost a snapshot per run), kept small: texts shortened, key result fields only.
- **Grants at park time**: ``check_grants`` runs before a suspension is stored (grants whose
  conditions hold; those that could not be evaluated are written into the call's context);
  ``apply_grants`` runs once it is stored and before anyone is told, so a granted call is never
  announced. Each approval goes through the store's atomic ``decide`` step, which takes the grant's
  use and writes the audit row: a grant revoked or used up meanwhile approves nothing
  (``GrantUnavailable``), and a reviewer who decided the call first simply wins.
- **Routing rules at park time** (``route_calls``, ``apply_routes``), beside grants: a call routed
  to ``two`` has the approvals it needs written into its context; ``allow`` and ``deny`` go through
  ``decide`` as decisions of ``Origin.RULE``. Grants apply only to calls no rule routed elsewhere
  than ``one``.
- **External agents' runs**: a run made from an approval request (``agents_runtime.external``) is
  stored already parked on one call, through the same suspension path as any run; its continuation
  runs nothing: the decision is handed to the agent that asked, and the run ends with what was
  decided (``handed_over``).
- **The run loop**: one pydantic-ai run and what it ended in, and continuing a claimed run. A
  supervisor's delegations run here too: a sub-agent's inner run is started for its delegation
  call, continued with the supervisor's decisions, and discarded when the supervisor stops waiting.
- **Deadlines at work**: stamped on calls when they park, expired or escalated when due, extended.
  An expiry is a decision made by a rule inside the store's atomic ``decide`` step, so exactly one
  of the reviewer and the expiry wins; an escalation or an extension changes the call's deadline in
  the store's atomic ``change_deadline`` step.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final, Literal, Protocol

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import RunContext

from . import _pydantic, policy
from ._pydantic import (
    ClaimLost,
    Emit,
    RunDeps,
    as_utc,
    chunk_for,
    ignore,
    new_run_id,
    run_transcript,
    showing_edits,
    step_finished,
    steps_usage,
    waiting_chunks,
)
from .conditions import InvalidCondition, check_against_schema, compile_condition
from .errors import (
    AgentsRuntimeError,
    ApprovalsNotGiven,
    DecisionRefused,
    InvalidResumeData,
    InvalidToolArgs,
    RerunNotConfirmed,
    RiskyNotConfirmed,
    RunAlreadyDecided,
    RunNotFound,
    RunUnreadable,
    ToolCallNotSuspended,
)
from .events import Continuation, RunEvent, RunEventType
from .grants import (
    Grant,
    GrantNotFound,
    GrantRequest,
    GrantScope,
    GrantStore,
    GrantUnavailable,
    InvalidGrant,
    checked_request,
    condition_verdict,
)
from .policy import DecisionRequest, Origin, Policy, Would
from .previews import Preview, run_preview
from .routing import (
    MAX_REASON_LENGTH,
    MAX_ROUTED_APPROVALS,
    REQUIRED_APPROVALS_KEY,
    ROUTED_BY_KEY,
    RULE_FAILURES_KEY,
    InvalidRule,
    Route,
    Rule,
    RuleNotFound,
    RuleRequest,
    RuleStore,
    first_match,
)
from .store import (
    DEFAULT_DECLINE_REASON,
    AgentRun,
    AgentRunToolCall,
    ApprovalTally,
    CallKind,
    Chunk,
    Deadline,
    DeadlineChange,
    Decision,
    DecisionAction,
    DecisionReceipt,
    DecisionRule,
    Delegation,
    GrantFailure,
    ParkedCall,
    RunEnding,
    RunResult,
    RunStore,
    StoredRun,
    Suspension,
    Vote,
    agent_run,
    call_store,
    decision_conflict,
    expiry_reason,
    listed_call,
    tool_calls,
)
from .tools import Tool, ToolContext, _validate
from .untrusted import (
    check_decision,
    checked_json,
    clean_call,
    clean_json,
    clean_text,
    reason_problem,
    to_jsonable,
)

_END: Final = object()


class RunStream:
    """An async iterator of ``Chunk``s for one run, with ``await stream.result()``.

    The run proceeds whether or not anyone iterates: chunks are buffered, and ``result()`` waits
    for the end. Iterating is single-consumer.
    """

    def __init__(self, run_id: str, producer: Callable[[Emit], Awaitable[RunResult]]) -> None:
        self.run_id = run_id
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._task: asyncio.Task[RunResult] = asyncio.ensure_future(self._produce(producer))

    @classmethod
    def finished(cls, result: RunResult, chunks: list[Chunk] | None = None) -> RunStream:
        """A stream that is already over (a decision that did not continue the run)."""

        async def replay(emit: Emit) -> RunResult:
            for chunk in chunks or ():
                emit(chunk)
            return result

        return cls(result.run_id, replay)

    async def _produce(self, producer: Callable[[Emit], Awaitable[RunResult]]) -> RunResult:
        try:
            return await producer(self._queue.put_nowait)
        finally:
            self._queue.put_nowait(_END)

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> Chunk:
        item = await self._queue.get()
        if item is _END:
            # Let a second iteration end too instead of hanging.
            self._queue.put_nowait(_END)
            raise StopAsyncIteration
        assert isinstance(item, Chunk)
        return item

    async def result(self) -> RunResult:
        """Wait for the run (or continuation) to end or suspend, and return its outcome."""
        return await asyncio.shield(self._task)


@dataclass(frozen=True)
class Decided:
    """What ``Agent.decide`` did: the call it decided, the run as the decision left it (the calls it
    still waits on), the record the store wrote with the decision (its id, when the store keeps
    records), and the run's continuation, to consume like any ``RunStream``."""

    call: AgentRunToolCall
    run: AgentRun
    record_id: int | None
    stream: RunStream


#: Tells the runtime's listeners about a stored change.
Publish = Callable[[RunEvent], Awaitable[None]]
#: Hands a claimed run to the runtime's scheduler; its result when it ran before returning.
Schedule = Callable[[Continuation], Awaitable[RunResult | None]]


class FindTool(Protocol):
    """``Agent.find_tool``: a tool by name, its own or a sub-agent's (``via``: that sub-agent's)."""

    def __call__(self, name: str, via: str | None = None) -> Tool | None: ...


@dataclass(frozen=True)
class AgentContext:
    """One agent as its engine parts see it (its runtime's store, listeners, scheduler and policy)."""

    agent_id: str
    store: RunStore
    #: The agent's own tools by name (a sub-agent's are found with ``find_tool``).
    tools: Mapping[str, Tool]
    #: The tool a call of this agent's runs names: its own, or a sub-agent's (``tool_of``: a call's).
    find_tool: FindTool
    #: The context of a sub-agent (or of another agent of the runtime) by id; ``KeyError`` if none.
    agent: Callable[[str], AgentContext]
    #: The pydantic-ai agent that runs this agent's model and tools (built on first use).
    pydantic_agent: Callable[[], Any]
    memory_last_runs: int | None
    clock: Callable[[], datetime]
    #: None without a runtime: nobody listens.
    publish: Publish | None = None
    #: None: a run whose decisions are all in continues in this process, as the decider's stream.
    schedule: Schedule | None = None
    #: Whether ``schedule`` runs the continuation it is given next at once, in this task (the
    #: scheduler's ``runs_at_once``); None: it never says so.
    runs_at_once: Callable[[], bool] | None = None
    #: The host's rules, checked first inside every decision's atomic step.
    policy: Policy | None = None

    async def call[T](self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, a method of a store, run off the event loop where its store says."""
        return await call_store(getattr(fn, "__self__", self.store), fn, *args, **kwargs)

    async def notify(self, type_: RunEventType, run_id: str, **details: Any) -> None:
        """Tell the runtime's listeners about a stored change of one of this agent's runs."""
        if self.publish is not None:
            await self.publish(RunEvent(type=type_, agent_id=self.agent_id, run_id=run_id, **details))


def escalated(groups: Iterable[str | None]) -> tuple[str, ...]:
    """An event's ``escalated_to``: the groups among its calls' (``None``: a call not escalated).
    Public: a host's own events about a call say it the same way, so they reach the same pages."""
    return tuple(sorted({group for group in groups if group}))


async def decide(ctx: AgentContext, request: DecisionRequest, *, start: bool = False) -> DecisionReceipt:
    """The one door: ``request`` recorded atomically if every rule lets it through, and announced.
    ``start``: a claim it makes takes its lease at once (``starts_at_once``)."""
    return await settle(ctx, request.run_id, checked_rule(ctx, request), request.actor, start=start)


def starts_at_once(ctx: AgentContext) -> bool:
    """Whether a run a decision claims now is continued at once, in this task: as the decider's
    stream (no scheduler), or by a scheduler that says it runs it now. Its claim then takes the lease
    in the decision's own step; a claim for a queue waits without one (``start_continuation``)."""
    return ctx.schedule is None or (ctx.runs_at_once is not None and ctx.runs_at_once())


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
    except RunUnreadable as unreadable:
        return Would("refused", unreadable.rule, str(unreadable))
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
    call that no longer waits raises as ``decide`` would, and so does a run whose snapshot no longer
    reads (``RunUnreadable``: the step reads the snapshot too). Runs where the store runs its calls:
    the host's rules read what it keeps beside the runs (claims)."""
    run = ctx.store.get_run(request.run_id)
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
        tool = tool_of(ctx, call)
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


async def settle(
    ctx: AgentContext, run_id: str, rule: DecisionRule, actor: str | None, *, start: bool = False
) -> DecisionReceipt:
    """Record the decision ``rule`` makes (the store's atomic step) and announce it; what it leads to
    is the run loop's (``proceed``, told the same ``start``)."""
    receipt: DecisionReceipt = await ctx.call(
        ctx.store.decide, agent_id=ctx.agent_id, run_id=run_id, rule=rule, start=start
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
            escalated_to=escalated([call.escalated_to]),
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
        escalated_to=escalated([call.escalated_to]),
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
    spec = tool_of(ctx, call)
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
    spec = tool_of(ctx, call)
    context = call.context or {}
    return None if spec is None else spec.for_call(context.get("args_schema"), context.get("title"))


def tool_of(ctx: AgentContext, call: ParkedCall) -> Tool | None:
    """The tool a parked call names: a supervisor's mirror of a sub-agent's call is that sub-agent's
    tool (its rules decide it), not a namesake the supervisor or another sub-agent has."""
    return ctx.find_tool(call.tool_name, call.delegation.agent_id if call.delegation is not None else None)


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


#: Characters kept of the user's message and of what the agent said.
TEXT_CHARS = 1_000
#: Key results kept (the latest ones).
MAX_KEY_RESULTS = 5


async def parked_calls(
    ctx: AgentContext, requests: DeferredToolRequests, shared: dict[str, Any]
) -> list[ParkedCall]:
    """The calls a run parks on, each with why it waits (``shared``: the conversation's part)."""
    calls: list[ParkedCall] = []
    for part in [*requests.approvals, *requests.calls]:
        metadata = requests.metadata.get(part.tool_call_id) or {}
        kind = metadata.get(_pydantic.KIND_KEY)
        spec = ctx.tools.get(part.tool_name)
        if kind == "delegation":
            calls.extend(await mirror_inner_calls(ctx, part.tool_call_id, metadata["inner_run_id"]))
        elif kind == CallKind.INPUT:
            calls.append(
                ParkedCall(
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    kind=CallKind.INPUT,
                    args=part.args_as_dict(),
                    suspend_payload=metadata.get("payload"),
                    suspend_schema=spec.suspend_json_schema if spec else None,
                    resume_schema=spec.resume_json_schema if spec else None,
                    context=_call_context(shared),
                )
            )
        else:
            calls.append(
                ParkedCall(
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    kind=CallKind.APPROVAL,
                    args=part.args_as_dict(),
                    context=_call_context(
                        shared, approval_reason=str(metadata.get(_pydantic.REASON_KEY) or "")
                    ),
                )
            )
    return [clean_call(call) for call in calls]


async def mirror_inner_calls(ctx: AgentContext, tool_call_id: str, inner_run_id: str) -> list[ParkedCall]:
    """The supervisor's view of a sub-agent's parked calls, under the delegation call's id."""
    inner: StoredRun | None = await ctx.call(ctx.store.get_run, inner_run_id)
    if inner is None:
        raise RuntimeError(f"Inner run {inner_run_id!r} vanished before its supervisor suspended")
    waiting = inner.undecided
    return [
        clean_call(
            replace(
                call,
                tool_call_id=tool_call_id if len(waiting) == 1 else f"{tool_call_id}:{call.tool_call_id}",
                delegation=Delegation(tool_call_id, inner_run_id, call.tool_call_id, call_owner(inner, call)),
                decision=None,
            )
        )
        for call in waiting
    ]


def call_owner(inner: StoredRun, call: ParkedCall) -> str:
    """The agent whose tool a waiting call of ``inner`` is: the sub-agent running ``inner``, or, for
    its mirror of a call of its own sub-agent's, the agent that mirror names (however deep). Not the
    agent in between: its namesake of the tool, with its own rules, would judge the call (``tool_of``)."""
    if call.delegation is not None and call.delegation.agent_id is not None:
        return call.delegation.agent_id
    return inner.agent_id


def with_deadlines(
    ctx: AgentContext, calls: Sequence[ParkedCall], run_deadline: Deadline | None
) -> list[ParkedCall]:
    """The calls a run parks, each with its deadline: the run's own, else its tool's."""
    parked_at = ctx.clock()
    stamped = []
    for call in calls:
        spec = ctx.tools.get(call.tool_name)
        deadline = run_deadline or (spec.deadline if spec is not None else None)
        # A supervisor's mirror keeps the deadline its sub-agent's call got.
        if deadline is not None and call.delegation is None:
            call = replace(call, deadline=deadline, expires_at=deadline.expires_at(parked_at))
        stamped.append(call)
    return stamped


async def with_previews(
    ctx: AgentContext,
    calls: Sequence[ParkedCall],
    run_id: str,
    thread_id: str | None,
    resource_id: str | None,
) -> list[ParkedCall]:
    """The calls a run parks, each approval with its tool's preview (``previews``) in its context.

    Each preview is bounded in time and its failure is recorded as the preview's error: neither keeps
    the run from parking."""
    previewed = []
    for call in calls:
        spec = ctx.tools.get(call.tool_name)
        if call.kind == CallKind.APPROVAL and call.delegation is None and spec is not None and spec.preview:
            tool_ctx = ToolContext(
                run_id=run_id,
                tool_call_id=call.tool_call_id,
                agent_id=ctx.agent_id,
                thread_id=thread_id,
                resource_id=resource_id,
            )
            preview = await run_preview(spec.preview, call.args or {}, tool_ctx, seconds=spec.preview_timeout)
            if preview is not None:
                call = clean_call(
                    replace(call, context={**(call.context or {}), "preview": preview.to_json()})
                )
        previewed.append(call)
    return previewed


async def rechecked(ctx: AgentContext, run: StoredRun) -> list[ParkedCall] | None:
    """The calls of a claimed run with every approved call of a ``tool(recheck=True)`` whose preview,
    run again now (before its tool would run), differs from the preview its approval was bound to
    sent back undecided; None when none is (the run goes on).

    A sent-back call keeps both previews: ``approved_preview`` (what was approved) and ``preview``
    (what it would do now, which the next decision is bound to). A recheck that fails or takes too
    long sends the call back too, its error shown: what it would do now is unknown, and running it
    on an approval of something else is what the recheck is there to prevent. The preview is run on
    the arguments it was first made of (the model's, as the card showed them), so the two compare;
    an approval with edited arguments is rechecked on those model's arguments too: the world under
    the call changed or not. A call's votes go with its approval (it needs all of them again)."""
    calls = list(run.calls)
    sent_back = False
    for index, call in enumerate(calls):
        spec = ctx.tools.get(call.tool_name)
        if (
            spec is None
            or not spec.recheck
            or spec.preview is None
            or call.kind != CallKind.APPROVAL
            or call.delegation is not None
            or not _approved(call.decision)
        ):
            continue
        tool_ctx = ToolContext(
            run_id=run.run_id,
            tool_call_id=call.tool_call_id,
            agent_id=ctx.agent_id,
            thread_id=run.thread_id,
            resource_id=run.resource_id,
        )
        preview = await run_preview(spec.preview, call.args or {}, tool_ctx, seconds=spec.preview_timeout)
        context = call.context or {}
        approved = context.get("preview")
        now = clean_call(replace(call, context={"preview": None if preview is None else preview.to_json()}))
        fresh = (now.context or {}).get("preview")
        error = preview.error if preview is not None else ""
        if not error and _canonical(fresh) == _canonical(approved):
            continue
        decision = call.decision
        assert decision is not None
        recheck = {"at": ctx.clock().isoformat(), "by": decision.actor, "error": error or None}
        calls[index] = replace(
            call,
            decision=None,
            votes=(),
            context={**context, "preview": fresh, "approved_preview": approved, "recheck": recheck},
        )
        sent_back = True
    return calls if sent_back else None


def _approved(decision: Decision | None) -> bool:
    if decision is None:
        return False
    if decision.action == DecisionAction.EXPIRE:
        return bool(decision.resume_data == {"approved": True})
    return decision.action == DecisionAction.APPROVE


def _canonical(preview: Any) -> str:
    return json.dumps(preview, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _short(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


def conversation_context(ctx: AgentContext, messages: Sequence[ModelMessage]) -> dict[str, Any]:
    """The last user message, what the agent said last, and the key fields of earlier results."""
    user_message: str | None = None
    agent_said: str | None = None
    key_results: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    user_message = part.content if isinstance(part.content, str) else str(part.content)
                elif isinstance(part, ToolReturnPart):
                    result = _key_result(ctx, part)
                    if result is not None:
                        key_results.append(result)
        elif isinstance(message, ModelResponse):
            said = "\n".join(p.content for p in message.parts if isinstance(p, TextPart) and p.content)
            # The turn that made the call; an earlier turn's text is older than the call.
            agent_said = said or None
    return {
        "user_message": None if user_message is None else _short(user_message),
        "agent_said": None if agent_said is None else _short(agent_said),
        "key_results": key_results[-MAX_KEY_RESULTS:],
    }


def _key_result(ctx: AgentContext, part: ToolReturnPart) -> dict[str, Any] | None:
    """What an earlier result shows on a later card: its key fields, or that it found nothing or
    failed (a negative result is part of why a call waits: "lookup_order found nothing")."""
    if part.outcome in ("retried", "failed"):
        # ``ModelRetry`` (or arguments the model got wrong), or a tool that raised: any tool's.
        error = part.content if isinstance(part.content, str) else "the model's arguments were invalid"
        return {"tool_name": part.tool_name, "values": {}, "error": _short(error)}
    spec = ctx.find_tool(part.tool_name)
    keys = spec.key_results if spec is not None else ()
    if part.outcome != "success" or not keys:
        # Only tools whose results matter to a reviewer say so: another tool's None is "done".
        return None
    content = to_jsonable(part.content)
    values = {k: content[k] for k in keys if k in content} if isinstance(content, dict) else {}
    if values:
        return {"tool_name": part.tool_name, "values": values}
    if content is None or content is False or content == "" or content == [] or isinstance(content, dict):
        # Nothing, or none of the fields it names as key: it found nothing.
        return {"tool_name": part.tool_name, "values": {}, "nothing": True}
    return None


def previous_answers(calls: Iterable[ParkedCall]) -> list[dict[str, Any]]:
    """The answers given to the decided ``suspend()`` calls a continuation carries on from."""
    answers = []
    for call in calls:
        decision = call.decision
        if call.kind != CallKind.INPUT or decision is None or decision.action != DecisionAction.RESUME:
            continue
        payload = call.suspend_payload
        question = payload.get("question") if isinstance(payload, Mapping) else None
        answers.append(
            {
                "tool_name": call.tool_name,
                "question": question if isinstance(question, str) else None,
                "answer": decision.resume_data,
            }
        )
    return answers


def _call_context(shared: Mapping[str, Any], *, approval_reason: str = "") -> dict[str, Any]:
    return {**shared, "approval_reason": approval_reason or None}


logger = logging.getLogger("agents_runtime")


def grant_store(ctx: AgentContext) -> GrantStore | None:
    store = ctx.store
    return store if isinstance(store, GrantStore) else None


def grant_request(
    ctx: AgentContext,
    tool_name: str,
    *,
    scope: GrantScope | str,
    created_by: str,
    thread_id: str | None = None,
    resource_id: str | None = None,
    expires_at: datetime | None = None,
    max_uses: int | None = None,
    condition: str = "",
    from_run_id: str | None = None,
    from_tool_call_id: str | None = None,
    covers_risky: bool = False,
) -> GrantRequest:
    """``Agent.grant_request``: a grant for ``agent``'s tool, checked but not kept. ``thread_id`` /
    ``resource_id``: the scope's; ``condition``: CEL over the arguments; ``covers_risky``: it may
    approve calls the tool marks risky too (else it never does). ``InvalidGrant`` for a tool
    that forbids grants or needs several approvals, a store that keeps no grants, a scope without
    its thread or end user, a grant with no end (neither ``expires_at`` nor ``max_uses``), a bad
    condition (not CEL, too costly to bound, or naming an argument the tool does not have)."""
    try:
        checked_scope = GrantScope(scope)
    except ValueError:
        raise InvalidGrant(f"Unknown grant scope {scope!r}") from None
    return checked_grant(
        ctx,
        GrantRequest(
            agent_id=ctx.agent_id,
            tool_name=tool_name,
            scope=checked_scope,
            scope_value={GrantScope.THREAD: thread_id, GrantScope.RESOURCE: resource_id}.get(checked_scope),
            created_by=created_by,
            created_at=ctx.clock(),
            expires_at=as_utc(expires_at, end_of_day=False),
            max_uses=max_uses,
            condition=condition.strip(),
            from_run_id=from_run_id,
            from_tool_call_id=from_tool_call_id,
            covers_risky=covers_risky,
        ),
    )


def checked_grant(ctx: AgentContext, request: GrantRequest) -> GrantRequest:
    """``request`` if the agent can keep it, else ``InvalidGrant`` saying why: every grant passes here
    before a store keeps it, however it was made (``grant_request``, or a request built by hand and
    handed to ``add_grant``)."""
    if request.agent_id != ctx.agent_id:
        raise InvalidGrant(f"The grant is not one agent {ctx.agent_id!r} can keep")
    spec = ctx.find_tool(request.tool_name)
    if spec is None:
        raise InvalidGrant(f"Agent {ctx.agent_id!r} has no tool {request.tool_name!r}")
    if not spec.takes_grants:
        why = "needs several approvals" if spec.approvals > 1 else "does not allow grants"
        raise InvalidGrant(f"Tool {request.tool_name!r} {why}: each call waits for a person")
    if grant_store(ctx) is None:
        raise InvalidGrant(f"The store of agent {ctx.agent_id!r} keeps no grants")
    request = checked_request(request)
    if problem := _condition_problem(request.condition, spec):
        raise InvalidGrant(problem)
    return request


def _condition_problem(condition: str, spec: Tool) -> str | None:
    """Why ``condition`` cannot stand on ``spec``'s calls (a grant's or a routing rule's), or None:
    not CEL, too costly to bound, or naming an argument the tool does not have."""
    try:
        compiled = compile_condition(condition)
        if compiled is not None:
            # A condition naming an argument the tool lacks would never hold: say so now, not never.
            check_against_schema(compiled, spec.parameters_json_schema)
    except InvalidCondition as exc:
        return str(exc)
    return None


async def add_grant(ctx: AgentContext, request: GrantRequest) -> Grant:
    """``Agent.add_grant``."""
    request = checked_grant(ctx, request)
    store = grant_store(ctx)
    assert store is not None  # (checked)
    grant: Grant = await ctx.call(store.add_grant, request)
    return grant


async def revoke_grant(ctx: AgentContext, grant_id: int, *, actor: str) -> Grant:
    """``Agent.revoke_grant``: only a grant of this agent."""
    store = grant_store(ctx)
    grant = None if store is None else await ctx.call(store.get_grant, grant_id)
    if store is None or grant is None or grant.agent_id != ctx.agent_id:
        raise GrantNotFound(grant_id)
    revoked: Grant = await ctx.call(store.revoke_grant, grant_id, actor=actor, at=ctx.clock())
    return revoked


def _grantable(ctx: AgentContext, call: ParkedCall) -> bool:
    if call.kind != CallKind.APPROVAL or call.delegation is not None or call.decision is not None:
        return False
    # A call interrupted after its tool started needs a person to confirm running it again.
    if call.tool_started_at is not None:
        return False
    spec = ctx.find_tool(call.tool_name)
    return spec is not None and spec.takes_grants


#: The grants whose conditions hold for each call a run parks, by call id, in the order to try them.
Covering = dict[str, list[Grant]]


async def check_grants(
    ctx: AgentContext, suspension: Suspension, skip: frozenset[str] = frozenset()
) -> tuple[Suspension, Covering]:
    """The live grants that cover each call of ``suspension``, before it is stored (the calls in
    ``skip`` aside: a routing rule decides them, or sent them to several approvals or to a person).

    A grant whose condition cannot be evaluated on a call's arguments (it raises, or is over its
    evaluation budget) does not apply: the call waits for a person, and its context says which grant
    failed and why (its card shows it; the grant's record counts it for the queue-health page).
    Nothing here raises: a grant check that breaks lets nothing through and the run is announced.
    """
    store = grant_store(ctx)
    # A sub-agent's inner run is decided through its supervisor's card, where its calls show.
    if store is None or suspension.parent_run_id is not None:
        return suspension, {}
    covering: Covering = {}
    calls = list(suspension.calls)
    for index, call in enumerate(calls):
        if call.tool_call_id in skip or not _grantable(ctx, call):
            continue
        try:
            grants, failures = await _covering(ctx, store, suspension, call)
        except Exception:
            logger.exception(
                "Run %s: checking the grants of call %s failed", suspension.run_id, call.tool_call_id
            )
            continue
        if grants:
            covering[call.tool_call_id] = grants
        if failures:
            context = {**(call.context or {}), "grant_failures": [asdict(f) for f in failures]}
            calls[index] = replace(call, context=context)
            await _note_failures(ctx, store, failures)
    return replace(suspension, calls=tuple(calls)), covering


async def _covering(
    ctx: AgentContext, store: GrantStore, run: Suspension, call: ParkedCall
) -> tuple[list[Grant], list[GrantFailure]]:
    at = ctx.clock()
    live = await ctx.call(
        store.live_grants,
        ctx.agent_id,
        call.tool_name,
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        at=at,
    )
    spec = ctx.find_tool(call.tool_name)
    if spec is None or not live:
        return [], []
    args = spec.args_with_defaults(call.args)
    grants, failures = [], []
    for grant in live:
        verdict = condition_verdict(grant.condition, args)
        if verdict.error is not None:
            failures.append(GrantFailure(grant.id, grant.label, verdict.error))
        elif verdict.holds:
            grants.append(grant)
    return grants, failures


async def _note_failures(ctx: AgentContext, store: GrantStore, failures: list[GrantFailure]) -> None:
    for failure in failures:
        try:
            await ctx.call(
                store.note_condition_failure, failure.grant_id, error=failure.error, at=ctx.clock()
            )
        except Exception:
            logger.exception("Grant #%s: its condition's failure could not be recorded", failure.grant_id)


async def apply_grants(ctx: AgentContext, run: StoredRun, covering: Covering) -> tuple[StoredRun, int | None]:
    """The run once the grants ``check_grants`` found approved its calls, and the version the last of
    those approvals claimed it at (None: it still waits on someone). A grant revoked or used up since
    approves nothing (the store checks it in the decision's atomic step); the next one is tried."""
    claimed: int | None = None
    for call in run.undecided:
        for grant in covering.get(call.tool_call_id, ()):
            try:
                receipt = await _approve_by_grant(ctx, run.run_id, call, grant)
            except (RunAlreadyDecided, ToolCallNotSuspended, RunNotFound):
                # A reviewer decided it in the moment it was visible: no other grant is tried.
                logger.info("Run %s: call %s was decided before a grant", run.run_id, call.tool_call_id)
                break
            except Exception:
                # The store broke while a grant approved: the call waits for a person, announced.
                logger.exception(
                    "Run %s: grant #%s could not approve call %s", run.run_id, grant.id, call.tool_call_id
                )
                break
            if receipt is None:
                continue
            run, claimed = receipt.run, receipt.claimed_version
            await ctx.notify(
                "call-decided",
                run.run_id,
                tool_call_id=call.tool_call_id,
                action=DecisionAction.APPROVE,
                actor=grant.label,
            )
            break
    return run, claimed


async def _approve_by_grant(
    ctx: AgentContext, run_id: str, call: ParkedCall, grant: Grant
) -> DecisionReceipt | None:
    """The grant's approval through the one door's rules (its maker's rights, risky calls,
    separation of duties: ``agents_runtime.policy``), recorded with one use of the grant; None when
    the grant may not or cannot approve it (revoked or used up since it was read)."""
    request = DecisionRequest(
        run_id,
        call.tool_call_id,
        DecisionAction.APPROVE,
        actor=grant.created_by,
        origin=Origin.GRANT,
        grant=grant,
    )
    try:
        receipt: DecisionReceipt = await ctx.call(
            ctx.store.decide, agent_id=ctx.agent_id, run_id=run_id, rule=decision_rule(ctx, request)
        )
    except DecisionRefused as refused:
        logger.info("Run %s: %s did not approve call %s: %s", run_id, grant.label, call.tool_call_id, refused)
        return None
    except GrantUnavailable:
        return None  # revoked or used up since it was read: the next grant, or a person
    return receipt


def rule_store(ctx: AgentContext) -> RuleStore | None:
    store = ctx.store
    return store if isinstance(store, RuleStore) else None


def rule_request(
    ctx: AgentContext,
    tool_name: str,
    *,
    route: Route | str,
    created_by: str,
    condition: str = "",
    reason: str = "",
    position: int | None = None,
) -> RuleRequest:
    """``Agent.rule_request``: a rule for the agent's tool, checked (``checked_rule_request``) but not
    kept."""
    try:
        checked_route = Route(route)
    except ValueError:
        raise InvalidRule(f"Unknown route {route!r}: one of allow, one, two, deny") from None
    return checked_rule_request(
        ctx,
        RuleRequest(
            agent_id=ctx.agent_id,
            tool_name=tool_name,
            route=checked_route,
            created_by=created_by,
            created_at=ctx.clock(),
            condition=condition.strip(),
            reason=reason.strip(),
            position=position,
        ),
    )


def checked_rule_request(ctx: AgentContext, request: RuleRequest) -> RuleRequest:
    """``request`` if the agent can keep it, else ``InvalidRule`` saying why."""
    if request.agent_id != ctx.agent_id:
        raise InvalidRule(f"The rule is not one agent {ctx.agent_id!r} can keep")
    spec = ctx.find_tool(request.tool_name)
    if spec is None:
        raise InvalidRule(f"Agent {ctx.agent_id!r} has no tool {request.tool_name!r}")
    if rule_store(ctx) is None:
        raise InvalidRule(f"The store of agent {ctx.agent_id!r} keeps no routing rules")
    route = Route(request.route)
    if route == Route.ALLOW and not spec.takes_grants:
        # A rule never lowers what the tool asks for: several approvals, or a person every time.
        why = f"needs {spec.approvals} approvals" if spec.approvals > 1 else "does not allow grants"
        raise InvalidRule(f"Tool {request.tool_name!r} {why}: a rule cannot let its calls through")
    if request.position is not None and (type(request.position) is not int or request.position < 1):
        raise InvalidRule("A rule's position is a whole number of at least 1")
    if len(request.reason) > MAX_REASON_LENGTH:
        raise InvalidRule(f"A rule's reason is at most {MAX_REASON_LENGTH} characters")
    if problem := _condition_problem(request.condition, spec):
        raise InvalidRule(problem)
    return replace(request, route=route, reason=clean_text(request.reason))


async def add_rule(ctx: AgentContext, request: RuleRequest) -> Rule:
    """``Agent.add_rule``."""
    request = checked_rule_request(ctx, request)
    store = rule_store(ctx)
    assert store is not None  # (checked)
    rule: Rule = await ctx.call(store.add_rule, request)
    return rule


async def _own_rule(ctx: AgentContext, rule_id: int) -> RuleStore:
    store = rule_store(ctx)
    rule = None if store is None else await ctx.call(store.get_rule, rule_id)
    if store is None or rule is None or rule.agent_id != ctx.agent_id:
        raise RuleNotFound(rule_id)
    return store


async def change_rule(ctx: AgentContext, rule_id: int, request: RuleRequest) -> Rule:
    """``Agent.change_rule``: only a rule of this agent, for the same tool."""
    store = await _own_rule(ctx, rule_id)
    request = checked_rule_request(ctx, request)
    rule: Rule = await ctx.call(store.change_rule, rule_id, request)
    return rule


async def delete_rule(ctx: AgentContext, rule_id: int, *, actor: str) -> Rule:
    """``Agent.delete_rule``: only a rule of this agent."""
    store = await _own_rule(ctx, rule_id)
    rule: Rule = await ctx.call(store.delete_rule, rule_id, actor=actor, at=ctx.clock())
    return rule


async def rules_of(ctx: AgentContext, tool_name: str | None = None) -> list[Rule]:
    """``Agent.rules``: the agent's rules, by tool (in its tools' order), each tool's in order."""
    store = rule_store(ctx)
    if store is None:
        return []
    names = list(ctx.tools) if tool_name is None else [tool_name]
    found: list[Rule] = []
    for name in names:
        found.extend(await ctx.call(store.rules_for, ctx.agent_id, name))
    return found


def _routable(call: ParkedCall) -> bool:
    # A call interrupted after its tool started needs a person to confirm running it again.
    return (
        call.kind == CallKind.APPROVAL
        and call.delegation is None
        and call.decision is None
        and call.tool_started_at is None
    )


#: The rule that lets through or declines each call a run parks, by call id.
Routed = dict[str, Rule]


async def route_calls(ctx: AgentContext, suspension: Suspension) -> tuple[Suspension, Routed, frozenset[str]]:
    """The suspension with its calls' routes written into their contexts, the ``allow``/``deny``
    rules to apply once it is stored, and the calls grants must leave alone (routed elsewhere than
    ``one``, or whose routing failed). Never raises: routing that breaks leaves the calls to people."""
    store = rule_store(ctx)
    if store is None or suspension.parent_run_id is not None:
        return suspension, {}, frozenset()
    routed: Routed = {}
    held: set[str] = set()
    calls = list(suspension.calls)
    for index, call in enumerate(calls):
        if not _routable(call):
            continue
        try:
            spec = ctx.find_tool(call.tool_name)
            tool_rules = await ctx.call(store.rules_for, ctx.agent_id, call.tool_name)
            if spec is None or not tool_rules:
                continue
            match = first_match(tool_rules, spec.args_with_defaults(call.args))
        except Exception:
            logger.exception("Run %s: routing call %s failed", suspension.run_id, call.tool_call_id)
            held.add(call.tool_call_id)  # nothing automatic when the rules could not be read
            continue
        context = dict(call.context or {})
        if match.failed is not None:
            held.add(call.tool_call_id)
            failure = {"rule_id": match.failed.id, "rule": match.failed.label, "error": match.error}
            context[RULE_FAILURES_KEY] = [failure]
        elif match.rule is not None:
            rule = match.rule
            context[ROUTED_BY_KEY] = rule.label
            if rule.route in (Route.ALLOW, Route.DENY):
                routed[call.tool_call_id] = rule
                held.add(call.tool_call_id)
            elif rule.route == Route.TWO:
                context[REQUIRED_APPROVALS_KEY] = MAX_ROUTED_APPROVALS
                held.add(call.tool_call_id)
        calls[index] = replace(call, context=context)
    return replace(suspension, calls=tuple(calls)), routed, frozenset(held)


async def apply_routes(ctx: AgentContext, run: StoredRun, routed: Routed) -> tuple[StoredRun, int | None]:
    """The run once its ``allow`` and ``deny`` rules decided their calls, and the version the last of
    those decisions claimed it at (None: it still waits on someone)."""
    claimed: int | None = None
    for call in run.undecided:
        rule = routed.get(call.tool_call_id)
        if rule is None:
            continue
        receipt = await _decide_by_rule(ctx, run.run_id, call, rule)
        if receipt is None:
            continue
        run, claimed = receipt.run, receipt.claimed_version
        decision = receipt.call.decision
        await ctx.notify(
            "call-decided",
            run.run_id,
            tool_call_id=call.tool_call_id,
            action=decision.action if decision is not None else DecisionAction.APPROVE,
            actor=rule.label,
        )
    return run, claimed


def rule_reason(rule: Rule) -> str:
    """What the record (and, for a denial, the model) is told of a rule's decision."""
    if rule.route == Route.DENY:
        said = f"Declined by {rule.label}"
        return f"{said}: {rule.reason}" if rule.reason else said
    return f"Allowed by {rule.label}"


async def _decide_by_rule(
    ctx: AgentContext, run_id: str, call: ParkedCall, rule: Rule
) -> DecisionReceipt | None:
    action = DecisionAction.DECLINE if rule.route == Route.DENY else DecisionAction.APPROVE
    request = DecisionRequest(
        run_id,
        call.tool_call_id,
        action,
        actor=rule.label,
        origin=Origin.RULE,
        reason=rule_reason(rule),
        rule=rule,
    )
    try:
        receipt: DecisionReceipt = await ctx.call(
            ctx.store.decide, agent_id=ctx.agent_id, run_id=run_id, rule=decision_rule(ctx, request)
        )
    except (RunAlreadyDecided, ToolCallNotSuspended, RunNotFound):
        logger.info("Run %s: call %s was decided before %s", run_id, call.tool_call_id, rule.label)
        return None
    except DecisionRefused as refused:
        logger.info("Run %s: %s did not decide call %s: %s", run_id, rule.label, call.tool_call_id, refused)
        return None
    except Exception:
        # The store broke: the call waits for a person, announced.
        logger.exception("Run %s: %s could not decide call %s", run_id, rule.label, call.tool_call_id)
        return None
    return receipt


#: The snapshot of a run made from a request (there is no conversation to continue).
EXTERNAL_SNAPSHOT = {"external": 1}
#: The id of a request's one call (the run's id is the request's).
EXTERNAL_CALL_ID = "request"


def external_suspension(
    ctx: AgentContext,
    run_id: str,
    *,
    tool_name: str,
    args: dict[str, Any],
    args_schema: dict[str, Any] | None,
    title: str | None,
    preview: dict[str, Any] | None,
    thread_id: str | None,
    resource_id: str | None,
    deadline: Deadline | None,
    started_by: str | None,
) -> Suspension:
    """The run of one request, parked on its call (checked by ``ExternalAgent.check`` before)."""
    parked_at = ctx.clock()
    context: dict[str, Any] = {
        "user_message": None,
        "agent_said": None,
        "key_results": [],
        "approval_reason": None,
        "previous_answers": [],
        "title": title,
        "args_schema": args_schema,
    }
    shown = Preview.from_json(preview)
    if shown is not None:
        context["preview"] = shown.to_json()
    call = ParkedCall(
        tool_call_id=EXTERNAL_CALL_ID,
        tool_name=tool_name,
        kind=CallKind.APPROVAL,
        args=dict(args),
        context=context,
        deadline=deadline,
        expires_at=None if deadline is None else deadline.expires_at(parked_at),
    )
    return Suspension(
        run_id=run_id,
        agent_id=ctx.agent_id,
        thread_id=thread_id,
        resource_id=resource_id,
        parent_run_id=None,
        created_at=parked_at,
        suspended_at=parked_at,
        calls=(clean_call(call),),
        snapshot=dict(EXTERNAL_SNAPSHOT),
        started_by=started_by,
    )


def approved_args(call: ParkedCall) -> dict[str, Any] | None:
    """The arguments the agent that asked may run its tool with (None: it may not run it)."""
    decision = call.decision
    if decision is None:
        return None
    if decision.action == DecisionAction.APPROVE:
        return decision.edited_args if decision.edited_args is not None else call.args
    if decision.action == DecisionAction.EXPIRE and decision.resume_data == {"approved": True}:
        return call.args
    return None


def handed_over(run: StoredRun) -> RunEnding:
    """How a decided request's run ends: the decision handed to the agent that asked (its record
    keeps the call and what was handed over; what running it did is reported later)."""
    call = run.calls[0]
    decision = call.decision
    assert decision is not None, "continuing a request with an undecided call"
    args = approved_args(call)
    if args is not None:
        edited = decision.action == DecisionAction.APPROVE and decision.edited_args is not None
        detail = f"Approved{' with edits' if edited else ''}: handed to the agent that asked, which runs it."
        result: dict[str, Any] = {"approved": True, "args": args}
    else:
        word = DecisionAction(decision.action).verb
        reason = decision.reason or (
            DEFAULT_DECLINE_REASON if decision.action == DecisionAction.DECLINE else ""
        )
        detail = f"Not approved ({word}{': ' + reason if reason else ''}): the agent that asked was told."
        result = {"approved": False, "reason": reason or None}
    at = decision.decided_at.isoformat()
    transcript = (
        {
            "role": "assistant",
            "kind": "tool-call",
            "timestamp": run.created_at.isoformat(),
            "text": None,
            "tool_name": call.tool_name,
            "tool_call_id": call.tool_call_id,
            "args": call.args,
            "result": None,
        },
        {
            "role": "tool",
            "kind": "tool-result",
            "timestamp": at,
            "text": None,
            "tool_name": call.tool_name,
            "tool_call_id": call.tool_call_id,
            "args": None,
            "result": result,
        },
    )
    return RunEnding("completed", clean_text(detail), transcript=transcript)


#: A new run on a thread remembers the messages of the thread's last 20 ended runs (Mastra's
#: ``lastMessages``, counted in whole runs so that no tool call is cut from its result). Unbounded,
#: every run on a long thread costs more than the one before (its memory is read, sent to the model
#: and kept in its snapshot, which every decision on it decodes again) and a real model's context
#: overflows in the end.
DEFAULT_MEMORY_LAST_RUNS = 20


def checked_memory_bound(last_runs: int | None) -> int | None:
    if last_runs is not None and (type(last_runs) is not int or last_runs < 1):
        raise ValueError(f"memory_last_runs must be a positive int or None, not {last_runs!r}")
    return last_runs


async def start(
    ctx: AgentContext,
    run_id: str,
    prompt: str,
    thread_id: str | None,
    resource_id: str | None,
    parent_run_id: str | None,
    emit: Emit,
    deadline: Deadline | None = None,
    *,
    started_by: str | None = None,
) -> RunResult:
    created_at = ctx.clock()
    history: list[ModelMessage] = []
    if thread_id is not None:
        stored = await ctx.call(
            ctx.store.thread_messages, ctx.agent_id, thread_id, last_runs=ctx.memory_last_runs
        )
        try:
            history = _pydantic.messages_from_json(stored)
        except Exception:
            logger.warning(
                "Thread %r of agent %r has unreadable memory; starting fresh", thread_id, ctx.agent_id
            )
    return await drive(
        ctx,
        run_id=run_id,
        thread_id=thread_id,
        resource_id=resource_id,
        parent_run_id=parent_run_id,
        created_at=created_at,
        history_len=len(history),
        run_kwargs={"user_prompt": prompt, "message_history": history},
        delegation_results={},
        claimed_version=None,
        emit=emit,
        deadline=deadline,
        started_by=started_by,
    )


async def drive(
    ctx: AgentContext,
    *,
    run_id: str,
    thread_id: str | None,
    resource_id: str | None,
    parent_run_id: str | None,
    created_at: datetime,
    history_len: int,
    run_kwargs: dict[str, Any],
    delegation_results: dict[str, dict[str, Any]],
    claimed_version: int | None,
    emit: Emit,
    answered: list[dict[str, Any]] | None = None,
    deadline: Deadline | None = None,
    started_by: str | None = None,
) -> RunResult:
    """One pydantic-ai run, then store what it ended in: a suspension, an answer or a failure.

    ``answered``: the answers to ``suspend()`` calls this continuation carries on from (shown
    beside a follow-up question)."""
    deps = RunDeps(
        run_id=run_id,
        agent_id=ctx.agent_id,
        thread_id=thread_id,
        resource_id=resource_id,
        delegate=functools.partial(delegate, ctx),
        tool_started=None
        if claimed_version is None
        else functools.partial(_mark_tool_started, ctx, run_id, claimed_version),
        deadline=deadline,
        started_by=started_by,
    )
    result = await drive_once(
        ctx,
        deps,
        parent_run_id=parent_run_id,
        created_at=created_at,
        history_len=history_len,
        run_kwargs=run_kwargs,
        delegation_results=delegation_results,
        claimed_version=claimed_version,
        emit=emit,
        answered=answered or [],
    )
    if result.status != "suspended" and deps.inner_runs:
        await discard_inner_runs(ctx, deps)
    return result


async def drive_once(
    ctx: AgentContext,
    deps: RunDeps,
    *,
    parent_run_id: str | None,
    created_at: datetime,
    history_len: int,
    run_kwargs: dict[str, Any],
    delegation_results: dict[str, dict[str, Any]],
    claimed_version: int | None,
    emit: Emit,
    answered: list[dict[str, Any]],
) -> RunResult:
    run_id, thread_id, resource_id = deps.run_id, deps.thread_id, deps.resource_id
    #: The model responses this run (or continuation) reported a ``step-finish`` of.
    steps: list[ModelResponse] = []

    async def relay(run: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        step = step_finished(run_id, run.messages, steps)
        if step is not None:
            emit(replace(step, payload=clean_json(step.payload)))
        async for event in events:
            chunk = chunk_for(run_id, event)
            if chunk is not None:
                emit(replace(chunk, payload=clean_json(chunk.payload)))

    try:
        # The events are handled inline, in the run's own task: ``run_stream_events`` would hand each
        # one over through a memory stream from a task of its own, which is slower (figures in
        # docs/scaling.md, "Why approve misses", from bench/vs_mastra.py).
        ran = await ctx.pydantic_agent().run(deps=deps, event_stream_handler=relay, **run_kwargs)
        output, conversation = ran.output, ran.conversation
    except ClaimLost:
        return lost_claim(ctx, run_id, emit)
    except Exception as exc:
        error = clean_text(f"{type(exc).__name__}: {exc}")
        logger.info("Run %s of agent %r failed: %s", run_id, ctx.agent_id, error)
        if claimed_version is not None:
            # The record keeps what the run had said until its last suspension (the snapshot's).
            known: Conversation | None = run_kwargs.get("conversation")
            await ctx.call(
                ctx.store.finish,
                run_id,
                version=claimed_version,
                ending=RunEnding(
                    "failed",
                    error,
                    transcript=() if known is None else run_transcript(known.messages[history_len:]),
                ),
            )
        result = failed(run_id, emit, error)
        await ctx.notify("run-failed", run_id)
        return result

    if isinstance(output, DeferredToolRequests):
        shared = {**conversation_context(ctx, conversation.messages), "previous_answers": answered}
        calls = with_deadlines(ctx, await parked_calls(ctx, output, shared), deps.deadline)
        calls = await with_previews(ctx, calls, run_id, thread_id, resource_id)
        suspension = Suspension(
            run_id=run_id,
            agent_id=ctx.agent_id,
            thread_id=thread_id,
            resource_id=resource_id,
            parent_run_id=parent_run_id,
            created_at=created_at,
            suspended_at=ctx.clock(),
            calls=tuple(calls),
            snapshot=_pydantic.Snapshot(
                conversation, history_len, delegation_results, deps.deadline
            ).to_json(),
            started_by=deps.started_by,
        )
        return await store_suspension(ctx, suspension, claimed_version, emit)

    text = clean_text(output if isinstance(output, str) else str(output))
    new_messages = (
        [] if thread_id is None else _pydantic.messages_to_json(conversation.messages[history_len:])
    )
    transcript = run_transcript(conversation.messages[history_len:])
    if claimed_version is None:
        await remember_unparked(ctx, thread_id, new_messages, transcript)
    elif not await ctx.call(
        ctx.store.finish,
        run_id,
        version=claimed_version,
        thread_messages=new_messages,
        ending=RunEnding("completed", text, transcript=transcript),
    ):
        return lost_claim(ctx, run_id, emit)
    emit(Chunk("finish", run_id, finished(text, steps, transcript)))
    await ctx.notify("run-completed", run_id)
    return RunResult(run_id=run_id, status="success", text=text)


async def remember_unparked(
    ctx: AgentContext, thread_id: str | None, new_messages: list[Any], transcript: tuple[dict[str, Any], ...]
) -> None:
    """What the store keeps of a run that ended without ever parking (``finish`` never sees one):
    its thread's new messages, and the tool calls it made."""
    if thread_id is not None and new_messages:
        await ctx.call(ctx.store.append_thread_messages, ctx.agent_id, thread_id, new_messages)
    if calls := tool_calls(transcript):
        await ctx.call(ctx.store.count_calls, ctx.agent_id, calls, at=ctx.clock())


async def store_suspension(
    ctx: AgentContext, suspension: Suspension, claimed_version: int | None, emit: Emit, *, grants: bool = True
) -> RunResult:
    """Park the run (``grants``: let routing rules and standing grants decide its calls first; a call
    a recheck sent back waits for people again)."""
    run_id = suspension.run_id
    routed: Routed = {}
    covering: Covering = {}
    if grants:
        suspension, routed, held = await route_calls(ctx, suspension)
        suspension, covering = await check_grants(ctx, suspension, held)
    if claimed_version is None:
        stored: StoredRun | None = await ctx.call(ctx.store.insert_suspended, suspension)
    else:
        stored = await ctx.call(ctx.store.resuspend, suspension, expected_version=claimed_version)
    if stored is None:
        return lost_claim(ctx, run_id, emit)
    stored, routed_version = await apply_routes(ctx, stored, routed)
    stored, granted_version = await apply_grants(ctx, stored, covering)
    granted_version = routed_version if granted_version is None else granted_version
    if granted_version is not None:
        # Rules and grants decided every call it waited on: it goes on at once, never announced.
        return await continue_run(ctx, run_id, granted_version, emit, stored)
    listed = [listed_call(c) for c in stored.undecided]
    for chunk in waiting_chunks(run_id, listed):
        emit(chunk)
    # (A call its recheck sent back keeps its escalation: it waits for that group again.)
    groups = escalated(c.escalated_to for c in stored.undecided)
    await ctx.notify("run-suspended", run_id, escalated_to=groups)
    return RunResult(run_id=run_id, status="suspended", tool_calls=listed)


def finished(text: str, steps: list[ModelResponse], transcript: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """A completed run's ``finish``: its answer, what its model responses used in all (as each
    ``step-finish`` reported it), the model of the last, and the run's messages as its record keeps
    them (the user's prompt included)."""
    last = steps[-1] if steps else None
    return {
        "status": "success",
        "text": text,
        "usage": steps_usage(steps),
        "model_name": clean_text(last.model_name) if last is not None and last.model_name else None,
        "messages": list(transcript),
    }


def failed(run_id: str, emit: Emit, error: str) -> RunResult:
    """How a run that failed ends for whoever streams it."""
    emit(Chunk("error", run_id, {"error": error}))
    emit(Chunk("finish", run_id, {"status": "failed", "error": error}))
    return RunResult(run_id=run_id, status="failed", error=error)


def lost_claim(ctx: AgentContext, run_id: str, emit: Emit) -> RunResult:
    # Our lease ran out and the run was parked again (and maybe decided again) meanwhile.
    error = "The continuation lost its claim on the run (lease expired); the run was parked again"
    logger.warning("Run %s of agent %r: %s", run_id, ctx.agent_id, error)
    return failed(run_id, emit, error)


def _not_started(ctx: AgentContext, run_id: str, emit: Emit) -> RunResult:
    # Another continuation of this claim started first (a repeated task), or the run moved on.
    error = "The continuation could not start: the run is continued elsewhere, or its claim was lost"
    logger.warning("Run %s of agent %r: %s", run_id, ctx.agent_id, error)
    return failed(run_id, emit, error)


async def continue_run(
    ctx: AgentContext,
    run_id: str,
    version: int,
    emit: Emit,
    known: StoredRun | None = None,
    *,
    started: bool = False,
) -> RunResult:
    """Continue a run this process has claimed at ``version``, renewing the claim meanwhile.

    ``known`` is the claimed run with its snapshot when the caller has it (saves a read);
    ``started``: the decision took the claim's lease already (``starts_at_once``).
    """
    if not started and not await ctx.call(ctx.store.start_continuation, run_id, version=version):
        return _not_started(ctx, run_id, emit)
    heartbeat = asyncio.ensure_future(_heartbeat(ctx, run_id, version))
    try:
        return await _continue_claimed(ctx, run_id, version, emit, known)
    except Exception as exc:
        # Storing how the run ended failed (or something else broke after the model ran): end the
        # run as failed with that error rather than leave it "running" until its lease runs out and
        # its calls are offered again as if nothing had happened.
        logger.exception("Run %s of agent %r: the continuation broke", run_id, ctx.agent_id)
        return await _end_failed(ctx, run_id, version, emit, f"{type(exc).__name__}: {exc}")
    finally:
        heartbeat.cancel()


async def _end_failed(ctx: AgentContext, run_id: str, version: int, emit: Emit, error: str) -> RunResult:
    error = clean_text(error)
    try:
        ended = await ctx.call(ctx.store.finish, run_id, version=version, ending=RunEnding("failed", error))
    except Exception:
        # The store itself is failing: the lease runs out and recovery marks the calls interrupted.
        logger.exception("Run %s of agent %r: could not record its failure either", run_id, ctx.agent_id)
        raise
    if not ended:
        return lost_claim(ctx, run_id, emit)
    result = failed(run_id, emit, error)
    await ctx.notify("run-failed", run_id)
    return result


async def _mark_tool_started(ctx: AgentContext, run_id: str, version: int, tool_call_id: str) -> bool:
    return bool(await ctx.call(ctx.store.mark_tool_started, run_id, tool_call_id, version=version))


async def _heartbeat(ctx: AgentContext, run_id: str, version: int) -> None:
    store = ctx.store
    interval = max(store.lease.total_seconds() / 3, 0.05)
    while True:
        await asyncio.sleep(interval)
        if not await ctx.call(store.heartbeat, run_id, version=version):
            return


async def _claimed_run(
    ctx: AgentContext, run_id: str, version: int, known: StoredRun | None
) -> StoredRun | None:
    """The run as claimed at ``version``, with its snapshot (``known`` when it is that), or None."""
    run: StoredRun | None = known
    if run is None or run.version != version or run.snapshot is None:
        run = await ctx.call(ctx.store.get_run, run_id)
    if run is None or run.status != "running" or run.version != version or run.snapshot is None:
        return None
    return run


async def _continue_claimed(
    ctx: AgentContext, run_id: str, version: int, emit: Emit, known: StoredRun | None
) -> RunResult:
    run = await _claimed_run(ctx, run_id, version, known)
    if run is None or run.snapshot is None:
        return lost_claim(ctx, run_id, emit)
    if run.snapshot == EXTERNAL_SNAPSHOT:  # (a request's run: an external agent's)
        return await _hand_over(ctx, run, version, emit)
    try:
        snapshot = _pydantic.Snapshot.from_json(run.snapshot)
    except Exception as exc:
        logger.warning("Run %s has a corrupt snapshot (%s); it cannot continue", run_id, exc)
        return await _end_failed(ctx, run_id, version, emit, f"Corrupt snapshot: {exc}")
    await ctx.notify("run-resumed", run_id)
    sent_back = await rechecked(ctx, run)
    if sent_back is not None:
        return await _send_back(ctx, run, sent_back, version, emit)
    return await _continue_decided(ctx, run, snapshot, version, emit)


async def _continue_decided(
    ctx: AgentContext, run: StoredRun, snapshot: _pydantic.Snapshot, version: int, emit: Emit
) -> RunResult:
    """Continue a claimed run with its decisions: each delegation's inner run, then the model."""
    results = DeferredToolResults()
    delegated: dict[str, list[ParkedCall]] = {}
    for call in run.calls:
        if call.delegation is not None:
            delegated.setdefault(call.delegation.tool_call_id, []).append(call)
        else:
            add_result(results, call)

    delegation_results = dict(snapshot.delegation_results)
    waiting_again: list[ParkedCall] = []
    for tool_call_id, mirrors in delegated.items():
        if tool_call_id in delegation_results:
            continue
        outcome = await continue_inner(ctx, mirrors, emit)
        if outcome.status == "suspended":
            inner_run_id = mirrors[0].delegation.inner_run_id  # type: ignore[union-attr]
            waiting_again.extend(await mirror_inner_calls(ctx, tool_call_id, inner_run_id))
        elif outcome.status == "success":
            delegation_results[tool_call_id] = {_pydantic.DELEGATION_RESULT_KEY: outcome.text}
        else:
            delegation_results[tool_call_id] = {_pydantic.DELEGATION_ERROR_KEY: outcome.error}

    if waiting_again:
        # A sub-agent asks again: the supervisor keeps waiting, with the decisions it already has.
        settled = [c for c in run.calls if c.delegation is None]
        again = replace(snapshot, delegation_results=delegation_results).to_json()
        return await store_suspension(
            ctx, _waiting_again(ctx, run, (*settled, *waiting_again), again), version, emit
        )

    for tool_call_id, outcome_metadata in delegation_results.items():
        results.approvals[tool_call_id] = ToolApproved()
        results.metadata[tool_call_id] = outcome_metadata
    return await drive(
        ctx,
        run_id=run.run_id,
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        parent_run_id=run.parent_run_id,
        created_at=run.created_at,
        history_len=snapshot.history_len,
        run_kwargs={"conversation": snapshot.conversation, "deferred_tool_results": results},
        delegation_results={},
        claimed_version=version,
        emit=showing_edits(emit, run.calls),
        answered=previous_answers(run.calls),
        deadline=snapshot.deadline,
        started_by=run.started_by,
    )


async def _send_back(
    ctx: AgentContext, run: StoredRun, calls: list[ParkedCall], version: int, emit: Emit
) -> RunResult:
    """An approved call would now do something else (``tool(recheck=True)``): nothing runs, the run
    waits again, for a person (no standing grant approves what changed under an approval)."""
    assert run.snapshot is not None
    suspension = _waiting_again(ctx, run, tuple(calls), run.snapshot)
    return await store_suspension(ctx, suspension, version, emit, grants=False)


def _waiting_again(
    ctx: AgentContext, run: StoredRun, calls: tuple[ParkedCall, ...], snapshot: dict[str, Any]
) -> Suspension:
    """A claimed run parked again, as it is, on ``calls`` and ``snapshot``."""
    return Suspension(
        run_id=run.run_id,
        agent_id=ctx.agent_id,
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        parent_run_id=run.parent_run_id,
        created_at=run.created_at,
        suspended_at=ctx.clock(),
        calls=calls,
        snapshot=snapshot,
        started_by=run.started_by,
    )


async def _hand_over(ctx: AgentContext, run: StoredRun, version: int, emit: Emit) -> RunResult:
    """A decided request's run (``agents_runtime.external``): nothing runs here; the run ends with the
    decision, handed to the agent that asked, once (the claim's ``finish``)."""
    ending = handed_over(run)
    if not await ctx.call(ctx.store.finish, run.run_id, version=version, ending=ending):
        return lost_claim(ctx, run.run_id, emit)
    emit(Chunk("finish", run.run_id, finished(ending.detail, [], ending.transcript)))
    await ctx.notify("run-completed", run.run_id)
    return RunResult(run_id=run.run_id, status="success", text=ending.detail)


# -- what a decision leads to ----------------------------------------------------------------------


async def proceed(ctx: AgentContext, receipt: DecisionReceipt, *, started: bool = False) -> Decided:
    """What a recorded decision leads to: the run still waits (a vote, or other calls undecided), or
    it was claimed and goes on: handed to the runtime's scheduler, else continued here as the
    decider's stream. ``started``: the decision was taken with ``start`` (its claim has its lease)."""
    decided = functools.partial(Decided, listed_call(receipt.call), agent_run(receipt.run), receipt.record_id)
    run_id = receipt.run.run_id
    version = receipt.claimed_version
    if receipt.vote is not None or version is None:
        vote = receipt.vote
        tally = (
            None
            if vote is None
            else ApprovalTally(
                receipt.call.tool_call_id, tuple(v.actor or "" for v in vote.votes), vote.required
            )
        )
        remaining = [listed_call(c) for c in receipt.run.undecided]
        return decided(
            RunStream.finished(
                RunResult(run_id=run_id, status="suspended", tool_calls=remaining, approvals=tally)
            )
        )
    claimed = receipt.run
    if ctx.schedule is not None:
        # A worker continues the run; the claim waits in its queue without a lease, which the
        # continuation takes when it starts (``continue_run``). A scheduler that runs it at once,
        # in this process, gets the claimed run rather than read it back, and the lease the
        # decision took (``started``).
        continuation = Continuation(ctx.agent_id, run_id, version, claimed=claimed, started=started)
        done = await ctx.schedule(continuation)
        return decided(RunStream.finished(done or RunResult(run_id=run_id, status="running")))

    async def produce(emit: Emit) -> RunResult:
        return await continue_run(ctx, run_id, version, emit, claimed, started=started)

    return decided(RunStream(run_id, produce))


# -- sub-agents' inner runs -------------------------------------------------------------------------


async def delegate(ctx: AgentContext, sub_agent_id: str, prompt: str, deps: RunDeps) -> RunResult:
    """Run the sub-agent ``sub_agent_id`` as an inner run of the supervisor run ``deps.run_id``."""
    inner_run_id = new_run_id()
    deps.inner_runs.append((sub_agent_id, inner_run_id))
    sub = ctx.agent(sub_agent_id)
    return await start(sub, inner_run_id, prompt, deps.thread_id, deps.resource_id, deps.run_id, ignore)


async def discard_inner_runs(ctx: AgentContext, deps: RunDeps) -> None:
    """Drop the inner runs a supervisor run started but will not wait on (it failed or lost its claim).

    Their calls can only be decided through the supervisor's run, so left in the store they
    would wait in the sub-agent's inbox forever. Taken with a claim like any continuation, so
    an inner run already ended or being continued is left alone.
    """
    for sub_agent_id, inner_run_id in deps.inner_runs:
        sub = ctx.agent(sub_agent_id)
        claimed: StoredRun | None = await sub.call(sub.store.claim, inner_run_id)
        if claimed is None:
            continue
        if not await sub.call(sub.store.start_continuation, inner_run_id, version=claimed.version):
            continue
        if await sub.call(sub.store.finish, inner_run_id, version=claimed.version):
            logger.info(
                "Run %s of agent %r dropped: its supervisor run %s ended without waiting on it",
                inner_run_id,
                sub.agent_id,
                deps.run_id,
            )
            await sub.notify("run-failed", inner_run_id)


async def continue_inner(ctx: AgentContext, mirrors: list[ParkedCall], emit: Emit) -> RunResult:
    """Hand the supervisor's decisions to the sub-agent's inner run and continue it."""
    delegation = mirrors[0].delegation
    assert delegation is not None
    inner_run_id = delegation.inner_run_id
    inner: StoredRun | None = await ctx.call(ctx.store.get_run, inner_run_id)
    if inner is None:
        return RunResult(run_id=inner_run_id, status="failed", error="The sub-agent's run no longer exists")
    try:
        sub = ctx.agent(inner.agent_id)
    except KeyError:
        return RunResult(run_id=inner_run_id, status="failed", error=f"Unknown sub-agent {inner.agent_id!r}")
    decisions = {m.delegation.inner_tool_call_id: m.decision for m in mirrors if m.delegation and m.decision}
    claimed: StoredRun | None = await ctx.call(
        ctx.store.claim, inner_run_id, expected_version=inner.version, decisions=decisions
    )
    if claimed is None:
        return RunResult(run_id=inner_run_id, status="failed", error="The sub-agent's run changed meanwhile")
    if claimed.undecided:
        # The supervisor's view was stale (the inner run was parked again after a crash).
        return RunResult(run_id=inner_run_id, status="suspended")
    return await continue_run(sub, inner_run_id, claimed.version, emit)


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
        except (RiskyNotConfirmed, ApprovalsNotGiven) as refused:
            # The rules never let nobody answering approve a risky call, or one that needs votes:
            # it is declined instead.
            declined = replace(
                request, reason=f"{request.reason} ({refused})", resume_data={"approved": False}
            )
            return decision_rule(ctx, declined)(run)

    try:
        try:
            stream = (await proceed(ctx, await settle(ctx, run_id, rule, None))).stream
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
        # The host's rules on the deadline's act, as on its expiry: a decision the host holds on the
        # call (an undo window) meets the deadline, and the call is not moved under it.
        policy.admit(
            DecisionRequest(run.run_id, due.tool_call_id, DecisionAction.EXPIRE, origin=Origin.DEADLINE),
            run,
            due,
            ctx.policy,
        )
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
    await ctx.notify(
        "call-escalated", run_id, tool_call_id=tool_call_id, escalated_to=escalated([deadline.escalate_to])
    )


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


async def extend_deadline(
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
    #: The new deadline, and the group the call was escalated to (its event's).
    new: list[tuple[datetime, str | None]] = []

    def rule(run: StoredRun) -> DeadlineChange:
        call = pick_call(run, tool_call_id)
        if call.expires_at is None:
            raise ValueError(f"Tool call {tool_call_id!r} has no deadline to extend")
        expires_at = until if until is not None else call.expires_at + (by or timedelta(0))
        if expires_at <= call.expires_at:
            raise ValueError("The new deadline must be later than the current one")
        new.append((expires_at, call.escalated_to))
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
    expires_at, group = new[-1]
    await ctx.notify(
        "deadline-extended", run_id, tool_call_id=tool_call_id, actor=actor, escalated_to=escalated([group])
    )
    return expires_at
