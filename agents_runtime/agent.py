"""``Agent``: runs, suspensions and decisions (Mastra's human-in-the-loop API in Python)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.run import AgentRunResultEvent

from . import _pydantic
from ._pydantic import RunDeps
from .errors import (
    InvalidPagination,
    InvalidResumeData,
    InvalidToolArgs,
    RunNotFound,
    ToolCallNotSuspended,
)
from .events import Continuation, RunEvent
from .store import (
    CallKind,
    Decision,
    DecisionAction,
    DecisionReceipt,
    Delegation,
    InMemoryRunStore,
    ParkedCall,
    RunEnding,
    RunQuery,
    RunStore,
    StoredRun,
    Suspension,
)
from .store_calls import call_store
from .stream import Emit, RunStream
from .tools import Tool, to_jsonable, tool
from .types import AgentRun, AgentRunToolCall, Chunk, ListSuspendedRunsResult, RunResult
from .untrusted import check_decision, checked_json, clean_call, clean_json, clean_text

if TYPE_CHECKING:
    from .runtime import Runtime

logger = logging.getLogger("agents_runtime")

DEFAULT_DECLINE_REASON = "Tool call was not approved by the user"
ListKind = Literal["approval", "input"]


def _now() -> datetime:
    return datetime.now(UTC)


def _new_run_id() -> str:
    return uuid.uuid4().hex


def _ignore(chunk: Chunk) -> None:
    pass


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
    ) -> None:
        if not isinstance(id, str) or not id:
            raise ValueError("Agent id must be a non-empty string")
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
        self._runtime: Runtime | None = None
        self._storage: RunStore | None = None
        self._pydantic_agent: Any = None
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
        for sub in self.agents:
            sub._share_storage(store)

    def _attach(self, runtime: Runtime) -> None:
        if self._runtime is not None and self._runtime is not runtime:
            raise ValueError(f"Agent {self.id!r} already belongs to another Runtime")
        self._runtime = runtime

    def _pydantic(self) -> Any:
        if self._pydantic_agent is None:
            self._pydantic_agent = _pydantic.build_pydantic_agent(self)
        return self._pydantic_agent

    async def _store(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # Stores are synchronous (the Django one must not run on the event loop); the store that owns
        # the method says which thread runs it (see store_calls).
        return await call_store(getattr(method, "__self__", self.storage), method, *args, **kwargs)

    async def _notify(self, type_: str, run_id: str, **details: Any) -> None:
        if self._runtime is not None:
            await self._runtime._publish(RunEvent(type=type_, agent_id=self.id, run_id=run_id, **details))  # type: ignore[arg-type]

    def _find_tool(self, name: str) -> Tool | None:
        found = self._tools_by_name.get(name)
        if found is not None:
            return found
        for sub in self.agents:
            found = sub._find_tool(name)
            if found is not None:
                return found
        return None

    # -- starting runs ---------------------------------------------------------------------------

    async def generate(
        self, prompt: str, *, thread_id: str | None = None, resource_id: str | None = None
    ) -> RunResult:
        """Run the agent on ``prompt`` until it answers, fails or suspends."""
        stream = await self.stream(prompt, thread_id=thread_id, resource_id=resource_id)
        return await stream.result()

    async def stream(
        self, prompt: str, *, thread_id: str | None = None, resource_id: str | None = None
    ) -> RunStream:
        """Start a run and stream its chunks."""
        run_id = _new_run_id()

        async def produce(emit: Emit) -> RunResult:
            return await self._start(run_id, prompt, thread_id, resource_id, None, emit)

        return RunStream(run_id, produce)

    async def _start(
        self,
        run_id: str,
        prompt: str,
        thread_id: str | None,
        resource_id: str | None,
        parent_run_id: str | None,
        emit: Emit,
    ) -> RunResult:
        created_at = _now()
        history: list[ModelMessage] = []
        if thread_id is not None:
            stored = await self._store(self.storage.thread_messages, self.id, thread_id)
            try:
                history = _pydantic.messages_from_json(stored)
            except Exception:
                logger.warning(
                    "Thread %r of agent %r has unreadable memory; starting fresh", thread_id, self.id
                )
        return await self._drive(
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
        )

    async def _delegate(self, sub_agent: Agent, prompt: str, deps: RunDeps) -> RunResult:
        """Run ``sub_agent`` as an inner run of the supervisor run ``deps.run_id``."""
        inner_run_id = _new_run_id()
        deps.inner_runs.append((sub_agent, inner_run_id))
        return await sub_agent._start(
            inner_run_id, prompt, deps.thread_id, deps.resource_id, deps.run_id, _ignore
        )

    async def _discard_inner_runs(self, deps: RunDeps) -> None:
        """Drop the inner runs a supervisor run started but will not wait on (it failed or lost its claim).

        Their calls can only be decided through the supervisor's run, so left in the store they
        would wait in the sub-agent's inbox forever. Taken with a claim like any continuation, so
        an inner run already ended or being continued is left alone.
        """
        for sub_agent, inner_run_id in deps.inner_runs:
            claimed: StoredRun | None = await self._store(sub_agent.storage.claim, inner_run_id)
            if claimed is None:
                continue
            if await self._store(sub_agent.storage.finish, inner_run_id, version=claimed.version):
                logger.info(
                    "Run %s of agent %r dropped: its supervisor run %s ended without waiting on it",
                    inner_run_id,
                    sub_agent.id,
                    deps.run_id,
                )
                await sub_agent._notify("run-failed", inner_run_id)

    # -- the run loop ----------------------------------------------------------------------------

    async def _drive(
        self,
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
    ) -> RunResult:
        """One pydantic-ai run, then store what it ended in: a suspension, an answer or a failure."""
        deps = RunDeps(
            run_id=run_id, agent=self, thread_id=thread_id, resource_id=resource_id, delegate=self._delegate
        )
        result = await self._drive_once(
            deps,
            parent_run_id=parent_run_id,
            created_at=created_at,
            history_len=history_len,
            run_kwargs=run_kwargs,
            delegation_results=delegation_results,
            claimed_version=claimed_version,
            emit=emit,
        )
        if result.status != "suspended" and deps.inner_runs:
            await self._discard_inner_runs(deps)
        return result

    async def _drive_once(
        self,
        deps: RunDeps,
        *,
        parent_run_id: str | None,
        created_at: datetime,
        history_len: int,
        run_kwargs: dict[str, Any],
        delegation_results: dict[str, dict[str, Any]],
        claimed_version: int | None,
        emit: Emit,
    ) -> RunResult:
        run_id, thread_id, resource_id = deps.run_id, deps.thread_id, deps.resource_id
        output: Any = None
        conversation: Conversation | None = None
        try:
            async with self._pydantic().run_stream_events(deps=deps, **run_kwargs) as events:
                async for event in events:
                    if isinstance(event, AgentRunResultEvent):
                        output, conversation = event.result.output, event.result.conversation
                    else:
                        chunk = _chunk_for(run_id, event)
                        if chunk is not None:
                            emit(replace(chunk, payload=clean_json(chunk.payload)))
            if conversation is None:
                raise RuntimeError("The model run ended without a result")
        except Exception as exc:
            error = clean_text(f"{type(exc).__name__}: {exc}")
            logger.info("Run %s of agent %r failed: %s", run_id, self.id, error)
            if claimed_version is not None:
                await self._store(
                    self.storage.finish,
                    run_id,
                    version=claimed_version,
                    ending=RunEnding("failed", error),
                )
            emit(Chunk("error", run_id, {"error": error}))
            emit(Chunk("finish", run_id, {"status": "failed", "error": error}))
            await self._notify("run-failed", run_id)
            return RunResult(run_id=run_id, status="failed", error=error)

        if isinstance(output, DeferredToolRequests):
            calls = await self._parked_calls(output)
            suspension = Suspension(
                run_id=run_id,
                agent_id=self.id,
                thread_id=thread_id,
                resource_id=resource_id,
                parent_run_id=parent_run_id,
                created_at=created_at,
                suspended_at=_now(),
                calls=tuple(calls),
                snapshot=_pydantic.Snapshot(conversation, history_len, delegation_results).to_json(),
            )
            return await self._store_suspension(suspension, claimed_version, emit)

        text = clean_text(output if isinstance(output, str) else str(output))
        new_messages = (
            [] if thread_id is None else _pydantic.messages_to_json(conversation.messages[history_len:])
        )
        if claimed_version is None:
            if new_messages:
                await self._store(self.storage.append_thread_messages, self.id, thread_id, new_messages)
        elif not await self._store(
            self.storage.finish,
            run_id,
            version=claimed_version,
            thread_messages=new_messages,
            ending=RunEnding("completed", text),
        ):
            return self._lost_claim(run_id, emit)
        emit(Chunk("finish", run_id, {"status": "success", "text": text}))
        await self._notify("run-completed", run_id)
        return RunResult(run_id=run_id, status="success", text=text)

    async def _store_suspension(
        self, suspension: Suspension, claimed_version: int | None, emit: Emit
    ) -> RunResult:
        run_id = suspension.run_id
        if claimed_version is None:
            await self._store(self.storage.insert_suspended, suspension)
        elif await self._store(self.storage.resuspend, suspension, expected_version=claimed_version) is None:
            return self._lost_claim(run_id, emit)
        listed = [_listed_call(c) for c in suspension.calls if c.decision is None]
        for call in listed:
            if call.requires_approval:
                emit(
                    Chunk(
                        "tool-call-approval",
                        run_id,
                        {"tool_call_id": call.tool_call_id, "tool_name": call.tool_name, "args": call.args},
                    )
                )
            else:
                emit(
                    Chunk(
                        "tool-call-suspended",
                        run_id,
                        {
                            "tool_call_id": call.tool_call_id,
                            "tool_name": call.tool_name,
                            "suspend_payload": call.suspend_payload,
                            "resume_schema": call.resume_schema,
                        },
                    )
                )
        emit(Chunk("finish", run_id, {"status": "suspended"}))
        await self._notify("run-suspended", run_id)
        return RunResult(run_id=run_id, status="suspended", tool_calls=listed)

    def _lost_claim(self, run_id: str, emit: Emit) -> RunResult:
        # Our lease ran out and the run was parked again (and maybe decided again) meanwhile.
        error = "The continuation lost its claim on the run (lease expired); the run was parked again"
        logger.warning("Run %s of agent %r: %s", run_id, self.id, error)
        emit(Chunk("error", run_id, {"error": error}))
        emit(Chunk("finish", run_id, {"status": "failed", "error": error}))
        return RunResult(run_id=run_id, status="failed", error=error)

    async def _parked_calls(self, requests: DeferredToolRequests) -> list[ParkedCall]:
        calls: list[ParkedCall] = []
        for part in [*requests.approvals, *requests.calls]:
            metadata = requests.metadata.get(part.tool_call_id) or {}
            kind = metadata.get(_pydantic.KIND_KEY)
            spec = self._tools_by_name.get(part.tool_name)
            if kind == "delegation":
                calls.extend(await self._mirror_inner_calls(part.tool_call_id, metadata["inner_run_id"]))
            elif kind == "suspend":
                calls.append(
                    ParkedCall(
                        tool_call_id=part.tool_call_id,
                        tool_name=part.tool_name,
                        kind="suspend",
                        args=part.args_as_dict(),
                        suspend_payload=metadata.get("payload"),
                        suspend_schema=spec.suspend_json_schema if spec else None,
                        resume_schema=spec.resume_json_schema if spec else None,
                    )
                )
            else:
                calls.append(
                    ParkedCall(
                        tool_call_id=part.tool_call_id,
                        tool_name=part.tool_name,
                        kind="approval",
                        args=part.args_as_dict(),
                    )
                )
        return [clean_call(call) for call in calls]

    async def _mirror_inner_calls(self, tool_call_id: str, inner_run_id: str) -> list[ParkedCall]:
        """The supervisor's view of a sub-agent's parked calls, under the delegation call's id."""
        inner: StoredRun | None = await self._store(self.storage.get_run, inner_run_id)
        if inner is None:
            raise RuntimeError(f"Inner run {inner_run_id!r} vanished before its supervisor suspended")
        waiting = inner.undecided
        return [
            clean_call(
                replace(
                    call,
                    tool_call_id=tool_call_id if len(waiting) == 1 else f"{tool_call_id}:{call.tool_call_id}",
                    delegation=Delegation(tool_call_id, inner_run_id, call.tool_call_id),
                    decision=None,
                )
            )
            for call in waiting
        ]

    # -- continuing runs -------------------------------------------------------------------------

    async def _continue(
        self, run_id: str, version: int, emit: Emit, known: StoredRun | None = None
    ) -> RunResult:
        """Continue a run this process has claimed at ``version``, renewing the claim meanwhile.

        ``known`` is the claimed run with its snapshot when the caller has it (saves a read).
        """
        heartbeat = asyncio.ensure_future(self._heartbeat(run_id, version))
        try:
            return await self._continue_claimed(run_id, version, emit, known)
        finally:
            heartbeat.cancel()

    async def _heartbeat(self, run_id: str, version: int) -> None:
        store = self.storage
        interval = max(store.lease.total_seconds() / 3, 0.05)
        while True:
            await asyncio.sleep(interval)
            if not await self._store(store.heartbeat, run_id, version=version):
                return

    async def _continue_claimed(
        self, run_id: str, version: int, emit: Emit, known: StoredRun | None
    ) -> RunResult:
        run: StoredRun | None = known
        if run is None or run.version != version or run.snapshot is None:
            run = await self._store(self.storage.get_run, run_id)
        if run is None or run.status != "running" or run.version != version or run.snapshot is None:
            return self._lost_claim(run_id, emit)
        try:
            snapshot = _pydantic.Snapshot.from_json(run.snapshot)
        except Exception as exc:
            logger.warning("Run %s has a corrupt snapshot (%s); it cannot continue", run_id, exc)
            error = f"Corrupt snapshot: {exc}"
            await self._store(self.storage.finish, run_id, version=version, ending=RunEnding("failed", error))
            emit(Chunk("error", run_id, {"error": error}))
            return RunResult(run_id=run_id, status="failed", error=error)
        await self._notify("run-resumed", run_id)

        results = DeferredToolResults()
        delegated: dict[str, list[ParkedCall]] = {}
        for call in run.calls:
            if call.delegation is not None:
                delegated.setdefault(call.delegation.tool_call_id, []).append(call)
            else:
                _add_result(results, call)

        delegation_results = dict(snapshot.delegation_results)
        waiting_again: list[ParkedCall] = []
        for tool_call_id, mirrors in delegated.items():
            if tool_call_id in delegation_results:
                continue
            outcome = await self._continue_inner(mirrors, emit)
            if outcome.status == "suspended":
                inner_run_id = mirrors[0].delegation.inner_run_id  # type: ignore[union-attr]
                waiting_again.extend(await self._mirror_inner_calls(tool_call_id, inner_run_id))
            elif outcome.status == "success":
                delegation_results[tool_call_id] = {_pydantic.DELEGATION_RESULT_KEY: outcome.text}
            else:
                delegation_results[tool_call_id] = {_pydantic.DELEGATION_ERROR_KEY: outcome.error}

        if waiting_again:
            # A sub-agent asks again: the supervisor keeps waiting, with the decisions it already has.
            settled = [c for c in run.calls if c.delegation is None]
            suspension = Suspension(
                run_id=run.run_id,
                agent_id=self.id,
                thread_id=run.thread_id,
                resource_id=run.resource_id,
                parent_run_id=run.parent_run_id,
                created_at=run.created_at,
                suspended_at=_now(),
                calls=(*settled, *waiting_again),
                snapshot=replace(snapshot, delegation_results=delegation_results).to_json(),
            )
            return await self._store_suspension(suspension, version, emit)

        for tool_call_id, outcome_metadata in delegation_results.items():
            results.approvals[tool_call_id] = ToolApproved()
            results.metadata[tool_call_id] = outcome_metadata
        return await self._drive(
            run_id=run.run_id,
            thread_id=run.thread_id,
            resource_id=run.resource_id,
            parent_run_id=run.parent_run_id,
            created_at=run.created_at,
            history_len=snapshot.history_len,
            run_kwargs={"conversation": snapshot.conversation, "deferred_tool_results": results},
            delegation_results={},
            claimed_version=version,
            emit=_showing_edits(emit, run.calls),
        )

    async def _continue_inner(self, mirrors: list[ParkedCall], emit: Emit) -> RunResult:
        """Hand the supervisor's decisions to the sub-agent's inner run and continue it."""
        delegation = mirrors[0].delegation
        assert delegation is not None
        inner_run_id = delegation.inner_run_id
        inner: StoredRun | None = await self._store(self.storage.get_run, inner_run_id)
        if inner is None:
            return RunResult(
                run_id=inner_run_id, status="failed", error="The sub-agent's run no longer exists"
            )
        sub_agent = self._runtime.get_agent(inner.agent_id) if self._runtime else None
        if sub_agent is None:
            sub_agent = next((a for a in self.agents if a.id == inner.agent_id), None)
        if sub_agent is None:
            return RunResult(
                run_id=inner_run_id, status="failed", error=f"Unknown sub-agent {inner.agent_id!r}"
            )
        decisions = {
            m.delegation.inner_tool_call_id: m.decision for m in mirrors if m.delegation and m.decision
        }
        claimed: StoredRun | None = await self._store(
            self.storage.claim, inner_run_id, expected_version=inner.version, decisions=decisions
        )
        if claimed is None:
            return RunResult(
                run_id=inner_run_id, status="failed", error="The sub-agent's run changed meanwhile"
            )
        if claimed.undecided:
            # The supervisor's view was stale (the inner run was parked again after a crash).
            return RunResult(run_id=inner_run_id, status="suspended")
        return await sub_agent._continue(inner_run_id, claimed.version, emit)

    # -- decisions -------------------------------------------------------------------------------

    async def approve_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str,
        actor: str | None = None,
        edited_args: dict[str, Any] | None = None,
    ) -> RunStream:
        """Approve a parked call: the tool runs (once) when the run continues.

        Beyond Mastra: with ``edited_args`` it runs with those arguments instead of the model's,
        once they pass the tool's own parameter checks (``InvalidToolArgs`` otherwise).
        """
        return await self._decide(
            run_id, tool_call_id, action="approve", actor=actor, edited_args=edited_args
        )

    async def decline_tool_call(
        self, *, run_id: str, tool_call_id: str, reason: str | None = None, actor: str | None = None
    ) -> RunStream:
        """Decline a parked call: the tool never runs and the model receives ``reason``."""
        if reason is not None and not isinstance(reason, str):
            raise TypeError("reason must be a string")
        return await self._decide(run_id, tool_call_id, action="decline", reason=reason, actor=actor)

    async def resume_stream(
        self,
        resume_data: Any,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        actor: str | None = None,
    ) -> RunStream:
        """Answer a ``suspend()``-ed call with ``resume_data`` (validated against its resume schema)."""
        return await self._decide(run_id, tool_call_id, action="resume", resume_data=resume_data, actor=actor)

    async def _decide(
        self,
        run_id: str,
        tool_call_id: str | None,
        *,
        action: DecisionAction,
        actor: str | None,
        reason: str | None = None,
        resume_data: Any = None,
        edited_args: dict[str, Any] | None = None,
    ) -> RunStream:
        if not isinstance(run_id, str) or not run_id:
            raise RunNotFound(str(run_id))
        check_decision(action, reason=reason, resume_data=resume_data, edited_args=edited_args)

        def rule(run: StoredRun) -> tuple[str, Decision]:
            # Runs inside the store's atomic step: the checks still hold when the decision lands.
            if run.parent_run_id is not None:
                raise ToolCallNotSuspended(
                    f"Run {run_id!r} is a sub-agent run; decide it through its supervisor's run "
                    f"{run.parent_run_id!r}",
                    run_id=run_id,
                    tool_call_id=tool_call_id,
                )
            call = _pick_call(run, tool_call_id)
            checked, why, stored_resume = self._validated_decision(call, action, reason, resume_data)
            edits = None if edited_args is None else self._validated_edits(call, edited_args)
            return call.tool_call_id, Decision(
                action=checked,
                decided_at=_now(),
                actor=actor,
                reason=why,
                resume_data=stored_resume,
                edited_args=edits,
            )

        receipt: DecisionReceipt = await self._store(
            self.storage.decide, agent_id=self.id, run_id=run_id, rule=rule
        )
        call, decision = receipt.call, receipt.call.decision
        assert decision is not None
        await self._notify(
            "call-decided",
            run_id,
            tool_call_id=call.tool_call_id,
            action=decision.action,
            actor=actor,
            edited=decision.edited_args is not None,
        )
        if receipt.claimed_version is None:
            remaining = [_listed_call(c) for c in receipt.run.undecided]
            return RunStream.finished(RunResult(run_id=run_id, status="suspended", tool_calls=remaining))
        version: int = receipt.claimed_version
        if self._runtime is not None and self._runtime.scheduler is not None:
            # A worker continues the run; the claim's lease covers the wait in its queue.
            done = await self._runtime._schedule(
                Continuation(agent_id=self.id, run_id=run_id, version=version)
            )
            return RunStream.finished(done or RunResult(run_id=run_id, status="running"))
        claimed = receipt.run

        async def produce(emit: Emit) -> RunResult:
            return await self._continue(run_id, version, emit, claimed)

        return RunStream(run_id, produce)

    def continue_run(self, run_id: str, *, version: int) -> RunStream:
        """Continue a run claimed at ``version`` by a decision (beyond Mastra: for background workers).

        Safe to call more than once: only the holder of the current claim changes the run; a stale
        or repeated continuation ends with status ``"failed"`` and changes nothing.
        """

        async def produce(emit: Emit) -> RunResult:
            return await self._continue(run_id, version, emit)

        return RunStream(run_id, produce)

    def _validated_decision(
        self, call: ParkedCall, action: DecisionAction, reason: str | None, resume_data: Any
    ) -> tuple[DecisionAction, str | None, Any]:
        """Check a decision fits the call; nothing is recorded when it does not."""
        if call.kind == "approval":
            if action != "resume":
                return action, reason, None
            # On an approval, resume data is an approve/decline in disguise.
            if (
                isinstance(resume_data, dict)
                and set(resume_data) in ({"approved"}, {"approved", "reason"})
                and isinstance(resume_data["approved"], bool)
                and isinstance(resume_data.get("reason", ""), str)
            ):
                if resume_data["approved"]:
                    return "approve", None, None
                return "decline", resume_data.get("reason"), None
            raise InvalidResumeData(
                f"Tool call {call.tool_call_id!r} waits for approval: resume it with "
                '{"approved": true|false} and optionally "reason"',
                errors=[
                    {"loc": (), "msg": 'expected {"approved": bool} or {"approved": bool, "reason": str}'}
                ],
            )
        if action == "approve":
            raise InvalidResumeData(
                f"Tool call {call.tool_call_id!r} called suspend(): answer it with resume_stream, not approve"
            )
        if action == "decline":
            return action, reason, None
        spec = self._find_tool(call.tool_name)
        if spec is not None:
            validated = spec.validate_resume_data(resume_data)
        else:
            from .tools import _validate

            validated = _validate(call.resume_schema, resume_data, "resume data")
        return "resume", None, checked_json(validated, to_jsonable, "resume data")

    def _validated_edits(self, call: ParkedCall, edited_args: Any) -> dict[str, Any]:
        """Edited arguments of an approval, checked against the tool's parameters."""
        if call.kind != "approval":
            raise InvalidResumeData(
                f"Tool call {call.tool_call_id!r} called suspend(): it has no arguments to edit"
            )
        spec = self._find_tool(call.tool_name)
        if spec is None:
            raise InvalidToolArgs(
                f"Tool {call.tool_name!r} is not known to agent {self.id!r}: its arguments cannot be checked",
                errors=[{"loc": (), "msg": "unknown tool"}],
            )
        return spec.validate_args(edited_args)

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
        kind: ListKind | None = None,
        order: Literal["newest", "oldest"] = "newest",
    ) -> ListSuspendedRunsResult:
        """This agent's suspended runs, most recently suspended first, from storage.

        Pagination applies when both ``per_page`` and ``page`` (zero-based) are given; ``total``
        counts every match. Beyond Mastra: ``tool_name`` and ``kind`` ("approval" | "input") keep
        runs with such an undecided call, and ``order="oldest"`` reverses the order.
        """
        _check_pagination(per_page, page)
        for label, value in (
            ("thread_id", thread_id),
            ("resource_id", resource_id),
            ("tool_name", tool_name),
        ):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{label} must be a string")
        if kind not in (None, "approval", "input"):
            raise ValueError("kind must be 'approval' or 'input'")
        if order not in ("newest", "oldest"):
            raise ValueError("order must be 'newest' or 'oldest'")
        paged = per_page is not None and page is not None
        query = RunQuery(
            agent_id=self.id,
            thread_id=thread_id,
            resource_id=resource_id,
            created_from=_as_utc(from_date, end_of_day=False),
            created_to=_as_utc(to_date, end_of_day=True),
            tool_name=tool_name,
            kind=_STORE_KIND.get(kind) if kind else None,
            oldest_first=order == "oldest",
            limit=per_page if paged else None,
            offset=(per_page * page) if paged and per_page is not None and page is not None else 0,
        )
        runs, total = await self._store(self.storage.list_suspended, query)
        return ListSuspendedRunsResult(runs=[_agent_run(r) for r in runs], total=total)

    async def get_suspended_run(self, run_id: str) -> AgentRun:
        """One of this agent's suspended runs (beyond Mastra); ``RunNotFound`` otherwise."""
        run = await self._own_run(run_id)
        return _agent_run(run)

    async def run_messages(self, run_id: str) -> list[dict[str, Any]]:
        """The conversation that led to a suspended run's suspension, as plain dicts (beyond Mastra)."""
        run = await self._own_run(run_id)
        try:
            snapshot = _pydantic.Snapshot.from_json(run.snapshot or {})
        except Exception as exc:
            logger.warning("Run %s has a corrupt snapshot: %s", run_id, exc)
            return []
        return _plain_messages(snapshot.conversation.messages)

    async def _own_run(self, run_id: str) -> StoredRun:
        run: StoredRun | None = await self._store(self.storage.get_run, run_id)
        if run is None or run.agent_id != self.id or run.status != "suspended":
            raise RunNotFound(run_id)
        return run


_STORE_KIND: dict[str, CallKind] = {"approval": "approval", "input": "suspend"}


def _check_pagination(per_page: object, page: object) -> None:
    if per_page is not None and (type(per_page) is not int or per_page <= 0):
        raise InvalidPagination(f"per_page must be a positive int, not {per_page!r}")
    if page is not None and (type(page) is not int or page < 0):
        raise InvalidPagination(f"page must be a non-negative int, not {page!r}")


def _as_utc(value: datetime | date | None, *, end_of_day: bool) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        start = datetime.combine(value, time.min, tzinfo=UTC)
        return start + timedelta(days=1) - timedelta(microseconds=1) if end_of_day else start
    raise TypeError(f"Dates must be datetime or date objects, not {type(value).__name__}")


def _pick_call(run: StoredRun, tool_call_id: str | None) -> ParkedCall:
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


def _add_result(results: DeferredToolResults, call: ParkedCall) -> None:
    decision = call.decision
    assert decision is not None, "continuing a run with an undecided call"
    if decision.action == "approve":
        results.approvals[call.tool_call_id] = ToolApproved(override_args=decision.edited_args)
    elif decision.action == "decline":
        results.approvals[call.tool_call_id] = ToolDenied(decision.reason or DEFAULT_DECLINE_REASON)
    else:
        results.approvals[call.tool_call_id] = ToolApproved()
        results.metadata[call.tool_call_id] = {_pydantic.RESUME_KEY: decision.resume_data}


def _listed_call(call: ParkedCall) -> AgentRunToolCall:
    approval = call.kind == "approval"
    return AgentRunToolCall(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        args=call.args if approval else None,
        requires_approval=approval,
        suspend_payload=None if approval else call.suspend_payload,
        resume_schema=call.resume_schema,
        suspend_schema=call.suspend_schema,
    )


def _agent_run(run: StoredRun) -> AgentRun:
    return AgentRun(
        run_id=run.run_id,
        agent_id=run.agent_id,
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        suspended_at=run.suspended_at,
        created_at=run.created_at,
        tool_calls=[_listed_call(c) for c in run.undecided],
        parent_run_id=run.parent_run_id,
        interrupted=run.interrupted,
    )


def _chunk_for(run_id: str, event: AgentStreamEvent) -> Chunk | None:
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and event.part.content:
        return Chunk("text-delta", run_id, {"text": event.part.content})
    if (
        isinstance(event, PartDeltaEvent)
        and isinstance(event.delta, TextPartDelta)
        and event.delta.content_delta
    ):
        return Chunk("text-delta", run_id, {"text": event.delta.content_delta})
    if isinstance(event, FunctionToolCallEvent):
        part = event.part
        return Chunk(
            "tool-call",
            run_id,
            {"tool_call_id": part.tool_call_id, "tool_name": part.tool_name, "args": part.args_as_dict()},
        )
    if isinstance(event, FunctionToolResultEvent):
        result = event.part
        return Chunk(
            "tool-result",
            run_id,
            {
                "tool_call_id": result.tool_call_id,
                "tool_name": result.tool_name,
                "result": to_jsonable(getattr(result, "content", None)),
            },
        )
    return None


def _showing_edits(emit: Emit, calls: Iterable[ParkedCall]) -> Emit:
    """``emit``, with each ``tool-call`` chunk of a call approved with edited arguments telling so.

    pydantic-ai reports the model's call even when ``ToolApproved(override_args=...)`` runs the tool
    with other arguments: the chunk's ``args`` become the ones the tool ran with, and it gains
    ``model_args`` (the model's) and ``edited_by`` (the approving actor, or None).
    """
    edits = {
        c.tool_call_id: c.decision
        for c in calls
        if c.decision is not None and c.decision.edited_args is not None
    }
    if not edits:
        return emit

    def emit_showing_edits(chunk: Chunk) -> None:
        decision = edits.get(chunk.payload.get("tool_call_id", "")) if chunk.type == "tool-call" else None
        if decision is not None:
            chunk = replace(
                chunk,
                payload={
                    **chunk.payload,
                    "args": decision.edited_args,
                    "model_args": chunk.payload.get("args"),
                    "edited_by": decision.actor,
                },
            )
        emit(chunk)

    return emit_showing_edits


def _plain_messages(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    plain: list[dict[str, Any]] = []

    def add(role: str, kind: str, timestamp: Any, **fields: Any) -> None:
        entry = {"role": role, "kind": kind, "text": None, "tool_name": None, "args": None, "result": None}
        entry["tool_call_id"] = None
        entry["timestamp"] = timestamp.isoformat() if isinstance(timestamp, datetime) else None
        entry.update(fields)
        plain.append(entry)

    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    text = part.content if isinstance(part.content, str) else str(part.content)
                    add("user", "text", part.timestamp, text=text)
                elif isinstance(part, ToolReturnPart):
                    add(
                        "tool",
                        "tool-result",
                        part.timestamp,
                        tool_name=part.tool_name,
                        tool_call_id=part.tool_call_id,
                        result=to_jsonable(part.content),
                    )
        elif isinstance(message, ModelResponse):
            for rpart in message.parts:
                if isinstance(rpart, TextPart):
                    add("assistant", "text", message.timestamp, text=rpart.content)
                elif isinstance(rpart, ToolCallPart):
                    add(
                        "assistant",
                        "tool-call",
                        message.timestamp,
                        tool_name=rpart.tool_name,
                        tool_call_id=rpart.tool_call_id,
                        args=rpart.args_as_dict(),
                    )
    return plain
