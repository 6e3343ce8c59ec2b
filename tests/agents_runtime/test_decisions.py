"""Approve and decline: the tool runs once with the model's args, or never, and the model hears why."""

from __future__ import annotations

import pytest

from agents_runtime import Agent, Call, InvalidResumeData, Reply, RunStore, ToolContext, tool
from tests.support.runtime_helpers import ModelSpy, ToolLog, only_run, stored_run

from .conftest import RuntimeFor

DEFAULT_REASON = "Tool call was not approved by the user"


def refund_setup(log: ToolLog) -> tuple[Agent, ModelSpy]:
    @tool(requires_approval=True)
    def refund(order_id: str, amount: int) -> str:
        log.record(order_id=order_id, amount=amount)
        return f"refunded {amount} on {order_id}"

    spy = ModelSpy(
        Call("refund", {"order_id": "A-1", "amount": 120}, tool_call_id="call-1"), Reply("All set.")
    )
    return Agent("support", model=spy.model, tools=[refund]), spy


async def test_approve_runs_the_tool_once_with_the_models_original_args(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = refund_setup(log)
    runtime_for(agent)
    suspended = await agent.generate("refund A-1")

    stream = await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")
    result = await stream.result()

    assert result.status == "success"
    assert result.text == "All set."
    assert result.run_id == suspended.run_id
    assert log.calls == [{"order_id": "A-1", "amount": 120}]
    assert spy.tool_results() == {"call-1": "refunded 120 on A-1"}
    assert (await agent.list_suspended_runs()).total == 0


async def test_decline_never_runs_the_tool(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = refund_setup(log)
    runtime_for(agent)
    suspended = await agent.generate("refund A-1")

    result = await (await agent.decline_tool_call(run_id=suspended.run_id, tool_call_id="call-1")).result()

    assert result.status == "success"
    assert result.text == "All set."
    assert log.count == 0
    assert (await agent.list_suspended_runs()).total == 0


async def test_decline_sends_reason_to_model(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = refund_setup(log)
    runtime_for(agent)
    suspended = await agent.generate("refund A-1")

    await (
        await agent.decline_tool_call(
            run_id=suspended.run_id, tool_call_id="call-1", reason="Order A-1 was already refunded"
        )
    ).result()

    assert spy.tool_results() == {"call-1": "Order A-1 was already refunded"}
    assert log.count == 0


async def test_decline_without_reason_sends_the_default_reason(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = refund_setup(log)
    runtime_for(agent)
    suspended = await agent.generate("refund A-1")

    await (await agent.decline_tool_call(run_id=suspended.run_id, tool_call_id="call-1")).result()

    assert spy.tool_results() == {"call-1": DEFAULT_REASON}


def asking_setup(executions: list[object]) -> tuple[Agent, ModelSpy]:
    @tool
    def ask_details(ctx: ToolContext, order_id: str) -> str:
        executions.append(ctx.resume_data)
        if ctx.resume_data is None:
            ctx.suspend({"question": f"Why refund {order_id}?"})
        return "thanks"

    spy = ModelSpy(Call("ask_details", {"order_id": "A-1"}, tool_call_id="call-ask"), Reply("Understood."))
    return Agent("support", model=spy.model, tools=[ask_details]), spy


async def test_decline_of_a_suspended_call_never_runs_the_tool_again(runtime_for: RuntimeFor) -> None:
    executions: list[object] = []
    agent, spy = asking_setup(executions)
    runtime_for(agent)
    suspended = await agent.generate("refund A-1")

    result = await (
        await agent.decline_tool_call(run_id=suspended.run_id, tool_call_id="call-ask", reason="Not needed")
    ).result()

    assert result.status == "success"
    assert executions == [None]
    assert spy.tool_results() == {"call-ask": "Not needed"}


async def test_approve_on_a_suspended_call_is_invalid_and_changes_nothing(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    executions: list[object] = []
    agent, spy = asking_setup(executions)
    runtime_for(agent)
    suspended = await agent.generate("refund A-1")
    listed, stored = await agent.list_suspended_runs(), await stored_run(store, suspended.run_id)

    with pytest.raises(InvalidResumeData, match="resume_stream"):
        await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-ask")

    assert await agent.list_suspended_runs() == listed
    assert await stored_run(store, suspended.run_id) == stored
    assert executions == [None]
    assert spy.calls == 1
    # The call can still be answered properly.
    result = await (await agent.resume_stream({"reason": "damaged"}, run_id=suspended.run_id)).result()
    assert result.status == "success"
    assert executions == [None, {"reason": "damaged"}]


async def test_actor_is_recorded_with_the_decision(runtime_for: RuntimeFor, store: RunStore) -> None:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        return "ok"

    agent = Agent(
        "support",
        model=ModelSpy(
            [
                Call("refund", {"amount": 1}, tool_call_id="call-1"),
                Call("refund", {"amount": 2}, tool_call_id="call-2"),
            ]
        ).model,
        tools=[refund],
    )
    runtime_for(agent)
    suspended = await agent.generate("refund")

    await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1", actor="alice")

    stored = await stored_run(store, suspended.run_id)
    assert stored is not None
    decided = {c.tool_call_id: c.decision for c in stored.calls}
    assert decided["call-2"] is None
    assert decided["call-1"] is not None
    assert (decided["call-1"].action, decided["call-1"].actor) == ("approve", "alice")
    assert [c.tool_call_id for c in only_run(await agent.list_suspended_runs()).tool_calls] == ["call-2"]
