"""Beyond Mastra: a decided run can be continued by a background worker (``Runtime.scheduler``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agents_runtime import Agent, Call, Continuation, Reply, RunEvent, RunResult, tool
from tests.agents_runtime.conftest import RuntimeFor
from tests.support.runtime_helpers import ModelSpy, ToolLog, stored_run


def _refund_agent(log: ToolLog) -> tuple[Agent, ModelSpy]:
    @tool(requires_approval=True)
    def refund(order_id: str) -> str:
        log.record(order_id=order_id)
        return f"refunded {order_id}"

    spy = ModelSpy(Call("refund", {"order_id": "A-7"}), Reply("all done"))
    return Agent("shop", model=spy.model, tools=[refund]), spy


async def test_scheduler_gets_the_continuation_and_a_worker_finishes_the_run(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = _refund_agent(log)
    queue: list[Continuation] = []
    runtime = runtime_for(agent)
    runtime.scheduler = queue.append

    run = await agent.generate("refund A-7")
    stream = await agent.approve_tool_call(run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id)
    handed_over = await stream.result()

    # Nothing ran in the deciding process: the run waits for its worker, and is no longer listed.
    assert handed_over.status == "running"
    assert log.count == 0 and spy.calls == 1
    assert (await agent.list_suspended_runs()).total == 0
    (continuation,) = queue
    assert (continuation.agent_id, continuation.run_id) == ("shop", run.run_id)

    # The worker (any process sharing the store) continues it once.
    worker_result = await agent.continue_run(continuation.run_id, version=continuation.version).result()
    assert (worker_result.status, worker_result.text) == ("success", "all done")
    assert log.calls == [{"order_id": "A-7"}]
    assert await stored_run(runtime.storage, run.run_id) is None


async def test_a_scheduler_given_or_taken_away_after_the_agent_ran_applies_to_the_next_decision(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()
    agent, _ = _refund_agent(log)
    runtime = runtime_for(agent)
    first = await agent.generate("refund A-7")
    queue: list[Continuation] = []

    runtime.scheduler = queue.append
    stream = await agent.approve_tool_call(run_id=first.run_id, tool_call_id=first.tool_calls[0].tool_call_id)
    assert (await stream.result()).status == "running" and log.count == 0
    assert [c.run_id for c in queue] == [first.run_id]

    runtime.scheduler = None
    second = await agent.generate("refund A-7")
    stream = await agent.approve_tool_call(
        run_id=second.run_id, tool_call_id=second.tool_calls[0].tool_call_id
    )
    assert (await stream.result()).status == "success" and log.count == 1
    assert len(queue) == 1


async def test_a_repeated_or_stale_continuation_changes_nothing(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = _refund_agent(log)
    queue: list[Continuation] = []
    runtime_for(agent).scheduler = queue.append
    run = await agent.generate("refund A-7")
    await (
        await agent.approve_tool_call(run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id)
    ).result()
    (continuation,) = queue

    first = await agent.continue_run(run.run_id, version=continuation.version).result()
    again = await agent.continue_run(run.run_id, version=continuation.version).result()
    assert first.status == "success"
    assert again.status == "failed"
    assert log.count == 1


async def test_a_scheduler_that_runs_at_once_returns_the_final_result(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = _refund_agent(log)

    async def run_now(continuation: Continuation) -> RunResult:
        stream = agent.continue_run(
            continuation.run_id, version=continuation.version, claimed=continuation.claimed
        )
        return await stream.result()

    runtime = runtime_for(agent)
    runtime.scheduler = run_now
    run = await agent.generate("refund A-7")
    store = runtime.storage
    reads: list[str] = []
    read_run = store.get_run

    def counted(run_id: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(run_id)
        return read_run(run_id, *args, **kwargs)

    store.get_run = counted  # type: ignore[method-assign]
    result = await (
        await agent.approve_tool_call(run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id)
    ).result()
    assert (result.status, result.text) == ("success", "all done")
    # The continuation ran here, while the decision scheduled it: it was handed the run the decision
    # claimed, with the continuation.
    assert reads == []


async def test_listeners_hear_every_stored_change_in_order(runtime_for: RuntimeFor) -> None:
    agent, _ = _refund_agent(ToolLog())
    heard: list[RunEvent] = []
    runtime = runtime_for(agent)
    runtime.add_listener(heard.append)

    run = await agent.generate("refund A-7")
    await (
        await agent.approve_tool_call(
            run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id, actor="rita"
        )
    ).result()

    assert [(e.type, e.run_id) for e in heard] == [
        ("run-suspended", run.run_id),
        ("call-decided", run.run_id),
        ("run-resumed", run.run_id),
        ("run-completed", run.run_id),
    ]
    assert heard[1].actor == "rita" and heard[1].action == "approve"


async def test_a_listener_of_some_event_types_hears_only_those_and_can_be_removed(
    runtime_for: RuntimeFor,
) -> None:
    agent, _ = _refund_agent(ToolLog())
    endings: list[RunEvent] = []
    everything: list[RunEvent] = []
    runtime = runtime_for(agent)
    runtime.add_listener(endings.append, types=["run-completed", "run-failed"])
    runtime.add_listener(everything.append)

    run = await agent.generate("refund A-7")
    await (
        await agent.approve_tool_call(run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id)
    ).result()
    runtime.remove_listener(endings.append)  # (an equal bound method, not the same object)
    await agent.generate("refund A-8")

    assert [e.type for e in endings] == ["run-completed"]
    assert [e.type for e in everything] == [
        "run-suspended",
        "call-decided",
        "run-resumed",
        "run-completed",
        "run-suspended",
    ]
    with pytest.raises(ValueError):
        runtime.remove_listener(endings.append)


async def test_a_failing_listener_does_not_break_the_run(runtime_for: RuntimeFor) -> None:
    agent, _ = _refund_agent(ToolLog())

    def broken(event: RunEvent) -> None:
        raise RuntimeError("listener down")

    runtime_for(agent).add_listener(broken)
    run = await agent.generate("refund A-7")
    assert run.status == "suspended"


async def test_date_bounds_cover_whole_days(runtime_for: RuntimeFor) -> None:
    agent, _ = _refund_agent(ToolLog())
    runtime_for(agent)
    run = await agent.generate("refund A-7")
    today_utc = (await agent.list_suspended_runs()).runs[0].created_at.date()
    assert [
        r.run_id for r in (await agent.list_suspended_runs(from_date=today_utc, to_date=today_utc)).runs
    ] == [run.run_id]
    assert (await agent.list_suspended_runs(to_date=today_utc - timedelta(days=1))).total == 0
    assert (await agent.list_suspended_runs(from_date=today_utc + timedelta(days=1))).total == 0
