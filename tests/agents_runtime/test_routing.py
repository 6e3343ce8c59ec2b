"""Routing rules per tool, on every store: ``allow`` runs the call without a reviewer, ``deny`` declines
it at once (the model told which rule), ``two`` asks two different reviewers, ``one`` is the default;
the first rule that matches routes the call, and a rule that cannot be evaluated leaves it to a person."""

from __future__ import annotations

from typing import Any

import pytest

from agents_runtime import (
    Agent,
    Call,
    DuplicateVote,
    InvalidRule,
    Reply,
    RuleNotFound,
    RunEvent,
    RunResult,
    RunStore,
    tool,
)
from tests.support.runtime_helpers import ModelSpy, ToolLog, off_loop, only_run

from .conftest import RuntimeFor


def refund_agent(log: ToolLog, *, approvals: int = 1, risky: bool = False) -> tuple[Agent, ModelSpy]:
    @tool(requires_approval=True, approvals=approvals, risky={"amount_cents": [666]} if risky else None)
    def refund(amount_cents: int, environment: str = "staging") -> str:
        log.record(amount_cents=amount_cents, environment=environment)
        return f"refunded {amount_cents}"

    def model_step(ctx: Any) -> Any:
        if ctx.step == 0:
            return Call("refund", {"amount_cents": int(ctx.prompt)}, tool_call_id="call-1")
        return Reply("Done.")

    spy = ModelSpy(model_step, model_step)
    return Agent("support", model=spy.model, tools=[refund]), spy


async def rule(agent: Agent, route: str, condition: str = "", **terms: Any) -> int:
    made = await agent.add_rule(
        agent.rule_request("refund", route=route, created_by="rita", condition=condition, **terms)
    )
    return made.id


async def approve(agent: Agent, run_id: str, actor: str) -> RunResult:
    stream = await agent.approve_tool_call(run_id=run_id, tool_call_id="call-1", actor=actor)
    result: RunResult = await stream.result()
    return result


async def test_an_allow_rule_runs_the_call_without_a_reviewer_and_says_which_rule(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()
    agent, _ = refund_agent(log)
    events: list[RunEvent] = []
    runtime_for(agent).add_listener(events.append)
    rule_id = await rule(agent, "allow", "amount_cents < 500")

    result = await agent.generate("300")

    assert result.status == "success" and log.calls == [{"amount_cents": 300, "environment": "staging"}]
    decided = [(e.action, e.actor) for e in events if e.type == "call-decided"]
    assert decided == [("approve", f"rule #{rule_id} of rita")]
    assert not [e for e in events if e.type == "run-suspended"]


async def test_a_call_no_rule_matches_waits_as_the_tool_says(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = refund_agent(log)
    runtime_for(agent)
    await rule(agent, "allow", "amount_cents < 500")

    result = await agent.generate("900")

    assert result.status == "suspended" and log.calls == []


async def test_a_deny_rule_declines_at_once_and_the_model_is_told_the_rule(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = refund_agent(log)
    runtime_for(agent)
    rule_id = await rule(agent, "deny", "amount_cents > 100000", reason="Refunds over $1000 go to finance")

    result = await agent.generate("250000")

    assert result.status == "success" and log.calls == []
    said = f"Declined by rule #{rule_id} of rita: Refunds over $1000 go to finance"
    assert spy.tool_results() == {"call-1": said}
    assert (await agent.list_suspended_runs()).total == 0


async def test_a_two_rule_on_matching_arguments_asks_two_people(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = refund_agent(log)
    runtime_for(agent)
    await rule(agent, "two", "amount_cents >= 1000")

    suspended = await agent.generate("5000")
    first = await approve(agent, suspended.run_id, "alice")

    assert first.status == "suspended" and log.calls == []
    listed = only_run(await agent.list_suspended_runs())
    assert listed.run_id == suspended.run_id
    with pytest.raises(DuplicateVote):
        await approve(agent, suspended.run_id, "alice")
    second = await approve(agent, suspended.run_id, "bob")
    assert second.status == "success" and log.calls == [{"amount_cents": 5000, "environment": "staging"}]


async def test_the_first_matching_rule_wins(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = refund_agent(log)
    runtime_for(agent)
    deny_id = await rule(agent, "deny", "amount_cents > 1000", reason="Too much")
    await rule(agent, "allow")  # everything else

    small = await agent.generate("500")
    large = await agent.generate("5000")

    assert small.status == "success" and log.calls == [{"amount_cents": 500, "environment": "staging"}]
    assert large.status == "success" and spy.tool_results()["call-1"].startswith(
        f"Declined by rule #{deny_id}"
    )

    # An allow placed first takes the large refund too.
    await rule(agent, "allow", "amount_cents == 5000", position=1)
    again = await agent.generate("5000")
    assert again.status == "success" and log.count == 2


async def test_a_rule_that_cannot_be_evaluated_leaves_the_call_to_a_person(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = refund_agent(log)
    runtime_for(agent)
    broken = await rule(agent, "deny", "amount_cents / 0 == 1")
    await rule(agent, "allow")  # would let it through, were the rule before it not broken

    result = await agent.generate("500")

    assert result.status == "suspended" and log.calls == []
    call = only_run(await agent.list_suspended_runs()).tool_calls[0]
    assert call.context is not None
    failures = [(f.grant, f.error) for f in call.context.rule_failures]
    assert len(failures) == 1 and failures[0][0] == f"rule #{broken} of rita"
    assert "division by zero" in failures[0][1]


async def test_a_rule_never_approves_a_risky_call(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = refund_agent(log, risky=True)
    runtime_for(agent)
    await rule(agent, "allow")

    assert (await agent.generate("666")).status == "suspended"
    assert (await agent.generate("5")).status == "success"
    assert log.calls == [{"amount_cents": 5, "environment": "staging"}]


async def test_rules_that_cannot_be_kept_are_refused(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = refund_agent(log, approvals=2)
    runtime_for(agent)

    with pytest.raises(InvalidRule, match="needs 2 approvals"):
        agent.rule_request("refund", route="allow", created_by="rita")
    with pytest.raises(InvalidRule, match="Unknown route"):
        agent.rule_request("refund", route="sometimes", created_by="rita")
    with pytest.raises(InvalidRule, match="no tool"):
        agent.rule_request("transfer", route="deny", created_by="rita")
    with pytest.raises(InvalidRule):
        agent.rule_request("refund", route="deny", created_by="rita", condition="amount_cents <")
    with pytest.raises(InvalidRule):
        agent.rule_request("refund", route="deny", created_by="rita", condition="currency == 'EUR'")
    assert await agent.routing_rules() == []


async def test_rules_are_ordered_changed_and_deleted(runtime_for: RuntimeFor, store: RunStore) -> None:
    log = ToolLog()
    agent, _ = refund_agent(log)
    runtime_for(agent)
    first = await rule(agent, "deny", "amount_cents > 10")
    second = await rule(agent, "allow", position=1)

    assert [(r.id, r.position) for r in await agent.routing_rules()] == [(second, 1), (first, 2)]
    changed = await agent.change_rule(
        second, agent.rule_request("refund", route="two", created_by="sam", condition="", position=2)
    )
    assert changed.route == "two" and changed.changed_by == "sam" and changed.created_by == "rita"
    assert [r.id for r in await agent.routing_rules()] == [first, second]
    await agent.delete_rule(first, actor="sam")
    assert [(r.id, r.position) for r in await agent.routing_rules()] == [(second, 1)]
    with pytest.raises(RuleNotFound):
        await agent.delete_rule(first, actor="sam")
    assert await off_loop(lambda: store.get_rule(first)) is None  # type: ignore[attr-defined]
