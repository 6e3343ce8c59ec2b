"""Deadlines: a call nobody answers in time is declined, approved or escalated, exactly once."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents_runtime import Agent, Call, Reply, RunResult, RunStore, Runtime, tool
from agents_runtime.events import RunEvent
from agents_runtime.store import Deadline, Decision
from tests.support.runtime_helpers import ModelSpy, ToolLog, off_loop, only_run, stored_run

from .conftest import MakeStore, RuntimeFor

RACERS = 8
LATER = timedelta(minutes=6)


def deadline_agent(
    log: ToolLog, *steps: Any, agent_id: str = "support", **deadline: Any
) -> tuple[Agent, ModelSpy]:
    @tool(requires_approval=True, **deadline)
    def refund(amount: int) -> str:
        log.record(amount=amount)
        return f"refunded {amount}"

    spy = ModelSpy(*(steps or (Call("refund", {"amount": 50}, tool_call_id="call-1"), Reply("Done."))))
    return Agent(agent_id, model=spy.model, tools=[refund]), spy


def soon(delta: timedelta = LATER) -> datetime:
    return datetime.now(UTC) + delta


async def test_a_call_gets_its_tools_deadline_and_can_be_listed_by_it(runtime_for: RuntimeFor) -> None:
    agent, _spy = deadline_agent(ToolLog(), expires_after=timedelta(minutes=5))
    runtime_for(agent)
    before = datetime.now(UTC)
    await agent.generate("refund")

    call = only_run(await agent.list_suspended_runs()).tool_calls[0]
    assert call.expires_at is not None and call.on_expiry == "decline"
    assert before + timedelta(minutes=5) <= call.expires_at <= datetime.now(UTC) + timedelta(minutes=5)
    assert (await agent.list_suspended_runs(expiring_before=soon())).total == 1
    assert (await agent.list_suspended_runs(expiring_before=soon(timedelta(minutes=4)))).total == 0


async def test_nothing_expires_before_its_deadline_nor_without_one(runtime_for: RuntimeFor) -> None:
    timed, _ = deadline_agent(ToolLog(), expires_after=timedelta(minutes=5))
    untimed_log = ToolLog()
    untimed, _ = deadline_agent(untimed_log, agent_id="untimed")
    runtime = runtime_for(timed, untimed)
    await timed.generate("refund")
    await untimed.generate("refund")

    assert await runtime.expire_due(soon(timedelta(minutes=4))) == 0
    assert await runtime.expire_due(soon(timedelta(days=365))) == 1
    assert (await timed.list_suspended_runs()).total == 0
    waiting = only_run(await untimed.list_suspended_runs()).tool_calls[0]
    assert waiting.expires_at is None and waiting.on_expiry is None


async def test_expiry_declines_and_tells_the_model_nobody_answered(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = deadline_agent(log, expires_after=timedelta(minutes=5))
    runtime = runtime_for(agent)
    events: list[RunEvent] = []
    runtime.add_listener(events.append)
    suspended = await agent.generate("refund")

    assert await agent.expire_overdue(soon()) == 1

    assert log.calls == []
    assert spy.tool_results()["call-1"] == "No reviewer answered within 5 minutes"
    decided = [e for e in events if e.type == "call-decided"]
    assert [(e.action, e.actor) for e in decided] == [("expire", None)]
    assert events[-1].type == "run-completed" and events[-1].run_id == suspended.run_id


async def test_on_expiry_approve_runs_the_tool_once(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _spy = deadline_agent(log, expires_after=timedelta(minutes=5), on_expiry="approve")
    runtime = runtime_for(agent)
    await agent.generate("refund")

    assert await runtime.expire_due(soon()) == 1
    assert await runtime.expire_due(soon(timedelta(hours=1))) == 0
    assert log.calls == [{"amount": 50}]


async def test_on_expiry_approve_declines_a_call_that_needs_several_approvals(
    runtime_for: RuntimeFor,
) -> None:
    """Nobody answering is nobody's approval: a tool asking two reviewers never runs on a deadline."""
    log = ToolLog()
    agent, spy = deadline_agent(log, expires_after=timedelta(minutes=5), on_expiry="approve", approvals=2)
    runtime = runtime_for(agent)
    suspended = await agent.generate("refund")
    await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1", actor="ann")

    assert await runtime.expire_due(soon()) == 1

    assert log.calls == []
    assert spy.tool_results()["call-1"].startswith("No reviewer answered within 5 minutes")
    assert (await agent.list_suspended_runs()).total == 0


async def test_escalation_moves_the_call_to_another_group_with_a_new_deadline(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()
    agent, spy = deadline_agent(
        log,
        expires_after=timedelta(minutes=5),
        on_expiry="escalate",
        escalate_to="leads",
        escalation_expires_after=timedelta(hours=1),
    )
    runtime = runtime_for(agent)
    events: list[RunEvent] = []
    runtime.add_listener(events.append)
    await agent.generate("refund")
    assert (await agent.list_suspended_runs(escalated_to=["leads"])).total == 0

    assert await runtime.expire_due(soon()) == 1
    call = only_run(await agent.list_suspended_runs()).tool_calls[0]
    assert call.escalated_to == "leads"
    assert call.expires_at is not None and call.expires_at > soon(timedelta(minutes=55))
    assert (await agent.list_suspended_runs(escalated_to=["leads"])).total == 1
    assert (await agent.list_suspended_runs(escalated_to=["others"])).total == 0
    assert [e.type for e in events][-1] == "call-escalated"
    assert spy.calls == 1  # still waiting: the model was not told anything

    assert await runtime.expire_due(soon(timedelta(minutes=30))) == 0
    assert await runtime.expire_due(soon(timedelta(hours=2))) == 1
    assert log.calls == []
    assert spy.tool_results()["call-1"].startswith("No reviewer answered within 1 hour")


async def test_an_extended_deadline_is_honoured(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, _ = deadline_agent(log, expires_after=timedelta(minutes=5))
    runtime = runtime_for(agent)
    suspended = await agent.generate("refund")
    first = only_run(await agent.list_suspended_runs()).tool_calls[0].expires_at
    assert first is not None

    new = await agent.extend_deadline(
        run_id=suspended.run_id, tool_call_id="call-1", by=timedelta(minutes=10), reason="Asked finance"
    )

    assert new == first + timedelta(minutes=10)
    assert await runtime.expire_due(soon()) == 0
    assert only_run(await agent.list_suspended_runs()).tool_calls[0].expires_at == new
    assert await runtime.expire_due(soon(timedelta(minutes=16))) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"by": timedelta(minutes=10), "reason": "  "},
        {"until": datetime(2000, 1, 1, tzinfo=UTC), "reason": "earlier"},
        {"reason": "neither until nor by"},
        {"by": timedelta(minutes=-1), "reason": "negative"},
    ],
)
async def test_a_bad_extension_is_refused_and_changes_nothing(
    runtime_for: RuntimeFor, change: dict[str, Any]
) -> None:
    agent, _ = deadline_agent(ToolLog(), expires_after=timedelta(minutes=5))
    runtime_for(agent)
    suspended = await agent.generate("refund")
    before = only_run(await agent.list_suspended_runs()).tool_calls[0].expires_at

    with pytest.raises(ValueError):
        await agent.extend_deadline(run_id=suspended.run_id, tool_call_id="call-1", **change)

    assert only_run(await agent.list_suspended_runs()).tool_calls[0].expires_at == before


async def test_a_runs_own_deadline_overrides_the_tools_and_lasts_into_its_continuations(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()
    agent, _ = deadline_agent(
        log,
        Call("refund", {"amount": 1}, tool_call_id="call-1"),
        Call("refund", {"amount": 2}, tool_call_id="call-2"),
        Reply("Done."),
    )
    runtime = runtime_for(agent)
    suspended = await agent.generate("refund", deadline=Deadline(timedelta(minutes=1), on_expiry="approve"))
    assert only_run(await agent.list_suspended_runs()).tool_calls[0].on_expiry == "approve"

    await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")).result()
    second = only_run(await agent.list_suspended_runs()).tool_calls[0]
    assert second.tool_call_id == "call-2" and second.expires_at is not None

    assert await runtime.expire_due(soon(timedelta(minutes=2))) == 1
    assert log.calls == [{"amount": 1}, {"amount": 2}]


@pytest.mark.parametrize(
    "options",
    [
        {"expires_after": timedelta(0)},
        {"expires_after": timedelta(minutes=1), "on_expiry": "escalate"},
        {"expires_after": timedelta(minutes=1), "on_expiry": "later"},
        {"on_expiry": "approve"},
        {"expires_after": timedelta(minutes=1), "escalate_to": "leads"},
    ],
)
def test_tool_refuses_a_deadline_that_cannot_work(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        tool(requires_approval=True, **options)(lambda amount: amount)


async def test_after_a_restart_overdue_calls_expire_at_once(store: RunStore) -> None:
    first_log = ToolLog()
    agent, _ = deadline_agent(first_log, expires_after=timedelta(milliseconds=50))
    Runtime([agent], storage=store)
    await agent.generate("refund")
    await asyncio.sleep(0.1)

    # A new process: new agents, a new runtime, the same store.
    log = ToolLog()
    again, spy = deadline_agent(log, Reply("Done."), expires_after=timedelta(milliseconds=50))
    restarted = Runtime([again], storage=store)
    assert await restarted.expire_due() == 1
    assert (await again.list_suspended_runs()).total == 0
    assert log.calls == first_log.calls == []
    assert "No reviewer answered within" in spy.tool_results()["call-1"]


async def test_expiry_racing_approvals_from_threads_decides_once_and_runs_the_tool_once(
    store: RunStore,
) -> None:
    log = ToolLog()
    # "approve" on expiry: whichever wins, the tool must run exactly once.
    agent, _ = deadline_agent(log, expires_after=timedelta(minutes=5), on_expiry="approve")
    runtime = Runtime([agent], storage=store)
    suspended = await agent.generate("refund")
    barrier = threading.Barrier(RACERS)
    outcomes: list[Any] = []
    lock = threading.Lock()

    def racer(n: int) -> None:
        async def go() -> Any:
            barrier.wait()
            if n % 2:
                return await runtime.expire_due(soon())
            stream = await agent.approve_tool_call(
                run_id=suspended.run_id, tool_call_id="call-1", actor=f"reviewer-{n}"
            )
            return await stream.result()

        try:
            outcome: Any = asyncio.run(go())
        except Exception as error:
            outcome = error
        with lock:
            outcomes.append(outcome)

    def race() -> None:
        threads = [threading.Thread(target=racer, args=(n,)) for n in range(RACERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

    await asyncio.to_thread(race)

    approvals = [o for o in outcomes if isinstance(o, RunResult)]
    expiries = sum(o for o in outcomes if isinstance(o, int))
    assert len(outcomes) == RACERS
    assert len(approvals) + expiries == 1, outcomes
    assert log.calls == [{"amount": 50}]
    assert await stored_run(store, suspended.run_id) is None


async def test_runs_can_be_listed_by_deadline_soonest_first(runtime_for: RuntimeFor) -> None:
    agent, _ = deadline_agent(ToolLog(), Call("refund", {"amount": 1}), Reply("Done."))
    runtime_for(agent)
    late = await agent.generate("refund", deadline=timedelta(hours=2))
    none = await agent.generate("refund")
    soon_ = await agent.generate("refund", deadline=timedelta(minutes=10))
    middle = await agent.generate("refund", deadline=timedelta(hours=1))

    listed = await agent.list_suspended_runs(order="deadline")
    paged = await agent.list_suspended_runs(order="deadline", per_page=2, page=1)

    order = [soon_.run_id, middle.run_id, late.run_id, none.run_id]
    assert [r.run_id for r in listed.runs] == order
    assert [r.run_id for r in paged.runs] == order[2:]
    due = await agent.list_suspended_runs(expiring_before=soon(timedelta(minutes=90)), order="deadline")
    assert [r.run_id for r in due.runs] == order[:2]


async def test_an_expiry_never_runs_again_a_tool_that_may_have_run(make_store: MakeStore) -> None:
    lease = timedelta(milliseconds=300)
    store = make_store(lease=lease)
    log = ToolLog()
    agent, spy = deadline_agent(log, expires_after=timedelta(minutes=5), on_expiry="approve")
    runtime = Runtime([agent], storage=store)
    suspended = await agent.generate("refund")
    # A process approves, claims, marks the tool started and dies.
    receipt = await off_loop(
        lambda: store.record_decision(
            agent_id="support",
            run_id=suspended.run_id,
            tool_call_id="call-1",
            decision=Decision(action="approve", decided_at=datetime.now(UTC), actor="ghost"),
        )
    )
    assert receipt.claimed_version is not None
    version = receipt.claimed_version
    assert await off_loop(lambda: store.start_continuation(suspended.run_id, version=version))
    assert await off_loop(lambda: store.mark_tool_started(suspended.run_id, "call-1", version=version))
    await asyncio.sleep(lease.total_seconds() * 1.5)
    assert only_run(await agent.list_suspended_runs()).tool_calls[0].tool_started_at is not None

    assert await runtime.expire_due(soon()) == 1

    assert log.calls == []
    assert spy.tool_results()["call-1"].startswith("No reviewer answered within")
