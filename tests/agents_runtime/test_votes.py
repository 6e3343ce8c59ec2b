"""Two-person approval (``tool(approvals=N)``) and separation of duties (``separate_duties=True``),
on every store: votes are counted, refused and raced inside the store's atomic decide step."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agents_runtime import (
    Agent,
    Call,
    DecisionRefused,
    DuplicateVote,
    Reply,
    RunAlreadyDecided,
    RunNotFound,
    RunResult,
    RunStore,
    SelfApprovalRefused,
    ToolCallNotSuspended,
    tool,
)
from tests.support.runtime_helpers import ModelSpy, ToolLog, only_run, stored_run

from .conftest import RuntimeFor

RACERS = 8


def payout_agent(
    log: ToolLog, *, approvals: int = 2, separate_duties: bool = False
) -> tuple[Agent, ModelSpy]:
    @tool(requires_approval=True, approvals=approvals, separate_duties=separate_duties)
    def payout(amount: int) -> str:
        log.record(amount=amount)
        return f"paid {amount}"

    spy = ModelSpy(Call("payout", {"amount": 900}, tool_call_id="call-1"), Reply("Paid."))
    return Agent("treasury", model=spy.model, tools=[payout]), spy


async def approve(agent: Agent, run_id: str, actor: str | None, **kwargs: Any) -> RunResult:
    stream = await agent.approve_tool_call(run_id=run_id, tool_call_id="call-1", actor=actor, **kwargs)
    result: RunResult = await stream.result()
    return result


async def test_a_call_needing_two_approvals_runs_after_the_second_reviewer_only(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()
    agent, spy = payout_agent(log)
    runtime_for(agent)
    suspended = await agent.generate("pay")

    first = await approve(agent, suspended.run_id, "alice")

    assert first.status == "suspended"
    assert first.approvals is not None and str(first.approvals) == "1 of 2 approvals"
    assert first.approvals.approved_by == ("alice",)
    assert log.calls == [] and spy.calls == 1
    waiting = only_run(await agent.list_suspended_runs())
    assert waiting.tool_calls[0].approved_by == ("alice",)

    second = await approve(agent, suspended.run_id, "bob")

    assert second.status == "success" and second.text == "Paid."
    assert log.calls == [{"amount": 900}]


async def test_a_second_approval_by_the_same_reviewer_is_refused_and_changes_nothing(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log = ToolLog()
    agent, _ = payout_agent(log)
    runtime_for(agent)
    suspended = await agent.generate("pay")
    await approve(agent, suspended.run_id, "alice")
    before = await stored_run(store, suspended.run_id)

    with pytest.raises(DuplicateVote, match="alice already approved this call"):
        await approve(agent, suspended.run_id, "alice")

    after = await stored_run(store, suspended.run_id)
    assert after is not None and before is not None
    assert after.version == before.version
    assert [v.actor for v in after.calls[0].votes] == ["alice"]
    assert log.calls == []
    assert (await approve(agent, suspended.run_id, "bob")).status == "success"
    assert log.count == 1


async def test_a_decline_after_one_approval_declines_at_once(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = payout_agent(log)
    runtime_for(agent)
    suspended = await agent.generate("pay")
    await approve(agent, suspended.run_id, "alice")

    stream = await agent.decline_tool_call(
        run_id=suspended.run_id, tool_call_id="call-1", reason="Not this month", actor="bob"
    )
    result = await stream.result()

    assert result.status == "success"
    assert log.calls == []
    assert spy.tool_results()["call-1"] == "Not this month"


async def test_votes_need_named_reviewers(runtime_for: RuntimeFor) -> None:
    agent, _ = payout_agent(ToolLog())
    runtime_for(agent)
    suspended = await agent.generate("pay")

    with pytest.raises(DecisionRefused, match="must name its reviewer"):
        await approve(agent, suspended.run_id, None)

    assert only_run(await agent.list_suspended_runs()).tool_calls[0].approved_by == ()


async def test_approving_other_arguments_starts_the_votes_over(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = payout_agent(log)
    runtime_for(agent)
    suspended = await agent.generate("pay")
    await approve(agent, suspended.run_id, "alice")

    edited = await approve(agent, suspended.run_id, "bob", edited_args={"amount": 500})

    # Alice approved 900, not 500: Bob's vote replaces hers and the call needs a second approval.
    assert edited.status == "suspended" and edited.approvals is not None
    assert edited.approvals.approved_by == ("bob",)
    assert log.calls == []
    done = await approve(agent, suspended.run_id, "carol", edited_args={"amount": 500})
    assert done.status == "success"
    assert log.calls == [{"amount": 500}]


async def test_the_person_who_started_the_run_cannot_approve_its_calls(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log = ToolLog()
    agent, _ = payout_agent(log, approvals=1, separate_duties=True)
    runtime_for(agent)
    suspended = await agent.generate("pay", started_by="alice")
    assert only_run(await agent.list_suspended_runs()).started_by == "alice"
    before = await stored_run(store, suspended.run_id)

    with pytest.raises(SelfApprovalRefused, match=r"alice started run .* may not approve"):
        await approve(agent, suspended.run_id, "alice")
    with pytest.raises(SelfApprovalRefused, match="must name its reviewer"):
        await approve(agent, suspended.run_id, None)

    after = await stored_run(store, suspended.run_id)
    assert after is not None and before is not None and after.version == before.version
    assert log.calls == []
    # Anyone else may.
    assert (await approve(agent, suspended.run_id, "bob")).status == "success"
    assert log.count == 1


async def test_tools_without_the_options_let_the_starter_approve_alone(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = payout_agent(log, approvals=1)
    runtime_for(agent)
    suspended = await agent.generate("pay", started_by="alice")

    assert (await approve(agent, suspended.run_id, "alice")).status == "success"
    assert log.count == 1


def test_approval_options_are_checked_when_the_tool_is_built() -> None:
    def pay(amount: int) -> str:
        return "paid"

    with pytest.raises(ValueError, match="approvals must be an int >= 1"):
        tool(requires_approval=True, approvals=0)(pay)
    with pytest.raises(ValueError, match="need requires_approval"):
        tool(approvals=2)(pay)
    with pytest.raises(ValueError, match="need requires_approval"):
        tool(separate_duties=True)(pay)


async def test_racing_votes_from_threads_end_in_one_continuation_and_the_tool_runs_once(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log = ToolLog()
    agent, spy = payout_agent(log, approvals=3)
    runtime_for(agent)
    suspended = await agent.generate("pay")
    barrier = threading.Barrier(RACERS)
    outcomes: list[Any] = []
    outcomes_lock = threading.Lock()

    def racer(n: int) -> None:
        async def vote() -> RunResult:
            barrier.wait()
            return await approve(agent, suspended.run_id, f"reviewer-{n}")

        try:
            outcome: Any = asyncio.run(vote())
        except Exception as error:
            outcome = error
        with outcomes_lock:
            outcomes.append(outcome)

    def race() -> None:
        threads = [threading.Thread(target=racer, args=(n,)) for n in range(RACERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

    await asyncio.to_thread(race)

    results = [o for o in outcomes if isinstance(o, RunResult)]
    votes = [r for r in results if r.status == "suspended"]
    finished = [r for r in results if r.status == "success"]
    losers = [o for o in outcomes if not isinstance(o, RunResult)]
    assert len(finished) == 1, outcomes
    assert sorted(str(v.approvals) for v in votes) == ["1 of 3 approvals", "2 of 3 approvals"], outcomes
    assert all(isinstance(o, RunAlreadyDecided | ToolCallNotSuspended | RunNotFound) for o in losers), losers
    assert len(losers) == RACERS - 3
    assert log.calls == [{"amount": 900}]
    assert spy.calls == 2
    assert await stored_run(store, suspended.run_id) is None
