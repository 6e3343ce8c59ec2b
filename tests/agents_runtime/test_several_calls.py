"""Several parked calls on one run: each decided on its own, one continuation after the last."""

from __future__ import annotations

from typing import Any

from agents_runtime import Agent, Call, Reply, RunStore, ScriptContext, ToolContext, tool
from tests.support.runtime_helpers import ModelSpy, ToolLog, only_run, stored_run

from .conftest import RuntimeFor


def two_refunds(log: ToolLog) -> tuple[Agent, ModelSpy]:
    @tool(requires_approval=True)
    def refund(order_id: str) -> str:
        log.record(order_id=order_id)
        return f"refunded {order_id}"

    spy = ModelSpy(
        [
            Call("refund", {"order_id": "A-1"}, tool_call_id="call-a"),
            Call("refund", {"order_id": "B-2"}, tool_call_id="call-b"),
        ],
        Reply("Both handled."),
    )
    return Agent("support", model=spy.model, tools=[refund]), spy


async def test_non_final_decision_leaves_the_run_suspended_with_the_remaining_calls(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()
    agent, spy = two_refunds(log)
    runtime_for(agent)
    suspended = await agent.generate("refund both", thread_id="t-1")

    stream = await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-a")
    partial = await stream.result()

    assert stream.run_id == suspended.run_id
    assert partial.status == "suspended"
    assert partial.run_id == suspended.run_id
    assert [(c.tool_call_id, c.args) for c in partial.tool_calls] == [("call-b", {"order_id": "B-2"})]
    listed = only_run(await agent.list_suspended_runs())
    assert listed.run_id == suspended.run_id
    assert [c.tool_call_id for c in listed.tool_calls] == ["call-b"]
    assert log.count == 0
    assert spy.calls == 1


async def test_tools_run_and_the_model_is_called_once_when_the_last_call_is_decided(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log = ToolLog()
    agent, spy = two_refunds(log)
    runtime_for(agent)
    suspended = await agent.generate("refund both")

    await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-b")).result()
    result = await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-a")).result()

    assert result.status == "success"
    assert result.text == "Both handled."
    assert sorted(c["order_id"] for c in log.calls) == ["A-1", "B-2"]
    assert spy.calls == 2
    assert spy.tool_results() == {"call-a": "refunded A-1", "call-b": "refunded B-2"}
    assert (await agent.list_suspended_runs()).total == 0
    assert await stored_run(store, suspended.run_id) is None


async def test_approve_one_decline_the_other(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = two_refunds(log)
    runtime_for(agent)
    suspended = await agent.generate("refund both")

    await agent.decline_tool_call(run_id=suspended.run_id, tool_call_id="call-a", reason="Already refunded")
    result = await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-b")).result()

    assert result.status == "success"
    assert log.calls == [{"order_id": "B-2"}]
    assert spy.tool_results() == {"call-a": "Already refunded", "call-b": "refunded B-2"}
    assert spy.calls == 2


async def test_an_approval_and_a_suspension_on_one_run(runtime_for: RuntimeFor) -> None:
    log = ToolLog()

    @tool(requires_approval=True)
    def refund(order_id: str) -> str:
        log.record(order_id=order_id)
        return "refunded"

    @tool
    def ask_reason(ctx: ToolContext, order_id: str) -> str:
        if ctx.resume_data is None:
            ctx.suspend({"question": f"Why {order_id}?"})
        return f"reason: {ctx.resume_data['reason']}"

    spy = ModelSpy(
        [
            Call("refund", {"order_id": "A-1"}, tool_call_id="call-r"),
            Call("ask_reason", {"order_id": "A-1"}, tool_call_id="call-q"),
        ],
        Reply("ok"),
    )
    agent = Agent("support", model=spy.model, tools=[refund, ask_reason])
    runtime_for(agent)
    suspended = await agent.generate("refund A-1")

    partial = await (
        await agent.resume_stream({"reason": "broken"}, run_id=suspended.run_id, tool_call_id="call-q")
    ).result()
    # Now only one call is parked, so the id may be left out.
    result = await (await agent.resume_stream({"approved": True}, run_id=suspended.run_id)).result()

    assert partial.status == "suspended"
    assert [c.tool_call_id for c in partial.tool_calls] == ["call-r"]
    assert result.status == "success"
    assert log.calls == [{"order_id": "A-1"}]
    assert spy.tool_results() == {"call-r": "refunded", "call-q": "reason: broken"}
    assert spy.calls == 2


async def test_run_that_suspends_again_keeps_its_run_id_and_lists_only_the_new_calls(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()

    @tool(requires_approval=True)
    def step(name: str) -> str:
        log.record(name=name)
        return f"{name} done"

    def plan(ctx: ScriptContext) -> Any:
        if ctx.step == 0:
            return Call("step", {"name": "backup"}, tool_call_id="call-1")
        if ctx.step == 1:
            return Call("step", {"name": "migrate"}, tool_call_id="call-2")
        return Reply("Migrated.")

    spy = ModelSpy(plan, plan, plan)
    agent = Agent("ops", model=spy.model, tools=[step])
    runtime_for(agent)
    first = await agent.generate("migrate", thread_id="t-1", resource_id="db-1")
    first_listed = only_run(await agent.list_suspended_runs())

    again = await (await agent.approve_tool_call(run_id=first.run_id, tool_call_id="call-1")).result()
    again_listed = only_run(await agent.list_suspended_runs())
    final = await (await agent.approve_tool_call(run_id=first.run_id, tool_call_id="call-2")).result()

    assert again.status == "suspended"
    assert again.run_id == first.run_id == again_listed.run_id
    assert [c.tool_call_id for c in again.tool_calls] == ["call-2"]
    assert [(c.tool_call_id, c.args) for c in again_listed.tool_calls] == [("call-2", {"name": "migrate"})]
    assert (again_listed.thread_id, again_listed.resource_id) == ("t-1", "db-1")
    assert again_listed.created_at == first_listed.created_at
    assert again_listed.suspended_at > first_listed.suspended_at
    assert final.status == "success" and final.run_id == first.run_id
    assert log.calls == [{"name": "backup"}, {"name": "migrate"}]
