"""Sub-agents' inner runs: started for a supervisor's delegation call, mirrored, continued, discarded."""

from __future__ import annotations

import logging
from dataclasses import replace

from ._convert import ignore, new_run_id
from ._host import RunAgent
from ._pydantic import RunDeps
from .store import Delegation, ParkedCall, StoredRun
from .stream import Emit
from .types import RunResult
from .untrusted import clean_call

logger = logging.getLogger("agents_runtime")


def _sub_agent(agent: RunAgent, sub_agent_id: str) -> RunAgent:
    return next(a for a in agent.agents if a.id == sub_agent_id)


async def delegate(agent: RunAgent, sub_agent_id: str, prompt: str, deps: RunDeps) -> RunResult:
    """Run the sub-agent ``sub_agent_id`` as an inner run of the supervisor run ``deps.run_id``."""
    sub_agent = _sub_agent(agent, sub_agent_id)
    inner_run_id = new_run_id()
    deps.inner_runs.append((sub_agent_id, inner_run_id))
    return await sub_agent._start(inner_run_id, prompt, deps.thread_id, deps.resource_id, deps.run_id, ignore)


async def discard_inner_runs(agent: RunAgent, deps: RunDeps) -> None:
    """Drop the inner runs a supervisor run started but will not wait on (it failed or lost its claim).

    Their calls can only be decided through the supervisor's run, so left in the store they
    would wait in the sub-agent's inbox forever. Taken with a claim like any continuation, so
    an inner run already ended or being continued is left alone.
    """
    for sub_agent_id, inner_run_id in deps.inner_runs:
        sub_agent = _sub_agent(agent, sub_agent_id)
        claimed: StoredRun | None = await agent._store(sub_agent.storage.claim, inner_run_id)
        if claimed is None:
            continue
        if not await agent._store(
            sub_agent.storage.start_continuation, inner_run_id, version=claimed.version
        ):
            continue
        if await agent._store(sub_agent.storage.finish, inner_run_id, version=claimed.version):
            logger.info(
                "Run %s of agent %r dropped: its supervisor run %s ended without waiting on it",
                inner_run_id,
                sub_agent.id,
                deps.run_id,
            )
            await sub_agent._notify("run-failed", inner_run_id)


async def mirror_inner_calls(agent: RunAgent, tool_call_id: str, inner_run_id: str) -> list[ParkedCall]:
    """The supervisor's view of a sub-agent's parked calls, under the delegation call's id."""
    inner: StoredRun | None = await agent._store(agent.storage.get_run, inner_run_id)
    if inner is None:
        raise RuntimeError(f"Inner run {inner_run_id!r} vanished before its supervisor suspended")
    waiting = inner.undecided
    return [
        clean_call(
            replace(
                call,
                tool_call_id=tool_call_id if len(waiting) == 1 else f"{tool_call_id}:{call.tool_call_id}",
                delegation=Delegation(tool_call_id, inner_run_id, call.tool_call_id, inner.agent_id),
                decision=None,
            )
        )
        for call in waiting
    ]


async def continue_inner(agent: RunAgent, mirrors: list[ParkedCall], emit: Emit) -> RunResult:
    """Hand the supervisor's decisions to the sub-agent's inner run and continue it."""
    delegation = mirrors[0].delegation
    assert delegation is not None
    inner_run_id = delegation.inner_run_id
    inner: StoredRun | None = await agent._store(agent.storage.get_run, inner_run_id)
    if inner is None:
        return RunResult(run_id=inner_run_id, status="failed", error="The sub-agent's run no longer exists")
    sub_agent = agent._runtime.get_agent(inner.agent_id) if agent._runtime else None
    if sub_agent is None:
        sub_agent = next((a for a in agent.agents if a.id == inner.agent_id), None)
    if sub_agent is None:
        return RunResult(run_id=inner_run_id, status="failed", error=f"Unknown sub-agent {inner.agent_id!r}")
    decisions = {m.delegation.inner_tool_call_id: m.decision for m in mirrors if m.delegation and m.decision}
    claimed: StoredRun | None = await agent._store(
        agent.storage.claim, inner_run_id, expected_version=inner.version, decisions=decisions
    )
    if claimed is None:
        return RunResult(run_id=inner_run_id, status="failed", error="The sub-agent's run changed meanwhile")
    if claimed.undecided:
        # The supervisor's view was stale (the inner run was parked again after a crash).
        return RunResult(run_id=inner_run_id, status="suspended")
    return await sub_agent._continue(inner_run_id, claimed.version, emit)
