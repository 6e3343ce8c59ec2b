"""Exactly once: racing decisions have one winner, and a claim that dies is given back after its lease."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents_runtime import (
    Agent,
    Call,
    Continuation,
    Reply,
    RerunNotConfirmed,
    RunAlreadyDecided,
    RunEvent,
    RunNotFound,
    RunResult,
    RunStore,
    Runtime,
    ToolCallNotSuspended,
    ToolContext,
    tool,
)
from agents_runtime.store import Decision
from tests.support.runtime_helpers import ModelSpy, Team, ToolLog, off_loop, only_run, stored_run

from .conftest import MakeStore, RuntimeFor

RACERS = 8
LOSING_ERRORS = (RunAlreadyDecided, ToolCallNotSuspended, RunNotFound)
# A second: short enough to run out within a test, long enough that a continuation's heartbeat (a
# third of it) is not late on a busy machine (CI runs the suite in three processes on two cores).
LEASE = timedelta(seconds=1)


def refund_agent(log: ToolLog) -> tuple[Agent, ModelSpy]:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        log.record(amount=amount)
        return f"refunded {amount}"

    spy = ModelSpy(Call("refund", {"amount": 50}, tool_call_id="call-1"), Reply("Refunded."))
    return Agent("support", model=spy.model, tools=[refund]), spy


def assert_one_winner(outcomes: list[Any]) -> RunResult:
    winners = [o for o in outcomes if isinstance(o, RunResult)]
    losers = [o for o in outcomes if not isinstance(o, RunResult)]
    assert len(winners) == 1, outcomes
    assert all(isinstance(o, LOSING_ERRORS) for o in losers), losers
    assert len(losers) == RACERS - 1
    return winners[0]


async def decide_and_wait(start: Callable[[], Awaitable[Any]]) -> RunResult:
    stream = await start()
    result: RunResult = await stream.result()
    return result


# -- racing decisions ------------------------------------------------------------------------------


async def test_concurrent_approvals_in_one_event_loop_have_exactly_one_winner(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log = ToolLog()
    agent, spy = refund_agent(log)
    runtime_for(agent)
    suspended = await agent.generate("refund")

    outcomes = await asyncio.gather(
        *(
            decide_and_wait(lambda: agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1"))
            for _ in range(RACERS)
        ),
        return_exceptions=True,
    )

    winner = assert_one_winner(list(outcomes))
    assert winner.status == "success"
    assert log.calls == [{"amount": 50}]
    assert spy.calls == 2
    assert (await agent.list_suspended_runs()).total == 0
    assert await stored_run(store, suspended.run_id) is None


async def test_concurrent_approvals_from_threads_with_their_own_event_loops_have_exactly_one_winner(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log = ToolLog()
    agent, spy = refund_agent(log)
    runtime_for(agent)
    suspended = await agent.generate("refund")
    barrier = threading.Barrier(RACERS)
    outcomes: list[Any] = []
    outcomes_lock = threading.Lock()

    def racer(n: int) -> None:
        async def approve() -> RunResult:
            barrier.wait()
            return await decide_and_wait(
                lambda: agent.approve_tool_call(
                    run_id=suspended.run_id, tool_call_id="call-1", actor=f"reviewer-{n}"
                )
            )

        try:
            outcome: Any = asyncio.run(approve())
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

    # Off this test's event loop, which the racers do not use: each thread runs its own.
    await asyncio.to_thread(race)

    winner = assert_one_winner(outcomes)
    assert winner.status == "success"
    assert log.calls == [{"amount": 50}]
    assert spy.calls == 2
    assert await stored_run(store, suspended.run_id) is None


async def test_racing_approvals_and_declines_let_exactly_one_decision_through(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()
    agent, spy = refund_agent(log)
    runtime_for(agent)
    suspended = await agent.generate("refund")

    def attempt(n: int) -> Callable[[], Awaitable[Any]]:
        if n % 2:
            return lambda: agent.decline_tool_call(
                run_id=suspended.run_id, tool_call_id="call-1", reason="no"
            )
        return lambda: agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")

    outcomes = await asyncio.gather(
        *(decide_and_wait(attempt(n)) for n in range(RACERS)), return_exceptions=True
    )

    assert_one_winner(list(outcomes))
    assert spy.calls == 2
    # Approved: the tool ran once; declined: never, and the model heard the reason instead.
    assert (log.count, spy.tool_results()["call-1"]) in [(1, "refunded 50"), (0, "no")]


async def test_concurrent_resumes_run_the_tool_once(runtime_for: RuntimeFor) -> None:
    executions: list[Any] = []
    lock = threading.Lock()

    @tool
    def ask(ctx: ToolContext) -> str:
        with lock:
            executions.append(ctx.resume_data)
        if ctx.resume_data is None:
            ctx.suspend({"question": "Which?"})
        return f"answer {ctx.resume_data['n']}"

    agent = Agent(
        "support", model=ModelSpy(Call("ask", {}, tool_call_id="call-1"), Reply("ok")).model, tools=[ask]
    )
    runtime_for(agent)
    suspended = await agent.generate("ask")

    def attempt(n: int) -> Callable[[], Awaitable[Any]]:
        return lambda: agent.resume_stream({"n": n}, run_id=suspended.run_id)

    outcomes = await asyncio.gather(
        *(decide_and_wait(attempt(n)) for n in range(RACERS)), return_exceptions=True
    )

    assert_one_winner(list(outcomes))
    assert executions[0] is None
    assert len(executions) == 2


async def test_concurrent_approvals_through_a_supervisor_run_the_inner_tool_once(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    team = Team(Call("refund", {"order_id": "A-1", "amount": 30}, tool_call_id="inner-1"), Reply("Refunded."))
    runtime_for(team.desk)
    outer = await team.desk.generate("Customer wants a refund")

    outcomes = await asyncio.gather(
        *(
            decide_and_wait(lambda: team.desk.approve_tool_call(run_id=outer.run_id, tool_call_id="deleg-1"))
            for _ in range(RACERS)
        ),
        return_exceptions=True,
    )

    assert assert_one_winner(list(outcomes)).status == "success"
    assert team.refunds.calls == [{"order_id": "A-1", "amount": 30}]
    assert (team.inner.calls, team.outer.calls) == (2, 2)
    assert (await team.billing.list_suspended_runs()).total == 0


# -- leases: a continuation that dies does not lose the run ----------------------------------------


async def test_live_continuation_keeps_its_claim_past_the_lease(make_store: MakeStore) -> None:
    store = make_store(lease=LEASE)
    log = ToolLog()
    started, release = asyncio.Event(), asyncio.Event()

    @tool(requires_approval=True)
    async def slow_refund(amount: int) -> str:
        log.record(amount=amount)
        started.set()
        await release.wait()
        return "refunded"

    agent = Agent(
        "support",
        model=ModelSpy(Call("slow_refund", {"amount": 5}, tool_call_id="call-1"), Reply("done")).model,
        tools=[slow_refund],
    )
    Runtime([agent], storage=store)
    suspended = await agent.generate("refund")

    stream = await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")
    await asyncio.wait_for(started.wait(), timeout=5)
    await asyncio.sleep(LEASE.total_seconds() * 2.5)
    listed_while_running = await agent.list_suspended_runs()
    release.set()
    result = await stream.result()

    assert listed_while_running.total == 0
    assert result.status == "success"
    assert log.count == 1
    assert await stored_run(store, suspended.run_id) is None


async def claim_and_die(store: RunStore, run_id: str) -> datetime:
    """What a process does that decides the last call (claiming the run), starts continuing it (taking
    the claim's lease) and dies."""
    decided_at = datetime.now(UTC)
    receipt = await off_loop(
        lambda: store.record_decision(
            agent_id="support",
            run_id=run_id,
            tool_call_id="call-1",
            decision=Decision(action="approve", decided_at=decided_at, actor="ghost"),
        )
    )
    version = receipt.claimed_version
    assert version is not None
    assert await off_loop(lambda: store.start_continuation(run_id, version=version))
    return decided_at


async def test_run_whose_continuation_died_is_listed_again_after_the_lease(make_store: MakeStore) -> None:
    store = make_store(lease=LEASE)
    log = ToolLog()
    agent, _ = refund_agent(log)
    Runtime([agent], storage=store)
    suspended = await agent.generate("refund", thread_id="t-1")
    listed_at_first = only_run(await agent.list_suspended_runs())
    await claim_and_die(store, suspended.run_id)

    listed_while_claimed = await agent.list_suspended_runs()
    with pytest.raises(RunAlreadyDecided):
        await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")
    await asyncio.sleep(LEASE.total_seconds() * 1.5)
    relisted = only_run(await agent.list_suspended_runs())

    assert listed_while_claimed.total == 0
    assert relisted.run_id == suspended.run_id
    assert relisted.interrupted is True
    assert listed_at_first.interrupted is False
    assert relisted.tool_calls == listed_at_first.tool_calls
    assert (relisted.thread_id, relisted.created_at) == ("t-1", listed_at_first.created_at)
    assert log.count == 0


async def test_a_claim_started_with_its_decision_is_given_back_after_the_lease(make_store: MakeStore) -> None:
    # A continuation that starts at once (the decider's stream, a scheduler running it now) gets its
    # lease with the decision: should its process die right then, the run comes back after the lease;
    # and no second continuation of that claim can start.
    store = make_store(lease=LEASE)
    log = ToolLog()
    agent, _ = refund_agent(log)
    Runtime([agent], storage=store)
    suspended = await agent.generate("refund", thread_id="t-1")
    approval = Decision(action="approve", decided_at=datetime.now(UTC), actor="ghost")

    receipt = await off_loop(
        lambda: store.decide(
            agent_id="support", run_id=suspended.run_id, rule=lambda _run: ("call-1", approval), start=True
        )
    )
    version = receipt.claimed_version
    assert version is not None
    second_start = await off_loop(lambda: store.start_continuation(suspended.run_id, version=version))
    listed_while_claimed = await agent.list_suspended_runs()
    await asyncio.sleep(LEASE.total_seconds() * 1.5)
    relisted = only_run(await agent.list_suspended_runs())

    assert second_start is False
    assert listed_while_claimed.total == 0
    assert (relisted.run_id, relisted.interrupted) == (suspended.run_id, True)
    assert log.count == 0


QUEUED = 40


async def test_approvals_queued_longer_than_the_lease_are_carried_out_not_offered_again(
    make_store: MakeStore,
) -> None:
    # Issue 32: a worker that falls behind by more than the lease turned approvals into "interrupted".
    lease = timedelta(seconds=2)  # long enough for each continuation to keep it on a loaded machine
    store = make_store(lease=lease)
    log = ToolLog()
    agent, _ = refund_agent(log)
    queue: list[Continuation] = []
    Runtime([agent], storage=store, scheduler=queue.append)
    runs = [await agent.generate(f"refund {i}") for i in range(QUEUED)]
    for run in runs:
        await (await agent.approve_tool_call(run_id=run.run_id, tool_call_id="call-1")).result()

    await asyncio.sleep(lease.total_seconds() * 1.5)  # the worker is that far behind
    listed_while_queued = await agent.list_suspended_runs()
    results = [await agent.continue_run(c.run_id, version=c.version).result() for c in queue]

    assert listed_while_queued.total == 0
    assert [r.status for r in results] == ["success"] * QUEUED
    assert log.count == QUEUED
    assert [await stored_run(store, run.run_id) for run in runs] == [None] * QUEUED


async def test_a_claim_delivered_twice_at_once_runs_its_tool_once(make_store: MakeStore) -> None:
    store = make_store(lease=LEASE)
    log = ToolLog()
    started, release = asyncio.Event(), asyncio.Event()

    @tool(requires_approval=True)
    async def refund(amount: int) -> str:
        log.record(amount=amount)
        started.set()
        await release.wait()
        return "refunded"

    spy = ModelSpy(Call("refund", {"amount": 5}, tool_call_id="call-1"), Reply("done"))
    agent = Agent("support", model=spy.model, tools=[refund])
    queue: list[Continuation] = []
    Runtime([agent], storage=store, scheduler=queue.append)
    run = await agent.generate("refund")
    await (await agent.approve_tool_call(run_id=run.run_id, tool_call_id="call-1")).result()
    (continuation,) = queue

    first = asyncio.ensure_future(agent.continue_run(run.run_id, version=continuation.version).result())
    await asyncio.wait_for(started.wait(), timeout=5)
    repeated = await asyncio.wait_for(
        agent.continue_run(run.run_id, version=continuation.version).result(), timeout=5
    )
    release.set()

    assert repeated.status == "failed"
    assert (await first).status == "success"
    assert log.count == 1


async def test_a_run_whose_continuation_died_is_parked_again_and_announced_without_a_read(
    make_store: MakeStore,
) -> None:
    store = make_store(lease=LEASE)
    agent, _ = refund_agent(ToolLog())
    runtime = Runtime([agent], storage=store)
    heard: list[RunEvent] = []
    runtime.add_listener(heard.append)
    suspended = await agent.generate("refund")
    await claim_and_die(store, suspended.run_id)
    nothing_yet = await runtime.reclaim_stopped()
    await asyncio.sleep(LEASE.total_seconds() * 1.5)

    reclaimed = await runtime.reclaim_stopped()

    assert (nothing_yet, reclaimed) == (0, 1)
    assert [(e.type, e.run_id) for e in heard[1:]] == [("run-suspended", suspended.run_id)]
    stored = await stored_run(store, suspended.run_id)
    assert stored is not None and (stored.status, stored.interrupted) == ("suspended", True)
    assert await runtime.reclaim_stopped() == 0


async def test_interrupted_run_can_be_decided_again_and_keeps_the_earlier_decision_on_record(
    make_store: MakeStore,
) -> None:
    store = make_store(lease=LEASE)
    log = ToolLog()
    agent, _ = refund_agent(log)
    Runtime([agent], storage=store)
    suspended = await agent.generate("refund")
    ghost_decided_at = await claim_and_die(store, suspended.run_id)
    await asyncio.sleep(LEASE.total_seconds() * 1.5)

    stored = await stored_run(store, suspended.run_id)
    assert stored is not None
    history = [(h["tool_call_id"], h["action"], h["actor"], h["decided_at"]) for h in stored.history]
    assert history == [("call-1", "approve", "ghost", ghost_decided_at.isoformat())]
    assert [c.decision for c in stored.calls] == [None]

    result = await (
        await agent.decline_tool_call(
            run_id=suspended.run_id, tool_call_id="call-1", actor="alice", reason="late"
        )
    ).result()

    assert result.status == "success"
    assert log.count == 0
    assert await stored_run(store, suspended.run_id) is None


async def test_claim_that_was_not_renewed_in_time_cannot_be_renewed_or_finished_late(
    make_store: MakeStore,
) -> None:
    store = make_store(lease=LEASE)
    agent, _ = refund_agent(ToolLog())
    Runtime([agent], storage=store)
    suspended = await agent.generate("refund")
    await claim_and_die(store, suspended.run_id)
    claimed = await stored_run(store, suspended.run_id)
    assert claimed is not None and claimed.status == "running"
    await asyncio.sleep(LEASE.total_seconds() * 1.5)

    renewed = await off_loop(lambda: store.heartbeat(suspended.run_id, version=claimed.version))
    finished = await off_loop(lambda: store.finish(suspended.run_id, version=claimed.version))

    assert (renewed, finished) == (False, False)
    assert only_run(await agent.list_suspended_runs()).interrupted is True


async def test_slow_continuation_that_missed_its_lease_cannot_change_the_run(make_store: MakeStore) -> None:
    store = make_store(lease=LEASE)
    log = ToolLog()

    @tool(requires_approval=True)
    async def refund(amount: int) -> str:
        log.record(amount=amount)
        if log.count == 1:
            # Blocks the whole event loop on purpose: a continuation too busy to renew its claim.
            time.sleep(LEASE.total_seconds() * 2)  # noqa: ASYNC251
        return "refunded"

    spy = ModelSpy(Call("refund", {"amount": 5}, tool_call_id="call-1"), Reply("done"))
    agent = Agent("support", model=spy.model, tools=[refund])
    Runtime([agent], storage=store)
    suspended = await agent.generate("refund")

    late = await (
        await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1", actor="alice")
    ).result()
    relisted = only_run(await agent.list_suspended_runs())
    with pytest.raises(RerunNotConfirmed):
        await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1", actor="bob")
    again = await (
        await agent.approve_tool_call(
            run_id=suspended.run_id, tool_call_id="call-1", actor="bob", confirm_rerun=True
        )
    ).result()

    assert late.status == "failed"
    assert relisted.run_id == suspended.run_id
    assert relisted.interrupted is True
    assert [c.tool_call_id for c in relisted.tool_calls] == ["call-1"]
    # The interrupted continuation had already run the tool: the call says so, and running it again
    # took a confirmation (hence ctx.tool_call_id as an idempotency key).
    assert relisted.tool_calls[0].interrupted_after_start
    assert log.count == 1 + 1
    assert again.status == "success"
    assert await stored_run(store, suspended.run_id) is None


async def test_interrupted_supervisor_run_is_decided_again_and_resumes_its_inner_run(
    make_store: MakeStore,
) -> None:
    store = make_store(lease=LEASE)
    team = Team(Call("refund", {"order_id": "A-1", "amount": 30}, tool_call_id="inner-1"), Reply("Refunded."))
    Runtime([team.desk], storage=store)
    outer = await team.desk.generate("Customer wants a refund")
    inner_run_id = only_run(await team.billing.list_suspended_runs()).run_id
    ghost = Decision(action="approve", decided_at=datetime.now(UTC), actor="ghost")
    # A process decides on the supervisor, claims both runs the way a continuation does, and dies.
    receipt = await off_loop(
        lambda: store.record_decision(
            agent_id="desk", run_id=outer.run_id, tool_call_id="deleg-1", decision=ghost
        )
    )
    outer_version = receipt.claimed_version
    assert outer_version is not None
    assert await off_loop(lambda: store.start_continuation(outer.run_id, version=outer_version))
    inner = await off_loop(lambda: store.claim(inner_run_id, decisions={"inner-1": ghost}))
    assert inner is not None
    assert await off_loop(lambda: store.start_continuation(inner_run_id, version=inner.version))
    await asyncio.sleep(LEASE.total_seconds() * 1.5)

    relisted = only_run(await team.desk.list_suspended_runs())
    result = await (await team.desk.approve_tool_call(run_id=outer.run_id, tool_call_id="deleg-1")).result()

    assert relisted.run_id == outer.run_id
    assert relisted.interrupted is True
    assert [(c.tool_call_id, c.tool_name) for c in relisted.tool_calls] == [("deleg-1", "refund")]
    assert result.status == "success"
    assert team.refunds.calls == [{"order_id": "A-1", "amount": 30}]
    assert await stored_run(store, outer.run_id) is None
    assert await stored_run(store, inner_run_id) is None
