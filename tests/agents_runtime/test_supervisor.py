"""Supervisors and sub-agents: outer and inner runs, their listings, deciding through the outer run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents_runtime import (
    Agent,
    Call,
    Reply,
    RunEvent,
    RunNotFound,
    RunStore,
    ScriptContext,
    ToolCallNotSuspended,
    tool,
)
from tests.support.runtime_helpers import ModelSpy, Team, only_run, stored_run

from .conftest import RuntimeFor


async def test_supervisor_lists_only_the_outer_run_with_the_inner_call_under_the_delegation_id(
    runtime_for: RuntimeFor,
) -> None:
    team = Team()
    runtime_for(team.desk)

    result = await team.desk.generate("Customer wants a refund", thread_id="t-1", resource_id="cust-1")
    outer = only_run(await team.desk.list_suspended_runs())

    assert result.status == "suspended"
    assert outer.run_id == result.run_id
    assert outer.parent_run_id is None
    assert (outer.thread_id, outer.resource_id) == ("t-1", "cust-1")
    [call] = outer.tool_calls
    assert (call.tool_call_id, call.tool_name, call.args, call.requires_approval) == (
        "deleg-1",
        "refund",
        {"order_id": "A-1", "amount": 30},
        True,
    )
    assert [(c.tool_call_id, c.tool_name) for c in result.tool_calls] == [("deleg-1", "refund")]
    assert team.refunds.count == 0


async def test_sub_agent_lists_only_the_inner_run_with_its_parent_and_the_supervisors_thread(
    runtime_for: RuntimeFor,
) -> None:
    team = Team()
    runtime_for(team.desk)

    outer = await team.desk.generate("Customer wants a refund", thread_id="t-1", resource_id="cust-1")
    inner = only_run(await team.billing.list_suspended_runs())

    assert inner.run_id != outer.run_id
    assert inner.parent_run_id == outer.run_id
    assert (inner.thread_id, inner.resource_id) == ("t-1", "cust-1")
    assert [(c.tool_call_id, c.tool_name, c.args) for c in inner.tool_calls] == [
        ("inner-1", "refund", {"order_id": "A-1", "amount": 30})
    ]
    assert team.inner.user_prompts(0) == ["Refund A-1"]


async def test_approving_on_the_supervisor_resumes_the_inner_run_then_the_supervisor(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    team = Team(
        Call("refund", {"order_id": "A-1", "amount": 30}, tool_call_id="inner-1"), Reply("Refund issued.")
    )
    runtime_for(team.desk)
    outer = await team.desk.generate("Customer wants a refund")
    inner_run_id = only_run(await team.billing.list_suspended_runs()).run_id

    result = await (await team.desk.approve_tool_call(run_id=outer.run_id, tool_call_id="deleg-1")).result()

    assert result.status == "success"
    assert result.run_id == outer.run_id
    assert result.text == "Handled."
    assert team.refunds.calls == [{"order_id": "A-1", "amount": 30}]
    assert team.inner.tool_results() == {"inner-1": "refunded 30 on A-1"}
    assert team.outer.tool_results() == {"deleg-1": "Refund issued."}
    assert (await team.desk.list_suspended_runs()).total == 0
    assert (await team.billing.list_suspended_runs()).total == 0
    assert await stored_run(store, outer.run_id) is None
    assert await stored_run(store, inner_run_id) is None


async def test_decline_reason_reaches_the_inner_model(runtime_for: RuntimeFor) -> None:
    team = Team(
        Call("refund", {"order_id": "A-1", "amount": 30}, tool_call_id="inner-1"), Reply("Not refunded.")
    )
    runtime_for(team.desk)
    outer = await team.desk.generate("Customer wants a refund")

    result = await (
        await team.desk.decline_tool_call(
            run_id=outer.run_id, tool_call_id="deleg-1", reason="Over the limit"
        )
    ).result()

    assert result.status == "success"
    assert team.refunds.count == 0
    assert team.inner.tool_results() == {"inner-1": "Over the limit"}
    assert team.outer.tool_results() == {"deleg-1": "Not refunded."}


async def test_inner_suspend_is_answered_through_the_supervisor(runtime_for: RuntimeFor) -> None:
    team = Team(Call("ask_customer", {"question": "Which order?"}, tool_call_id="inner-q"), Reply("Got it."))
    runtime_for(team.desk)
    outer = await team.desk.generate("Help the customer")
    [call] = only_run(await team.desk.list_suspended_runs()).tool_calls

    result = await (await team.desk.resume_stream({"answer": "A-1"}, run_id=outer.run_id)).result()

    assert (call.tool_call_id, call.tool_name, call.requires_approval, call.suspend_payload) == (
        "deleg-1",
        "ask_customer",
        False,
        {"question": "Which order?"},
    )
    assert result.status == "success"
    assert team.questions == [None, {"answer": "A-1"}]
    assert team.inner.tool_results() == {"inner-q": "customer says A-1"}


async def test_several_inner_calls_are_listed_and_decided_as_delegation_id_colon_inner_id(
    runtime_for: RuntimeFor,
) -> None:
    team = Team(
        [
            Call("refund", {"order_id": "A-1", "amount": 10}, tool_call_id="inner-1"),
            Call("refund", {"order_id": "B-2", "amount": 20}, tool_call_id="inner-2"),
        ],
        Reply("Two refunds handled."),
    )
    runtime_for(team.desk)
    outer = await team.desk.generate("Two refunds")
    listed = only_run(await team.desk.list_suspended_runs())

    partial = await (
        await team.desk.decline_tool_call(run_id=outer.run_id, tool_call_id="deleg-1:inner-1", reason="No")
    ).result()
    after_first = only_run(await team.desk.list_suspended_runs())
    inner_calls_before_last = team.inner.calls
    result = await (
        await team.desk.approve_tool_call(run_id=outer.run_id, tool_call_id="deleg-1:inner-2")
    ).result()

    assert {(c.tool_call_id, c.args["order_id"]) for c in listed.tool_calls if c.args} == {
        ("deleg-1:inner-1", "A-1"),
        ("deleg-1:inner-2", "B-2"),
    }
    assert partial.status == "suspended"
    assert [c.tool_call_id for c in partial.tool_calls] == ["deleg-1:inner-2"]
    assert [c.tool_call_id for c in after_first.tool_calls] == ["deleg-1:inner-2"]
    assert inner_calls_before_last == 1
    assert result.status == "success"
    assert team.refunds.calls == [{"order_id": "B-2", "amount": 20}]
    assert team.inner.tool_results() == {"inner-1": "No", "inner-2": "refunded 20 on B-2"}
    assert team.outer.tool_results() == {"deleg-1": "Two refunds handled."}


async def test_inner_run_that_asks_again_keeps_the_supervisor_run_suspended(runtime_for: RuntimeFor) -> None:
    def plan(ctx: ScriptContext) -> Any:
        if ctx.step == 0:
            return Call("refund", {"order_id": "A-1", "amount": 10}, tool_call_id="inner-1")
        if ctx.step == 1:
            return Call("refund", {"order_id": "A-1", "amount": 5}, tool_call_id="inner-2")
        return Reply("Refunded 15.")

    team = Team(plan, plan, plan)
    runtime_for(team.desk)
    outer = await team.desk.generate("Refund in two parts")

    again = await (await team.desk.approve_tool_call(run_id=outer.run_id, tool_call_id="deleg-1")).result()
    listed = only_run(await team.desk.list_suspended_runs())
    result = await (await team.desk.approve_tool_call(run_id=outer.run_id, tool_call_id="deleg-1")).result()

    assert again.status == "suspended"
    assert again.run_id == outer.run_id == listed.run_id
    assert [(c.tool_call_id, c.args) for c in listed.tool_calls] == [
        ("deleg-1", {"order_id": "A-1", "amount": 5})
    ]
    assert result.status == "success"
    assert team.refunds.calls == [{"order_id": "A-1", "amount": 10}, {"order_id": "A-1", "amount": 5}]
    assert team.outer.tool_results() == {"deleg-1": "Refunded 15."}


async def test_sub_agent_that_answers_directly_does_not_suspend_the_supervisor(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    team = Team(Reply("Nothing to refund."))
    runtime_for(team.desk)

    result = await team.desk.generate("Check A-1")

    assert result.status == "success"
    assert team.outer.tool_results() == {"deleg-1": "Nothing to refund."}
    assert (await team.billing.list_suspended_runs()).total == 0


# -- who may decide --------------------------------------------------------------------------------


async def test_deciding_the_inner_run_on_the_sub_agent_names_the_outer_run(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    team = Team()
    runtime_for(team.desk)
    outer = await team.desk.generate("Customer wants a refund")
    inner = only_run(await team.billing.list_suspended_runs())
    stored_outer, stored_inner = await stored_run(store, outer.run_id), await stored_run(store, inner.run_id)

    with pytest.raises(ToolCallNotSuspended, match=outer.run_id):
        await team.billing.approve_tool_call(run_id=inner.run_id, tool_call_id="inner-1")
    with pytest.raises(ToolCallNotSuspended, match=outer.run_id):
        await team.billing.decline_tool_call(run_id=inner.run_id, tool_call_id="inner-1")
    with pytest.raises(ToolCallNotSuspended, match=outer.run_id):
        await team.billing.resume_stream({"approved": True}, run_id=inner.run_id)

    assert await stored_run(store, outer.run_id) == stored_outer
    assert await stored_run(store, inner.run_id) == stored_inner
    assert team.refunds.count == 0


async def test_inner_run_id_on_the_supervisor_is_not_found(runtime_for: RuntimeFor, store: RunStore) -> None:
    team = Team()
    runtime_for(team.desk)
    outer = await team.desk.generate("Customer wants a refund")
    inner = only_run(await team.billing.list_suspended_runs())
    stored_outer, stored_inner = await stored_run(store, outer.run_id), await stored_run(store, inner.run_id)

    with pytest.raises(RunNotFound):
        await team.desk.approve_tool_call(run_id=inner.run_id, tool_call_id="inner-1")
    with pytest.raises(RunNotFound):
        await team.desk.approve_tool_call(run_id=inner.run_id, tool_call_id="deleg-1")

    assert await stored_run(store, outer.run_id) == stored_outer
    assert await stored_run(store, inner.run_id) == stored_inner
    assert team.refunds.count == 0


async def test_supervisor_run_continues_after_a_restart(runtime_for: RuntimeFor) -> None:
    before = Team()
    runtime_for(before.desk)
    outer = await before.desk.generate("Customer wants a refund")

    after = Team(
        Call("refund", {"order_id": "A-1", "amount": 30}, tool_call_id="inner-1"), Reply("Refund issued.")
    )
    runtime_for(after.desk)
    result = await (await after.desk.approve_tool_call(run_id=outer.run_id, tool_call_id="deleg-1")).result()

    assert result.status == "success"
    assert after.refunds.calls == [{"order_id": "A-1", "amount": 30}]
    assert before.refunds.count == 0


async def test_supervisor_without_runtime_shares_its_private_store_with_its_sub_agents() -> None:
    team = Team(Call("refund", {"order_id": "A-1", "amount": 30}, tool_call_id="inner-1"), Reply("Refunded."))

    listed_first = await team.billing.list_suspended_runs()  # the sub-agent is used before its supervisor
    outer = await team.desk.generate("Customer wants a refund")
    inner = only_run(await team.billing.list_suspended_runs())
    result = await (await team.desk.approve_tool_call(run_id=outer.run_id, tool_call_id="deleg-1")).result()

    assert listed_first.total == 0
    assert inner.parent_run_id == outer.run_id
    assert result.status == "success"
    assert team.refunds.count == 1


async def test_an_inner_run_is_dropped_when_its_supervisor_fails_instead_of_waiting_on_it(
    runtime_for: RuntimeFor,
) -> None:
    """Otherwise the sub-agent's inbox would list a call that nobody can ever decide."""
    team = Team()
    inner_suspended = asyncio.Event()

    @tool
    async def check_fraud(order_id: str) -> str:
        # Fails in the same step as the delegation, once the inner run has been stored.
        await asyncio.wait_for(inner_suspended.wait(), timeout=10)
        raise RuntimeError("fraud service down")

    supervisor = ModelSpy(
        [
            Call("agent_billing", {"prompt": "Refund A-1"}, tool_call_id="deleg-1"),
            Call("check_fraud", {"order_id": "A-1"}, tool_call_id="fraud-1"),
        ],
        name="desk-model",
    )
    desk = Agent("desk", model=supervisor.model, tools=[check_fraud], agents=[team.billing])
    runtime = runtime_for(desk)
    events: list[RunEvent] = []

    def watch(event: RunEvent) -> None:
        events.append(event)
        if event.agent_id == "billing" and event.type == "run-suspended":
            inner_suspended.set()

    runtime.add_listener(watch)

    result = await desk.generate("Customer wants a refund")

    assert result.status == "failed" and "fraud service down" in (result.error or "")
    [inner_suspension] = [e for e in events if e.agent_id == "billing" and e.type == "run-suspended"]
    assert (await team.billing.list_suspended_runs()).total == 0
    assert (await desk.list_suspended_runs()).total == 0
    assert ("billing", inner_suspension.run_id, "run-failed") in [
        (e.agent_id, e.run_id, e.type) for e in events
    ]
    assert team.refunds.count == 0
