"""``Agent`` and ``Runtime``: the public API (Mastra's human-in-the-loop API in Python).

``Runtime`` is the registry of agents that owns their storage (Mastra's ``Mastra`` instance): the
store, the listeners told of each run event, the scheduler of continuations and the host's policy.
``Agent`` holds runs, suspensions and decisions; it keeps the public API and the wiring, and the work
is done by the engine (``_loop``), handed the agent's frozen ``AgentContext``; ``_pydantic`` turns
stored runs, events and messages into what callers see. What ``Agent.stream`` and a continuation
return is a ``RunStream`` (the engine's).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal, Protocol, TypedDict, Unpack

from . import _loop, _pydantic
from ._loop import AgentContext, Decided, RunStream
from ._pydantic import Emit, as_utc, check_pagination, new_run_id, now, plain_messages
from .errors import RunNotFound
from .events import Continuation, RunEvent
from .grants import Grant, GrantRequest, GrantScope
from .memory import InMemoryRunStore
from .policy import Confirmation, DecisionRequest, Policy, Would
from .routing import Route, Rule, RuleRequest
from .store import (
    AgentRun,
    CallKind,
    Deadline,
    DecisionAction,
    ListSuspendedRunsResult,
    RunQuery,
    RunResult,
    RunStore,
    StoredRun,
    agent_run,
    as_deadline,
    call_store,
)
from .tools import Tool, tool
from .untrusted import clean_text

__all__ = ["Agent", "Listener", "Runtime", "Scheduler"]


logger = logging.getLogger("agents_runtime")


class Host(Protocol):
    """What an agent uses of the ``Runtime`` it joined (its public face)."""

    @property
    def storage(self) -> RunStore: ...

    @property
    def scheduler(self) -> Callable[[Continuation], Any] | None: ...

    @property
    def policy(self) -> Policy | None: ...

    def get_agent(self, agent_id: str) -> Agent: ...

    def publish(self, event: RunEvent) -> Awaitable[None]: ...

    def schedule(self, continuation: Continuation) -> Awaitable[RunResult | None]: ...


class Agent:
    """An agent whose tools may wait for a human: approve, decline, or answer a ``suspend()``."""

    def __init__(
        self,
        id: str,
        *,
        name: str | None = None,
        instructions: str = "",
        model: Any,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        agents: Iterable[Agent] = (),
        description: str | None = None,
        memory_last_runs: int | None = _loop.DEFAULT_MEMORY_LAST_RUNS,
    ) -> None:
        if not isinstance(id, str) or not id:
            raise ValueError("Agent id must be a non-empty string")
        self.memory_last_runs = _loop.checked_memory_bound(memory_last_runs)
        self.id = id
        self.name = name or id
        self.description = description
        self.instructions = instructions
        self.model = model
        self.tools: tuple[Tool, ...] = tuple(t if isinstance(t, Tool) else tool(t) for t in tools)
        self.agents: tuple[Agent, ...] = tuple(agents)
        seen: set[str] = set()
        for name_ in [t.name for t in self.tools] + [
            _pydantic.delegation_tool_name(a.id) for a in self.agents
        ]:
            if name_ in seen:
                raise ValueError(f"Agent {id!r}: two tools are named {name_!r}")
            seen.add(name_)
        self._tools_by_name = {t.name: t for t in self.tools}
        self._runtime: Host | None = None
        self._storage: RunStore | None = None
        self._ctx: AgentContext | None = None
        self._pydantic = functools.cache(functools.partial(_pydantic.build_pydantic_agent, self))
        if self.agents:
            # Without a Runtime a supervisor and its sub-agents must share one private store from the
            # start: the sub-agent stores the inner runs that the supervisor reads, and either may be
            # used first.
            self._share_storage(InMemoryRunStore())

    def __repr__(self) -> str:
        return f"Agent({self.id!r})"

    # -- wiring ----------------------------------------------------------------------------------

    @property
    def storage(self) -> RunStore:
        if self._runtime is not None:
            return self._runtime.storage
        if self._storage is None:
            # Without a Runtime an agent gets a private in-memory store.
            self._storage = InMemoryRunStore()
        return self._storage

    def _share_storage(self, store: RunStore) -> None:
        self._storage = store
        self._ctx = None
        for sub in self.agents:
            sub._share_storage(store)

    def _join(self, runtime: Host) -> None:
        """Belong to ``runtime`` (again, when its store, scheduler or policy changed): the engine
        parts get a context built from it on their next use."""
        if self._runtime is not None and self._runtime is not runtime:
            raise ValueError(f"Agent {self.id!r} already belongs to another Runtime")
        self._runtime = runtime
        self._ctx = None

    def _context(self) -> AgentContext:
        """The context this agent's engine parts work with, built once per wiring."""
        if self._ctx is None:
            runtime = self._runtime
            self._ctx = AgentContext(
                agent_id=self.id,
                store=self.storage,
                tools=self._tools_by_name,
                find_tool=self.find_tool,
                agent=self._context_of,
                pydantic_agent=self._pydantic,
                memory_last_runs=self.memory_last_runs,
                clock=now,
                publish=None if runtime is None else runtime.publish,
                schedule=None if runtime is None or runtime.scheduler is None else runtime.schedule,
                runs_at_once=getattr(None if runtime is None else runtime.scheduler, "runs_at_once", None),
                policy=None if runtime is None else runtime.policy,
            )
        return self._ctx

    def _context_of(self, agent_id: str) -> AgentContext:
        # A sub-agent, or (continuing an inner run) any agent of the runtime.
        for sub in self.agents:
            if sub.id == agent_id:
                return sub._context()
        if self._runtime is None:
            raise KeyError(agent_id)
        return self._runtime.get_agent(agent_id)._context()

    def find_tool(self, name: str, via: str | None = None) -> Tool | None:
        """The tool a call of this agent's runs names: its own, or a sub-agent's (beyond Mastra).

        ``via``: the sub-agent, however deep, that parked the call (a supervisor's mirror of it:
        ``Delegation.agent_id``): that sub-agent's tool, never a namesake of the supervisor's, of
        another sub-agent's or of a sub-agent in between, whose rules (risky values, votes,
        separation of duties, resume schema) would stand in for its own."""
        if via is not None and via != self.id:
            sub = self.find_sub_agent(via)
            if sub is not None:
                return sub.find_tool(name)
        found = self._tools_by_name.get(name)
        for sub in self.agents:
            if found is None:
                found = sub.find_tool(name)
        return found

    def find_sub_agent(self, agent_id: str) -> Agent | None:
        """The sub-agent ``agent_id`` of this agent's, however deep (None: none of that id)."""
        for sub in self.agents:
            if sub.id == agent_id:
                return sub
            found = sub.find_sub_agent(agent_id)
            if found is not None:
                return found
        return None

    # -- starting runs ---------------------------------------------------------------------------

    async def generate(
        self,
        prompt: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        deadline: Deadline | timedelta | None = None,
        started_by: str | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Run the agent on ``prompt`` until it answers, fails or suspends."""
        stream = await self.stream(
            prompt,
            thread_id=thread_id,
            resource_id=resource_id,
            deadline=deadline,
            started_by=started_by,
            run_id=run_id,
        )
        return await stream.result()

    async def stream(
        self,
        prompt: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        deadline: Deadline | timedelta | None = None,
        started_by: str | None = None,
        run_id: str | None = None,
    ) -> RunStream:
        """Start a run and stream its chunks.

        ``run_id`` is the caller's id for the run (Mastra's ``runId``), a new one when left out; the
        caller keeps its ids unique (the store refuses to park a second run with an id it holds).
        Beyond Mastra: ``deadline`` (a ``Deadline``, or a timedelta after which calls are declined)
        applies to every call this run parks, in place of its tool's own; ``started_by`` names who
        started it (kept with the run): a tool with ``separate_duties=True`` refuses that reviewer's
        approvals.
        """
        run_id = run_id or new_run_id()
        run_deadline = as_deadline(deadline)

        async def produce(emit: Emit) -> RunResult:
            return await _loop.start(
                self._context(),
                run_id,
                prompt,
                thread_id,
                resource_id,
                None,
                emit,
                run_deadline,
                started_by=started_by,
            )

        return RunStream(run_id, produce)

    # -- decisions -------------------------------------------------------------------------------

    async def decide(self, request: DecisionRequest) -> Decided:
        """The one door every decision passes (beyond Mastra): the rules (``agents_runtime.policy``),
        then the decision recorded in the store's atomic step, announced, and the run continued.

        Refusals raise and change nothing: ``RunNotFound``, ``ToolCallNotSuspended``,
        ``RunAlreadyDecided``, ``InvalidResumeData`` / ``InvalidToolArgs``, ``RerunNotConfirmed``, a
        ``DecisionRefused`` naming its rule. ``approve_tool_call``, ``decline_tool_call`` and
        ``resume_stream`` are this with the request spelled out.
        """
        ctx = self._context()
        start = _loop.starts_at_once(ctx)
        return await _loop.proceed(ctx, await _loop.decide(ctx, request, start=start), started=start)

    async def check_decision(self, request: DecisionRequest) -> AgentRun:
        """Whether ``decide`` would take ``request`` now (beyond Mastra), recording nothing: the run as
        it waits, or the refusal ``decide`` would meet, raised. For a host that holds a decision for
        a while before it takes it (an undo window); the rules run again when it is taken."""
        run, _call, _verdict = await _loop.check(self._context(), request)
        return agent_run(run)

    async def would_decide(self, request: DecisionRequest) -> Would:
        """What ``decide(request)`` would do now, by the same rules, recording nothing (beyond Mastra):
        a preview's answer, which a decision taken later may not match (the call may change)."""
        return await _loop.would(self._context(), request)

    async def approve_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str,
        actor: str | None = None,
        edited_args: dict[str, Any] | None = None,
        confirm_rerun: bool = False,
    ) -> RunStream:
        """Approve a parked call: the tool runs (once) when the run continues.

        Beyond Mastra: with ``edited_args`` it runs with those arguments instead of the model's,
        once they pass the tool's own parameter checks (``InvalidToolArgs`` otherwise). A call whose
        tool started in a continuation that died (``AgentRunToolCall.tool_started_at``) may have
        run already: approving it again needs ``confirm_rerun=True`` (``RerunNotConfirmed``).
        """
        request = DecisionRequest(
            run_id,
            tool_call_id,
            DecisionAction.APPROVE,
            actor=actor,
            edited_args=edited_args,
            confirmations=_rerun(confirm_rerun),
        )
        return (await self.decide(request)).stream

    async def decline_tool_call(
        self, *, run_id: str, tool_call_id: str, reason: str | None = None, actor: str | None = None
    ) -> RunStream:
        """Decline a parked call: the tool never runs and the model receives ``reason``."""
        if reason is not None and not isinstance(reason, str):
            raise TypeError("reason must be a string")
        request = DecisionRequest(run_id, tool_call_id, DecisionAction.DECLINE, actor=actor, reason=reason)
        return (await self.decide(request)).stream

    async def resume_stream(
        self,
        resume_data: Any,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        actor: str | None = None,
        confirm_rerun: bool = False,
    ) -> RunStream:
        """Answer a ``suspend()``-ed call with ``resume_data`` (validated against its resume schema).

        ``confirm_rerun`` as for ``approve_tool_call``: the tool runs again on an answer too.
        """
        request = DecisionRequest(
            run_id,
            tool_call_id,
            DecisionAction.RESUME,
            actor=actor,
            resume_data=resume_data,
            confirmations=_rerun(confirm_rerun),
        )
        return (await self.decide(request)).stream

    async def expire_overdue(self, now: datetime | None = None) -> int:
        """Decide every parked call whose deadline passed by ``now`` (default: the current time) as
        its tool says: decline or approve (the audit outcome ``expired``), or escalate (beyond
        Mastra). Each goes through the store's atomic decision step, so a reviewer deciding at the
        same moment either wins or loses whole. How many calls expired or escalated."""
        ctx = self._context()
        return await _loop.expire_overdue(ctx, as_utc(now, end_of_day=False) or ctx.clock())

    async def extend_deadline(
        self,
        *,
        run_id: str,
        tool_call_id: str,
        reason: str,
        until: datetime | None = None,
        by: timedelta | None = None,
        actor: str | None = None,
    ) -> datetime:
        """Move a parked call's deadline to ``until`` or ``by`` later (beyond Mastra); the new one.

        ``ValueError`` without a reason, for an earlier deadline or a call that has none.
        """
        return await _loop.extend_deadline(
            self._context(), run_id, tool_call_id, until=until, by=by, reason=clean_text(reason), actor=actor
        )

    # -- standing grants (beyond Mastra) -----------------------------------------------------------

    def grant_request(
        self, tool_name: str, *, scope: GrantScope | str, created_by: str, **terms: Any
    ) -> GrantRequest:
        """A checked standing grant for ``tool_name``, not yet kept (``add_grant``); ``terms`` and
        the ``InvalidGrant`` cases: ``_loop.grant_request``."""
        return _loop.grant_request(self._context(), tool_name, scope=scope, created_by=created_by, **terms)

    async def add_grant(self, request: GrantRequest) -> Grant:
        """Keep a grant from ``grant_request``: from now on the calls it covers are approved as they
        park, each recorded as approved by it (beyond Mastra)."""
        return await _loop.add_grant(self._context(), request)

    async def revoke_grant(self, grant_id: int, *, actor: str) -> Grant:
        """Revoke one of this agent's grants: no call is approved by it after this returns
        (``GrantNotFound`` when the agent has no such grant)."""
        return await _loop.revoke_grant(self._context(), grant_id, actor=actor)

    # -- routing rules (beyond Mastra) -------------------------------------------------------------

    def rule_request(
        self, tool_name: str, *, route: Route | str, created_by: str, **terms: Any
    ) -> RuleRequest:
        """A checked routing rule for ``tool_name`` (``condition``, ``reason``, ``position``), not yet
        kept; ``InvalidRule`` saying what is wrong (``_loop.rule_request``)."""
        return _loop.rule_request(self._context(), tool_name, route=route, created_by=created_by, **terms)

    async def add_rule(self, request: RuleRequest) -> Rule:
        """Keep a rule from ``rule_request``: from now on it routes the calls it matches as they park."""
        return await _loop.add_rule(self._context(), request)

    async def change_rule(self, rule_id: int, request: RuleRequest) -> Rule:
        """New terms for one of this agent's rules (``RuleNotFound`` when it has no such rule)."""
        return await _loop.change_rule(self._context(), rule_id, request)

    async def delete_rule(self, rule_id: int, *, actor: str) -> Rule:
        """Delete one of this agent's rules (``RuleNotFound`` when it has no such rule)."""
        return await _loop.delete_rule(self._context(), rule_id, actor=actor)

    async def routing_rules(self, tool_name: str | None = None) -> list[Rule]:
        """This agent's routing rules, each tool's in the order they apply."""
        return await _loop.rules_of(self._context(), tool_name)

    def continue_run(
        self, run_id: str, *, version: int, claimed: StoredRun | None = None, started: bool = False
    ) -> RunStream:
        """Continue a run claimed at ``version`` by a decision (beyond Mastra: for background workers).

        Safe to call more than once: only the holder of the current claim changes the run; a stale
        or repeated continuation ends with status ``"failed"`` and changes nothing. ``claimed``: the
        run as the decision claimed it (``Continuation.claimed``), which saves reading it back;
        ``started``: the decision took its lease (``Continuation.started``).
        """

        async def produce(emit: Emit) -> RunResult:
            return await _loop.continue_run(self._context(), run_id, version, emit, claimed, started=started)

        return RunStream(run_id, produce)

    # -- discovery -------------------------------------------------------------------------------

    async def list_suspended_runs(
        self,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        from_date: datetime | date | None = None,
        to_date: datetime | date | None = None,
        per_page: int | None = None,
        page: int | None = None,
        tool_name: str | None = None,
        kind: CallKind | str | None = None,
        order: Literal["newest", "oldest", "deadline"] = "newest",
        delegated: bool | None = None,
        expiring_before: datetime | None = None,
        escalated_to: Iterable[str] | None = None,
    ) -> ListSuspendedRunsResult:
        """This agent's suspended runs, most recently suspended first, from storage.

        Pagination applies when both ``per_page`` and ``page`` (zero-based) are given; ``total``
        counts every match. Beyond Mastra: ``tool_name`` and ``kind`` ("approval" | "input") keep
        runs with such an undecided call, ``order="oldest"`` reverses the order (``"deadline"``:
        the call due soonest first, runs without a deadline last), and ``delegated`` keeps only a
        sub-agent's inner runs (True: decided through the supervisor's run) or only the others
        (False), ``expiring_before`` keeps runs with an undecided call whose deadline is earlier,
        ``escalated_to`` (group names) those with an undecided call escalated to one of them.
        """
        query = _suspended_query(
            self.id,
            thread_id=thread_id,
            resource_id=resource_id,
            from_date=from_date,
            to_date=to_date,
            per_page=per_page,
            page=page,
            tool_name=tool_name,
            kind=kind,
            order=order,
            delegated=delegated,
            expiring_before=expiring_before,
            escalated_to=escalated_to,
        )
        ctx = self._context()
        return await ctx.call(_listing, ctx.store, query)

    def list_suspended_runs_sync(self, **filters: Unpack[SuspendedRunFilters]) -> ListSuspendedRunsResult:
        """``list_suspended_runs`` for synchronous code (beyond Mastra; a view, a command): the store
        is read on the calling thread, with no event loop in between (each trip there and back cost
        about as much as reading a page's rows). Never from async code: it blocks while it reads."""
        return _listing(self._context().store, _suspended_query(self.id, **filters))

    async def get_suspended_run(self, run_id: str) -> AgentRun:
        """One of this agent's suspended runs (beyond Mastra); ``RunNotFound`` otherwise."""
        run = await self._own_run(run_id, with_snapshot=False)
        return agent_run(run)

    def get_suspended_run_sync(self, run_id: str) -> AgentRun:
        """``get_suspended_run`` for synchronous code, as ``list_suspended_runs_sync`` (beyond Mastra)."""
        ctx = self._context()
        return agent_run(self._owned(run_id, ctx.store.get_run(run_id, with_snapshot=False)))

    async def run_messages(self, run_id: str) -> list[dict[str, Any]]:
        """The conversation that led to a suspended run's suspension, as plain dicts (beyond Mastra)."""
        return _conversation(await self._own_run(run_id))

    def run_messages_sync(self, run_id: str) -> list[dict[str, Any]]:
        """``run_messages`` for synchronous code, as ``get_suspended_run_sync`` (beyond Mastra)."""
        ctx = self._context()
        return _conversation(self._owned(run_id, ctx.store.get_run(run_id)))

    async def _own_run(self, run_id: str, *, with_snapshot: bool = True) -> StoredRun:
        ctx = self._context()
        return self._owned(run_id, await ctx.call(ctx.store.get_run, run_id, with_snapshot=with_snapshot))

    def _owned(self, run_id: str, run: StoredRun | None) -> StoredRun:
        """``run`` (as read for ``run_id``) if it is one of this agent's suspended runs."""
        if run is None or run.agent_id != self.id or run.status != "suspended":
            raise RunNotFound(run_id)
        return run


class SuspendedRunFilters(TypedDict, total=False):
    """The keyword arguments of ``Agent.list_suspended_runs`` (for its synchronous twin)."""

    thread_id: str | None
    resource_id: str | None
    from_date: datetime | date | None
    to_date: datetime | date | None
    per_page: int | None
    page: int | None
    tool_name: str | None
    kind: CallKind | str | None
    order: Literal["newest", "oldest", "deadline"]
    delegated: bool | None
    expiring_before: datetime | None
    escalated_to: Iterable[str] | None


def _conversation(run: StoredRun) -> list[dict[str, Any]]:
    """A suspended run's conversation as plain dicts (none from a corrupt snapshot)."""
    try:
        snapshot = _pydantic.Snapshot.from_json(run.snapshot or {})
    except Exception as exc:
        logger.warning("Run %s has a corrupt snapshot: %s", run.run_id, exc)
        return []
    return plain_messages(snapshot.conversation.messages)


def _suspended_query(agent_id: str, **filters: Unpack[SuspendedRunFilters]) -> RunQuery:
    """The store's query for a listing's arguments, each checked (``Agent.list_suspended_runs``)."""
    unknown = filters.keys() - SuspendedRunFilters.__annotations__.keys()
    if unknown:
        raise TypeError(f"list_suspended_runs() got unexpected keyword arguments {sorted(unknown)}")
    per_page, page, kind = filters.get("per_page"), filters.get("page"), filters.get("kind")
    order = filters.get("order", "newest")
    expiring_before, escalated_to = filters.get("expiring_before"), filters.get("escalated_to")
    if expiring_before is not None and not isinstance(expiring_before, datetime):
        raise TypeError("expiring_before must be a datetime")
    if isinstance(escalated_to, str):
        raise TypeError("escalated_to is a collection of group names, not one string")
    check_pagination(per_page, page)
    for label in ("thread_id", "resource_id", "tool_name"):
        value = filters.get(label)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{label} must be a string")
    if kind not in (None, *CallKind):
        raise ValueError(f"kind must be {' or '.join(repr(k.value) for k in CallKind)}")
    if order not in ("newest", "oldest", "deadline"):
        raise ValueError("order must be 'newest', 'oldest' or 'deadline'")
    paged = per_page is not None and page is not None
    return RunQuery(
        agent_id=agent_id,
        thread_id=filters.get("thread_id"),
        resource_id=filters.get("resource_id"),
        created_from=as_utc(filters.get("from_date"), end_of_day=False),
        created_to=as_utc(filters.get("to_date"), end_of_day=True),
        tool_name=filters.get("tool_name"),
        kind=CallKind(kind) if kind else None,
        oldest_first=order == "oldest",
        by_deadline=order == "deadline",
        delegated=filters.get("delegated"),
        expiring_before=as_utc(expiring_before, end_of_day=False),
        escalated_to=None if escalated_to is None else frozenset(escalated_to),
        limit=per_page if paged else None,
        offset=(per_page * page) if paged and per_page is not None and page is not None else 0,
    )


def _listing(store: RunStore, query: RunQuery) -> ListSuspendedRunsResult:
    """A listing as ``list_suspended_runs`` returns it: made by a store that makes it from its own rows
    (``list_waiting``, see ``RunStore``), else from the runs the store lists."""
    list_waiting = getattr(store, "list_waiting", None)
    if list_waiting is not None:
        runs, total = list_waiting(query)
        return ListSuspendedRunsResult(runs=runs, total=total)
    stored, total = store.list_suspended(query)
    return ListSuspendedRunsResult(runs=[agent_run(r) for r in stored], total=total)


def _rerun(confirmed: bool) -> frozenset[Confirmation]:
    return frozenset({Confirmation.RERUN}) if confirmed else frozenset()


Listener = Callable[[RunEvent], Awaitable[None] | None]
#: Returns the continuation's result when it ran before returning, else None (it runs later).
#: Takes a claimed run's continuation (a task queue, say). One that may run it at once, in the
#: deciding task, says so by a ``runs_at_once()`` method: the decision then takes the claim's lease
#: in its own step (``RunStore.decide``'s ``start``) rather than leave it to the continuation.
Scheduler = Callable[[Continuation], Awaitable[RunResult | None] | RunResult | None]


class Runtime:
    """Agents and the store they share. Sub-agents are registered with their supervisors."""

    def __init__(
        self,
        agents: Iterable[Agent] = (),
        storage: RunStore | None = None,
        *,
        scheduler: Scheduler | None = None,
        policy: Policy | None = None,
    ) -> None:
        self._storage: RunStore | None = storage
        self._scheduler: Scheduler | None = scheduler
        self._policy: Policy | None = policy
        self._agents: dict[str, Agent] = {}
        #: Each listener with the event types it hears (None: every type).
        self._listeners: list[tuple[Listener, frozenset[str] | None]] = []
        for agent in agents:
            self._register(agent)

    @property
    def storage(self) -> RunStore:
        """The store every agent of this runtime keeps its runs in.

        A runtime built without one gets an ``InMemoryRunStore`` when it is first needed; an
        application may give it another before that (``has_storage`` tells whether one was given).
        """
        if self._storage is None:
            self._storage = InMemoryRunStore()
        return self._storage

    @storage.setter
    def storage(self, store: RunStore) -> None:
        self._storage = store
        self._rewire()

    @property
    def scheduler(self) -> Scheduler | None:
        """When set, a decision that completes a run's decisions hands the continuation to it (e.g. a
        task queue) instead of continuing in this process; see ``Agent.continue_run``."""
        return self._scheduler

    @scheduler.setter
    def scheduler(self, scheduler: Scheduler | None) -> None:
        self._scheduler = scheduler
        self._rewire()

    @property
    def policy(self) -> Policy | None:
        """The host's rules, checked first inside every decision's atomic step (``agents_runtime.policy``)."""
        return self._policy

    @policy.setter
    def policy(self, policy: Policy | None) -> None:
        self._policy = policy
        self._rewire()

    @property
    def has_storage(self) -> bool:
        """Whether a store was given (or the in-memory default already taken)."""
        return self._storage is not None

    def _register(self, agent: Agent) -> None:
        existing = self._agents.get(agent.id)
        if existing is agent:
            return
        if existing is not None:
            raise ValueError(f"Two different agents share the id {agent.id!r}")
        agent._join(self)
        self._agents[agent.id] = agent
        for sub in agent.agents:
            self._register(sub)

    def add_agent(self, agent: Agent) -> None:
        """Serve ``agent`` from now on, beside those it was built with (an agent registered while the
        host runs: an external agent); ``ValueError`` if another agent has its id."""
        self._register(agent)

    @property
    def agents(self) -> list[Agent]:
        """Every registered agent, sub-agents included, in registration order."""
        return list(self._agents.values())

    def get_agent(self, agent_id: str) -> Agent:
        """The agent with this id; ``KeyError`` when there is none."""
        try:
            return self._agents[agent_id]
        except KeyError:
            raise KeyError(f"No agent {agent_id!r} in this runtime") from None

    async def reclaim_stopped(self) -> int:
        """Park again every run whose continuation stopped (its lease ran out: its process died), and
        announce each (``run-suspended``: it waits for a decision again), so it shows as stopped
        without anyone reading it first. Whoever hosts the runtime calls it on a timer (the Django
        app: ``approvals.tasks``). How many runs it parked again."""
        store = self.storage
        reclaimed = await call_store(store, store.reclaim_expired)
        for agent_id, run_id in reclaimed:
            await self.publish(RunEvent(type="run-suspended", agent_id=agent_id, run_id=run_id))
        return len(reclaimed)

    async def expire_due(self, now: datetime | None = None) -> int:
        """Expire (or escalate) every parked call of every agent whose deadline passed by ``now``.

        Whoever hosts the runtime calls it on a timer (the Django app: ``approvals.tasks``); a
        call a reviewer decides at the same moment is decided once, by whichever comes first.
        How many calls expired or escalated.
        """
        at = now or datetime.now(UTC)
        done = 0
        for agent in self.agents:
            done += await agent.expire_overdue(at)
        return done

    def add_listener(self, listener: Listener, *, types: Iterable[str] | None = None) -> None:
        """Call ``listener(event)`` (sync or async) after every stored change of a run, or only after
        those of the event ``types`` given: a listener is not called for events it has nothing to do
        with."""
        self._listeners.append((listener, None if types is None else frozenset(types)))

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener`` (ValueError if it was never added)."""
        for index, (held, _) in enumerate(self._listeners):
            if held == listener:
                del self._listeners[index]
                return
        raise ValueError(f"{listener!r} is not a listener of this runtime")

    def _rewire(self) -> None:
        # The agents' engine parts work with a frozen context: they get a new one on next use.
        for agent in self._agents.values():
            agent._join(self)

    async def schedule(self, continuation: Continuation) -> RunResult | None:
        """Hand a continuation to the scheduler; its result if it already ran (e.g. immediately)."""
        if self._scheduler is None:
            raise RuntimeError("This runtime has no scheduler")
        outcome = self._scheduler(continuation)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        return outcome if isinstance(outcome, RunResult) else None

    async def publish(self, event: RunEvent) -> None:
        """Tell every listener about ``event``; a listener that fails is logged, never raised."""
        for listener, types in list(self._listeners):
            if types is not None and event.type not in types:
                continue
            try:
                outcome = listener(event)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                # A broken listener must not break the run it reports on.
                logger.exception("Run event listener failed on %s", event)
