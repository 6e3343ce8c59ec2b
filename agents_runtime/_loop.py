"""The run loop: one pydantic-ai run and what it ended in, and continuing a claimed run.

A supervisor's delegations run here too: a sub-agent's inner run is started for its delegation
call, continued with the supervisor's decisions, and discarded when the supervisor stops waiting.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import AgentStreamEvent, ModelMessage, ModelResponse
from pydantic_ai.tools import RunContext

from . import _external, _pydantic
from ._context import AgentContext
from ._decisions import add_result
from ._grants import Covering, apply_grants, check_grants
from ._parking import (
    conversation_context,
    mirror_inner_calls,
    parked_calls,
    previous_answers,
    rechecked,
    with_deadlines,
    with_previews,
)
from ._pydantic import (
    ClaimLost,
    Emit,
    RunDeps,
    agent_run,
    chunk_for,
    ignore,
    listed_call,
    new_run_id,
    run_transcript,
    showing_edits,
    step_finished,
    steps_usage,
    waiting_chunks,
)
from ._routing import Routed, apply_routes, route_calls
from .events import Continuation
from .store import (
    ApprovalTally,
    Chunk,
    Deadline,
    DecisionReceipt,
    ParkedCall,
    RunEnding,
    RunResult,
    StoredRun,
    Suspension,
    tool_calls,
)
from .stream import Decided, RunStream
from .untrusted import clean_json, clean_text

logger = logging.getLogger("agents_runtime")

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
    await ctx.notify("run-suspended", run_id)
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
    ctx: AgentContext, run_id: str, version: int, emit: Emit, known: StoredRun | None = None
) -> RunResult:
    """Continue a run this process has claimed at ``version``, renewing the claim meanwhile.

    ``known`` is the claimed run with its snapshot when the caller has it (saves a read).
    """
    if not await ctx.call(ctx.store.start_continuation, run_id, version=version):
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
    if run.snapshot == _external.SNAPSHOT:  # (a request's run: ``_external``)
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
    ending = _external.handed_over(run)
    if not await ctx.call(ctx.store.finish, run.run_id, version=version, ending=ending):
        return lost_claim(ctx, run.run_id, emit)
    emit(Chunk("finish", run.run_id, finished(ending.detail, [], ending.transcript)))
    await ctx.notify("run-completed", run.run_id)
    return RunResult(run_id=run.run_id, status="success", text=ending.detail)


# -- what a decision leads to ----------------------------------------------------------------------


async def proceed(ctx: AgentContext, receipt: DecisionReceipt) -> Decided:
    """What a recorded decision leads to: the run still waits (a vote, or other calls undecided), or
    it was claimed and goes on: handed to the runtime's scheduler, else continued here as the
    decider's stream."""
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
        # in this process, gets the claimed run rather than read it back.
        done = await ctx.schedule(Continuation(ctx.agent_id, run_id, version, claimed=claimed))
        return decided(RunStream.finished(done or RunResult(run_id=run_id, status="running")))

    async def produce(emit: Emit) -> RunResult:
        return await continue_run(ctx, run_id, version, emit, claimed)

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
