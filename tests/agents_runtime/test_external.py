"""External agents (``agents_runtime.external``), on every store: a request parks one call through the
suspension path of any run, is decided through ``Agent.decide`` and its rules, and its run ends with
the decision handed over (nothing runs here); the agent that asked may only cancel, and a cancel and
a decision race to one winner."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents_runtime import (
    DecisionRequest,
    ExternalAgent,
    ExternalCall,
    InvalidExternalCall,
    InvalidToolArgs,
    NotTheRequester,
    Origin,
    RiskyNotConfirmed,
    RunAlreadyDecided,
    RunEvent,
    RunStore,
    ToolRules,
)
from agents_runtime.store import Deadline, DecisionAction
from tests.support.runtime_helpers import stored_run

from .conftest import RuntimeFor

SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "amount": {"type": "integer", "maximum": 100}},
    "required": ["to", "amount"],
    "additionalProperties": False,
}


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def payer(**rules: ToolRules) -> ExternalAgent:
    return ExternalAgent("payer", name="Payments (elsewhere)", tools=rules)


def pay(**changes: Any) -> ExternalCall:
    values: dict[str, Any] = {
        "tool_name": "pay",
        "args": {"to": "ann", "amount": 40},
        "args_schema": SCHEMA,
        "title": "Pay ann 40",
    }
    values.update(changes)
    return ExternalCall(**values)


def events_of(runtime: Any) -> list[RunEvent]:
    seen: list[RunEvent] = []
    runtime.add_listener(seen.append)
    return seen


async def test_a_request_parks_one_call_and_its_decision_is_handed_over(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    agent = payer()
    runtime = runtime_for(agent)
    seen = events_of(runtime)
    parked = await agent.request_approval(pay(thread_id="t-1"), run_id="req-1")
    assert parked.status == "suspended"
    (call,) = parked.tool_calls
    assert (call.tool_name, call.args, call.requires_approval) == ("pay", {"to": "ann", "amount": 40}, True)
    assert (
        call.context is not None and call.context.title == "Pay ann 40" and call.context.args_schema == SCHEMA
    )
    assert [e.type for e in seen] == ["run-suspended"]
    listed = await agent.list_suspended_runs()
    assert [r.run_id for r in listed.runs] == ["req-1"] and listed.runs[0].thread_id == "t-1"

    decided = await agent.decide(
        DecisionRequest(
            "req-1",
            call.tool_call_id,
            DecisionAction.APPROVE,
            actor="rita",
            edited_args={"to": "ann", "amount": 30},
        )
    )
    result = await decided.stream.result()
    assert result.status == "success" and "Approved with edits" in (result.text or "")
    assert await stored_run(store, "req-1") is None  # ended: nothing waits, nothing ran here
    assert [e.type for e in seen][1:] == ["call-decided", "run-completed"]


async def test_edits_are_checked_against_the_request_schema(runtime_for: RuntimeFor) -> None:
    agent = payer()
    runtime_for(agent)
    await agent.request_approval(pay(), run_id="req-2")
    for bad in ({"to": "ann", "amount": 500}, {"to": "ann"}, {"to": "ann", "amount": 1, "extra": 1}):
        with pytest.raises(InvalidToolArgs):
            await agent.approve_tool_call(run_id="req-2", tool_call_id="request", edited_args=bad)
    assert (await agent.get_suspended_run("req-2")).tool_calls[0].args == {"to": "ann", "amount": 40}


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"args": {"to": "ann", "amount": 1000}}, "args"),
        ({"args": {"to": "a\x00b", "amount": 1}}, "args"),
        ({"args": {"blob": "x" * 100_000}, "args_schema": None}, "args"),
        ({"args_schema": {"type": "nope"}}, "argsSchema"),
        ({"args_schema": {"$ref": "#"}}, "argsSchema"),
        ({"args_schema": {"type": "object", "default": {}, "examples": [nested(40)]}}, "argsSchema"),
        ({"tool_name": "bad name\x00"}, "tool"),
        ({"title": "t" * 201}, "title"),
        ({"thread_id": "\ud800"}, "threadId"),
        ({"deadline": Deadline(timedelta(hours=1), on_expiry="escalate", escalate_to="ops")}, "deadline"),
    ],
)
async def test_a_request_that_cannot_be_taken_stores_nothing(
    runtime_for: RuntimeFor, changes: dict[str, Any], where: str
) -> None:
    agent = payer()
    runtime_for(agent)
    with pytest.raises(InvalidExternalCall) as refused:
        await agent.request_approval(pay(**changes), run_id="req-bad")
    assert refused.value.errors[0]["loc"][0] == where
    assert (await agent.list_suspended_runs()).total == 0


async def test_only_the_requester_cancels_and_it_may_do_nothing_else(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    agent = payer()
    runtime_for(agent)
    await agent.request_approval(pay(), run_id="req-3")
    with pytest.raises(NotTheRequester):
        await agent.decide(
            DecisionRequest("req-3", "request", DecisionAction.CANCEL, actor="rita", origin=Origin.DASHBOARD)
        )
    with pytest.raises(NotTheRequester):
        await agent.decide(
            DecisionRequest("req-3", "request", DecisionAction.APPROVE, origin=Origin.REQUESTER)
        )
    cancelled = await agent.decide(
        DecisionRequest(
            "req-3",
            "request",
            DecisionAction.CANCEL,
            actor="payer",
            origin=Origin.REQUESTER,
            reason="not needed",
        )
    )
    ended = await cancelled.stream.result()
    assert ended.status == "success" and "cancelled: not needed" in (ended.text or "")
    assert await stored_run(store, "req-3") is None


async def test_a_cancel_and_a_decision_have_one_winner(runtime_for: RuntimeFor) -> None:
    agent = payer()
    runtime_for(agent)
    for round_ in range(4):
        run_id = f"race-{round_}"
        await agent.request_approval(pay(), run_id=run_id)
        cancel = DecisionRequest(
            run_id, "request", DecisionAction.CANCEL, origin=Origin.REQUESTER, actor="payer"
        )
        approve = DecisionRequest(run_id, "request", DecisionAction.APPROVE, actor="rita")
        outcomes = await asyncio.gather(agent.decide(cancel), agent.decide(approve), return_exceptions=True)
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        lost = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], RunAlreadyDecided), outcomes
        await won[0].stream.result()


async def test_rules_registered_for_a_tool_apply(runtime_for: RuntimeFor) -> None:
    agent = payer(pay=ToolRules(risky={"to": ("mallory",)}))
    runtime_for(agent)
    await agent.request_approval(pay(args={"to": "mallory", "amount": 1}), run_id="req-4")
    with pytest.raises(RiskyNotConfirmed):
        await agent.decide(
            DecisionRequest("req-4", "request", DecisionAction.APPROVE, actor="rita", origin=Origin.API)
        )


async def test_a_standing_grant_approves_a_request_as_it_parks(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    agent = payer()
    runtime_for(agent)
    await agent.add_grant(
        agent.grant_request(
            "pay", scope="everyone", created_by="rita", expires_at=datetime.now(UTC) + timedelta(hours=1)
        )
    )
    result = await agent.request_approval(pay(), run_id="req-5")
    assert result.status == "success"
    assert await stored_run(store, "req-5") is None


async def test_a_deadline_decides_a_request(runtime_for: RuntimeFor) -> None:
    agent = payer()
    runtime_for(agent)
    await agent.request_approval(
        pay(deadline=Deadline(timedelta(seconds=30), on_expiry="approve")), run_id="req-6"
    )
    (call,) = (await agent.get_suspended_run("req-6")).tool_calls
    assert call.expires_at is not None and call.on_expiry == "approve"
    assert await agent.expire_overdue(datetime.now(UTC) + timedelta(minutes=1)) == 1
    assert (await agent.list_suspended_runs()).total == 0


async def test_an_external_agent_cannot_be_run() -> None:
    from agents_runtime.external import ExternalAgentError

    with pytest.raises(ExternalAgentError):
        await payer().stream("hello")
