"""Approving with edited arguments (beyond Mastra): the tool runs once, with the reviewer's arguments."""

from __future__ import annotations

from typing import Any

import pytest

from agents_runtime import (
    Agent,
    Call,
    InvalidResumeData,
    InvalidToolArgs,
    Reply,
    RunEvent,
    RunStore,
    ToolContext,
    tool,
)
from tests.support.runtime_helpers import ModelSpy, Team, ToolLog, only_run, stored_run

from .conftest import RuntimeFor


def payout_agent(log: ToolLog) -> tuple[Agent, ModelSpy]:
    @tool(requires_approval=True)
    def pay_out(account: str, amount: int, memo: str = "refund") -> str:
        log.record(account=account, amount=amount, memo=memo)
        return f"paid {amount} to {account} ({memo})"

    spy = ModelSpy(
        Call("pay_out", {"account": "DE-wrong", "amount": 500}, tool_call_id="call-1"), Reply("Paid.")
    )
    return Agent("payouts", model=spy.model, tools=[pay_out]), spy


async def test_the_tool_runs_once_with_the_edited_arguments_and_the_model_sees_that_result(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log = ToolLog()
    agent, spy = payout_agent(log)
    runtime = runtime_for(agent)
    events: list[RunEvent] = []
    runtime.add_listener(events.append)
    suspended = await agent.generate("pay the customer")

    stream = await agent.approve_tool_call(
        run_id=suspended.run_id,
        tool_call_id="call-1",
        actor="alice",
        edited_args={"account": "DE-right", "amount": "50"},
    )
    result = await stream.result()

    assert result.status == "success"
    assert log.calls == [{"account": "DE-right", "amount": 50, "memo": "refund"}]
    assert spy.tool_results()["call-1"] == "paid 50 to DE-right (refund)"
    [decided] = [e for e in events if e.type == "call-decided"]
    assert (decided.action, decided.actor, decided.edited) == ("approve", "alice", True)
    assert await stored_run(store, suspended.run_id) is None


async def test_a_plain_approval_still_runs_the_models_arguments(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = payout_agent(log)
    runtime = runtime_for(agent)
    events: list[RunEvent] = []
    runtime.add_listener(events.append)
    suspended = await agent.generate("pay the customer")

    await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")).result()

    assert log.calls == [{"account": "DE-wrong", "amount": 500, "memo": "refund"}]
    assert [e.edited for e in events if e.type == "call-decided"] == [False]


@pytest.mark.parametrize(
    ("edited", "locations"),
    [
        ({"account": "DE-right", "amount": "fifty"}, [("amount",)]),
        ({"account": "DE-right"}, [("amount",)]),
        ({"account": "DE-right", "amount": 50, "bcc": "mallory"}, [("bcc",)]),
        (["DE-right", 50], [()]),
    ],
    ids=["wrong type", "missing", "unknown parameter", "not an object"],
)
async def test_arguments_the_tool_cannot_take_are_refused_and_change_nothing(
    runtime_for: RuntimeFor, store: RunStore, edited: Any, locations: list[tuple[str, ...]]
) -> None:
    log = ToolLog()
    agent, spy = payout_agent(log)
    runtime_for(agent)
    suspended = await agent.generate("pay the customer")
    before = await stored_run(store, suspended.run_id)

    with pytest.raises(InvalidToolArgs) as refused:
        await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1", edited_args=edited)

    assert isinstance(refused.value, InvalidResumeData)  # handled like any invalid decision data
    assert [tuple(e["loc"]) for e in refused.value.errors] == locations
    assert await stored_run(store, suspended.run_id) == before
    assert only_run(await agent.list_suspended_runs()).tool_calls[0].args == {
        "account": "DE-wrong",
        "amount": 500,
    }
    assert log.count == 0 and spy.calls == 1


async def test_a_suspended_call_has_no_arguments_to_edit(runtime_for: RuntimeFor) -> None:
    @tool
    def ask(ctx: ToolContext, question: str) -> str:
        if ctx.resume_data is None:
            ctx.suspend({"question": question})
        return "ok"

    agent = Agent(
        "asker", model=ModelSpy(Call("ask", {"question": "why?"}, tool_call_id="call-q")).model, tools=[ask]
    )
    runtime_for(agent)
    suspended = await agent.generate("ask")

    with pytest.raises(InvalidResumeData):
        await agent.approve_tool_call(
            run_id=suspended.run_id, tool_call_id="call-q", edited_args={"question": "how?"}
        )


async def test_the_edit_is_kept_with_the_decision_until_the_other_calls_are_decided(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log = ToolLog()

    @tool(requires_approval=True)
    def pay_out(account: str, amount: int) -> str:
        log.record(account=account, amount=amount)
        return "paid"

    spy = ModelSpy(
        [
            Call("pay_out", {"account": "A", "amount": 10}, tool_call_id="call-a"),
            Call("pay_out", {"account": "B", "amount": 20}, tool_call_id="call-b"),
        ],
        Reply("Done."),
    )
    agent = Agent("payouts", model=spy.model, tools=[pay_out])
    runtime_for(agent)
    suspended = await agent.generate("pay both")

    await agent.approve_tool_call(
        run_id=suspended.run_id, tool_call_id="call-a", edited_args={"account": "A2", "amount": 11}
    )
    run = await stored_run(store, suspended.run_id)
    assert run is not None and run.calls[0].decision is not None
    assert run.calls[0].decision.edited_args == {"account": "A2", "amount": 11}
    assert run.calls[0].args == {"account": "A", "amount": 10}  # what the model asked for stays on record
    assert log.count == 0

    await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-b")).result()

    assert sorted(log.calls, key=lambda c: c["account"]) == [
        {"account": "A2", "amount": 11},
        {"account": "B", "amount": 20},
    ]


async def test_a_sub_agents_call_is_edited_through_its_supervisor(runtime_for: RuntimeFor) -> None:
    team = Team()
    runtime_for(team.desk)
    outer = await team.desk.generate("Customer wants a refund")

    stream = await team.desk.approve_tool_call(
        run_id=outer.run_id, tool_call_id="deleg-1", edited_args={"order_id": "A-1", "amount": 25}
    )
    result = await stream.result()

    assert result.status == "success"
    assert team.refunds.calls == [{"order_id": "A-1", "amount": 25}]

    with pytest.raises(InvalidToolArgs):
        again = await team.desk.generate("Another refund")
        await team.desk.approve_tool_call(
            run_id=again.run_id, tool_call_id="deleg-1", edited_args={"amount": -1}
        )


async def test_the_streamed_tool_call_shows_the_arguments_the_tool_ran_with_and_the_models(
    runtime_for: RuntimeFor,
) -> None:
    agent, _ = payout_agent(ToolLog())
    runtime_for(agent)
    suspended = await agent.generate("pay the customer")

    stream = await agent.approve_tool_call(
        run_id=suspended.run_id,
        tool_call_id="call-1",
        actor="alice",
        edited_args={"account": "DE-right", "amount": 50},
    )
    [call] = [chunk.payload for chunk in [c async for c in stream] if chunk.type == "tool-call"]

    # pydantic-ai reports the model's call; the chunk says what ran, who changed it, and what was asked.
    assert call == {
        "tool_call_id": "call-1",
        "tool_name": "pay_out",
        "args": {"account": "DE-right", "amount": 50},
        "model_args": {"account": "DE-wrong", "amount": 500},
        "edited_by": "alice",
    }


async def test_the_streamed_tool_call_of_a_plain_approval_is_the_models(runtime_for: RuntimeFor) -> None:
    agent, _ = payout_agent(ToolLog())
    runtime_for(agent)
    suspended = await agent.generate("pay the customer")

    stream = await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1", actor="alice")
    [call] = [chunk.payload for chunk in [c async for c in stream] if chunk.type == "tool-call"]

    assert call == {
        "tool_call_id": "call-1",
        "tool_name": "pay_out",
        "args": {"account": "DE-wrong", "amount": 500},
    }
