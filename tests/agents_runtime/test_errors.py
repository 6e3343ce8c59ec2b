"""Errors: what each decision method raises, and that nothing runs or changes when it does."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents_runtime import (
    Agent,
    Call,
    RunAlreadyDecided,
    RunNotFound,
    RunStore,
    RunStream,
    ScriptContext,
    ToolCallNotSuspended,
    tool,
)
from tests.support.runtime_helpers import ModelSpy, ToolLog, only_run, stored_run

from .conftest import RuntimeFor

Decide = Callable[[Agent, str, str], Awaitable[RunStream]]

DECISIONS: dict[str, Decide] = {
    "approve": lambda agent, run_id, call_id: agent.approve_tool_call(run_id=run_id, tool_call_id=call_id),
    "decline": lambda agent, run_id, call_id: agent.decline_tool_call(run_id=run_id, tool_call_id=call_id),
    "resume": lambda agent, run_id, call_id: agent.resume_stream(
        {"approved": True}, run_id=run_id, tool_call_id=call_id
    ),
}

each_decision = pytest.mark.parametrize("decide", DECISIONS.values(), ids=DECISIONS.keys())


def refund_agent(agent_id: str, log: ToolLog, *, calls: int = 1) -> Agent:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        log.record(agent=agent_id, amount=amount)
        return "refunded"

    def plan(ctx: ScriptContext) -> Any:
        if ctx.step == 0:
            return [Call("refund", {"amount": n}, tool_call_id=f"call-{n}") for n in range(1, calls + 1)]
        return "done"

    return Agent(agent_id, model=ModelSpy(plan, plan).model, tools=[refund])


class Scene:
    """A suspended run of "support" with two parked calls, and a snapshot of everything to compare."""

    def __init__(self, agent: Agent, store: RunStore, run_id: str) -> None:
        self.agent, self.store, self.run_id = agent, store, run_id

    async def state(self) -> tuple[Any, ...]:
        return (await self.agent.list_suspended_runs(), await stored_run(self.store, self.run_id))


@pytest.fixture
def log() -> ToolLog:
    return ToolLog()


@pytest.fixture
async def scene(runtime_for: RuntimeFor, store: RunStore, log: ToolLog) -> Scene:
    agent = refund_agent("support", log, calls=2)
    runtime_for(agent, refund_agent("billing", log))
    result = await agent.generate("refund twice")
    assert result.status == "suspended"
    return Scene(agent, store, result.run_id)


# -- RunNotFound -----------------------------------------------------------------------------------


@each_decision
async def test_unknown_run_is_not_found(scene: Scene, decide: Decide, log: ToolLog) -> None:
    before = await scene.state()

    with pytest.raises(RunNotFound):
        await decide(scene.agent, "no-such-run", "call-1")
    with pytest.raises(RunNotFound):
        await decide(scene.agent, "", "call-1")

    assert await scene.state() == before
    assert log.count == 0


@each_decision
async def test_run_that_already_ended_is_not_found(
    runtime_for: RuntimeFor, decide: Decide, log: ToolLog
) -> None:
    agent = refund_agent("support", log)
    runtime_for(agent)
    suspended = await agent.generate("refund")
    await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")).result()

    with pytest.raises(RunNotFound):
        await decide(agent, suspended.run_id, "call-1")

    assert log.count == 1


@each_decision
async def test_another_agents_run_is_not_found(
    runtime_for: RuntimeFor, store: RunStore, decide: Decide, log: ToolLog
) -> None:
    support, billing = refund_agent("support", log), refund_agent("billing", log)
    runtime_for(support, billing)
    mine = await support.generate("refund", thread_id="shared", resource_id="shared")
    stored = await stored_run(store, mine.run_id)

    with pytest.raises(RunNotFound) as raised:
        await decide(billing, mine.run_id, "call-1")

    # The same answer as for a run that does not exist: nothing says whose run it is.
    assert raised.value.run_id == mine.run_id
    assert "support" not in str(raised.value)
    assert await stored_run(store, mine.run_id) == stored
    assert (await billing.list_suspended_runs(thread_id="shared")).total == 0
    assert only_run(await support.list_suspended_runs()).run_id == mine.run_id
    assert log.count == 0


# -- ToolCallNotSuspended --------------------------------------------------------------------------


@each_decision
@pytest.mark.parametrize(
    "call_id", ["call-9", "", "CALL-1", "call-1 "], ids=["unknown", "empty", "case", "space"]
)
async def test_call_that_is_not_parked_on_the_run_is_not_suspended(
    scene: Scene, decide: Decide, call_id: str, log: ToolLog
) -> None:
    before = await scene.state()

    with pytest.raises(ToolCallNotSuspended) as raised:
        await decide(scene.agent, scene.run_id, call_id)

    assert raised.value.run_id == scene.run_id
    assert await scene.state() == before
    assert log.count == 0


@each_decision
async def test_stale_call_of_an_earlier_suspension_is_not_suspended(
    runtime_for: RuntimeFor, store: RunStore, decide: Decide
) -> None:
    @tool(requires_approval=True)
    def step(n: int) -> str:
        return "ok"

    def plan(ctx: ScriptContext) -> Any:
        return Call("step", {"n": ctx.step}, tool_call_id=f"call-{ctx.step}") if ctx.step < 2 else "done"

    agent = Agent("ops", model=ModelSpy(plan, plan, plan).model, tools=[step])
    runtime_for(agent)
    first = await agent.generate("go")
    await (await agent.approve_tool_call(run_id=first.run_id, tool_call_id="call-0")).result()
    stored = await stored_run(store, first.run_id)

    with pytest.raises(ToolCallNotSuspended):
        await decide(agent, first.run_id, "call-0")

    assert await stored_run(store, first.run_id) == stored
    assert [c.tool_call_id for c in only_run(await agent.list_suspended_runs()).tool_calls] == ["call-1"]


# -- RunAlreadyDecided -----------------------------------------------------------------------------


@each_decision
async def test_deciding_an_already_decided_call_says_who_decided_and_when(
    scene: Scene, decide: Decide, log: ToolLog
) -> None:
    before_decision = datetime.now(UTC)
    await scene.agent.decline_tool_call(
        run_id=scene.run_id, tool_call_id="call-1", actor="alice", reason="no"
    )
    before = await scene.state()

    with pytest.raises(RunAlreadyDecided) as raised:
        await decide(scene.agent, scene.run_id, "call-1")

    error = raised.value
    assert (error.run_id, error.tool_call_id, error.decided_by) == (scene.run_id, "call-1", "alice")
    assert error.decided_at is not None
    assert error.decided_at.utcoffset() == timedelta(0)
    assert before_decision <= error.decided_at <= datetime.now(UTC)
    assert "alice" in str(error)
    assert await scene.state() == before
    assert log.count == 0


async def test_errors_leave_the_run_decidable(scene: Scene, log: ToolLog) -> None:
    with pytest.raises(ToolCallNotSuspended):
        await scene.agent.approve_tool_call(run_id=scene.run_id, tool_call_id="nope")
    with pytest.raises(RunNotFound):
        await scene.agent.approve_tool_call(run_id="nope", tool_call_id="call-1")

    await scene.agent.approve_tool_call(run_id=scene.run_id, tool_call_id="call-1")
    result = await (await scene.agent.approve_tool_call(run_id=scene.run_id, tool_call_id="call-2")).result()

    assert result.status == "success"
    assert sorted(c["amount"] for c in log.calls) == [1, 2]
