"""Discovery: ``list_suspended_runs`` scope, filters, dates, pagination, order, and restarts."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from agents_runtime import (
    Agent,
    AgentsRuntimeError,
    Call,
    InvalidPagination,
    Reply,
    RunNotFound,
    RunStore,
    ScriptContext,
    ToolContext,
    tool,
)
from agents_runtime.agent import SuspendedRunFilters
from agents_runtime.store import ParkedCall, Suspension
from tests.support.runtime_helpers import ModelSpy, ToolLog, off_loop, only_run, run_ids

from .conftest import RuntimeFor


def refund_agent(agent_id: str = "support", log: ToolLog | None = None) -> Agent:
    """An agent whose every run asks to refund the amount in its prompt, then says "done"."""

    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        if log is not None:
            log.record(amount=amount)
        return f"refunded {amount}"

    def first_step(ctx: ScriptContext) -> Call:
        return Call("refund", {"amount": int(ctx.prompt)}, tool_call_id=f"call-{ctx.prompt}")

    return Agent(agent_id, model=ModelSpy(first_step, Reply("done")).model, tools=[refund])


async def suspend_runs(agent: Agent, count: int, **where: Any) -> list[str]:
    """Start ``count`` runs one after another; their run ids, oldest first."""
    ids = []
    for n in range(count):
        result = await agent.generate(str(n), **where)
        assert result.status == "suspended"
        ids.append(result.run_id)
    return ids


# -- what a listing shows --------------------------------------------------------------------------


async def test_listed_run_describes_the_suspension(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)
    before = datetime.now(UTC)

    result = await agent.generate("120", thread_id="thread-1", resource_id="customer-7")
    listing = await agent.list_suspended_runs()

    run = only_run(listing)
    assert run.run_id == result.run_id
    assert run.status == "suspended"
    assert (run.thread_id, run.resource_id, run.parent_run_id, run.interrupted) == (
        "thread-1",
        "customer-7",
        None,
        False,
    )
    assert run.suspended_at.utcoffset() == timedelta(0)
    assert run.created_at.utcoffset() == timedelta(0)
    assert before <= run.created_at <= run.suspended_at <= datetime.now(UTC)
    [call] = run.tool_calls
    assert (call.tool_call_id, call.tool_name, call.args, call.requires_approval, call.suspend_payload) == (
        "call-120",
        "refund",
        {"amount": 120},
        True,
        None,
    )
    assert (call.resume_schema, call.suspend_schema) == (None, None)


async def test_every_parked_call_of_a_run_is_listed(runtime_for: RuntimeFor) -> None:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        return "ok"

    @tool
    def ask(ctx: ToolContext) -> str:
        ctx.suspend({"question": "why?"})

    agent = Agent(
        "support",
        model=ModelSpy(
            [
                Call("refund", {"amount": 1}, tool_call_id="call-a"),
                Call("refund", {"amount": 2}, tool_call_id="call-b"),
                Call("ask", {}, tool_call_id="call-c"),
            ]
        ).model,
        tools=[refund, ask],
    )
    runtime_for(agent)

    await agent.generate("go")

    calls = {c.tool_call_id: c for c in only_run(await agent.list_suspended_runs()).tool_calls}
    assert set(calls) == {"call-a", "call-b", "call-c"}
    assert calls["call-b"].args == {"amount": 2}
    assert calls["call-c"].requires_approval is False
    assert calls["call-c"].suspend_payload == {"question": "why?"}


async def test_empty_store_lists_nothing(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)

    listing = await agent.list_suspended_runs()

    assert (listing.runs, listing.total) == ([], 0)


# -- owner scope -----------------------------------------------------------------------------------


async def test_only_runs_started_by_this_agent_are_listed(runtime_for: RuntimeFor) -> None:
    support, billing = refund_agent("support"), refund_agent("billing")
    runtime_for(support, billing)

    mine = await support.generate("1", thread_id="shared-thread", resource_id="shared-customer")
    theirs = await billing.generate("2", thread_id="shared-thread", resource_id="shared-customer")

    for where in ({}, {"thread_id": "shared-thread"}, {"resource_id": "shared-customer"}):
        assert run_ids(await support.list_suspended_runs(**where)) == [mine.run_id]
        assert run_ids(await billing.list_suspended_runs(**where)) == [theirs.run_id]
    assert (await support.list_suspended_runs()).total == 1


# -- filters ---------------------------------------------------------------------------------------


async def test_thread_and_resource_filters_match_exactly(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)
    a = await agent.generate("1", thread_id="t-1", resource_id="r-1")
    b = await agent.generate("2", thread_id="t-1", resource_id="r-2")
    c = await agent.generate("3", thread_id="t-2", resource_id="r-1")
    d = await agent.generate("4")

    assert set(run_ids(await agent.list_suspended_runs(thread_id="t-1"))) == {a.run_id, b.run_id}
    assert set(run_ids(await agent.list_suspended_runs(resource_id="r-1"))) == {a.run_id, c.run_id}
    assert run_ids(await agent.list_suspended_runs(thread_id="t-1", resource_id="r-2")) == [b.run_id]
    assert run_ids(await agent.list_suspended_runs(thread_id="t")) == []
    assert run_ids(await agent.list_suspended_runs(thread_id="T-1")) == []
    assert (await agent.list_suspended_runs(thread_id="t-2")).total == 1
    assert set(run_ids(await agent.list_suspended_runs())) == {a.run_id, b.run_id, c.run_id, d.run_id}


async def test_date_bounds_are_inclusive_on_creation_time(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)
    await agent.generate("1")
    created = only_run(await agent.list_suspended_runs()).created_at
    tick = timedelta(microseconds=1)

    async def count(**bounds: datetime) -> int:
        return (await agent.list_suspended_runs(**bounds)).total

    assert await count(from_date=created, to_date=created) == 1
    assert await count(from_date=created - timedelta(hours=1), to_date=created + timedelta(hours=1)) == 1
    assert await count(from_date=created + tick) == 0
    assert await count(to_date=created - tick) == 0
    assert await count(from_date=created - tick) == 1
    assert await count(to_date=created + tick) == 1


async def test_aware_dates_in_other_time_zones_compare_as_instants(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)
    await agent.generate("1")
    created = only_run(await agent.list_suspended_runs()).created_at
    new_york = created.astimezone(timezone(timedelta(hours=-5)))

    assert (await agent.list_suspended_runs(from_date=new_york, to_date=new_york)).total == 1
    later = new_york + timedelta(microseconds=1)
    assert (await agent.list_suspended_runs(from_date=later)).total == 0


async def test_naive_dates_are_taken_as_utc(runtime_for: RuntimeFor, local_time_not_utc: None) -> None:
    agent = refund_agent()
    runtime_for(agent)
    await agent.generate("1")
    created = only_run(await agent.list_suspended_runs()).created_at
    naive = created.astimezone(UTC).replace(tzinfo=None)
    tick = timedelta(microseconds=1)

    assert (await agent.list_suspended_runs(from_date=naive, to_date=naive)).total == 1
    assert (await agent.list_suspended_runs(from_date=naive + tick)).total == 0
    assert (await agent.list_suspended_runs(to_date=naive - tick)).total == 0


async def test_dates_filter_on_creation_while_order_follows_the_last_suspension(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()

    @tool(requires_approval=True)
    def step(n: int) -> str:
        log.record(n=n)
        return "ok"

    def script(ctx: ScriptContext) -> object:
        if ctx.prompt == "twice" and ctx.step < 2:
            return Call("step", {"n": ctx.step}, tool_call_id=f"call-{ctx.step}")
        if ctx.prompt != "twice" and ctx.step == 0:
            return Call("step", {"n": 9}, tool_call_id="call-x")
        return Reply("done")

    # One step function per model request (a scripted model replies on its own past its steps).
    agent = Agent("support", model=ModelSpy(script, script, script).model, tools=[step])
    runtime_for(agent)
    old = await agent.generate("twice")
    old_created = only_run(await agent.list_suspended_runs()).created_at
    new = await agent.generate("once")

    assert run_ids(await agent.list_suspended_runs()) == [new.run_id, old.run_id]
    again = await (await agent.approve_tool_call(run_id=old.run_id, tool_call_id="call-0")).result()

    assert again.status == "suspended"
    assert run_ids(await agent.list_suspended_runs()) == [old.run_id, new.run_id]
    assert run_ids(await agent.list_suspended_runs(to_date=old_created)) == [old.run_id]


# -- pagination ------------------------------------------------------------------------------------


async def test_pages_slice_the_ordered_listing_and_total_counts_every_match(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)
    ids = await suspend_runs(agent, 5)
    newest_first = ids[::-1]

    pages = [await agent.list_suspended_runs(per_page=2, page=n) for n in range(3)]

    assert [run_ids(p) for p in pages] == [newest_first[0:2], newest_first[2:4], newest_first[4:]]
    assert [p.total for p in pages] == [5, 5, 5]


async def test_page_past_the_end_is_empty_with_the_full_total(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)
    await suspend_runs(agent, 3)

    listing = await agent.list_suspended_runs(per_page=2, page=7)

    assert (listing.runs, listing.total) == ([], 3)


async def test_total_counts_matches_of_the_filters_before_paging(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)
    await suspend_runs(agent, 3, thread_id="t-1")
    await suspend_runs(agent, 2, thread_id="t-2")

    listing = await agent.list_suspended_runs(thread_id="t-1", per_page=1, page=0)

    assert len(listing.runs) == 1
    assert listing.total == 3


@pytest.mark.parametrize(
    "only", [{"per_page": 2}, {"page": 0}, {"page": 1}], ids=["per_page", "page-0", "page-1"]
)
async def test_pagination_applies_only_when_both_per_page_and_page_are_given(
    runtime_for: RuntimeFor, only: dict[str, int]
) -> None:
    agent = refund_agent()
    runtime_for(agent)
    ids = await suspend_runs(agent, 3)

    listing = await agent.list_suspended_runs(**only)

    assert run_ids(listing) == ids[::-1]
    assert listing.total == 3


INVALID_PAGINATION = [
    {"per_page": 0},
    {"per_page": -1},
    {"per_page": True},
    {"per_page": False},
    {"per_page": "10"},
    {"per_page": 2.0},
    {"page": -1},
    {"page": True},
    {"page": False},
    {"page": "0"},
    {"page": 0.0},
    {"per_page": 0, "page": 0},
    {"per_page": 10, "page": -1},
    {"per_page": True, "page": 0},
    {"per_page": 10, "page": "1"},
]


@pytest.mark.parametrize("pagination", INVALID_PAGINATION, ids=repr)
async def test_invalid_pagination_is_refused_even_when_only_one_value_is_given(
    runtime_for: RuntimeFor, pagination: dict[str, Any]
) -> None:
    agent = refund_agent()
    runtime_for(agent)
    await suspend_runs(agent, 1)

    with pytest.raises(InvalidPagination) as raised:
        await agent.list_suspended_runs(**pagination)
    with pytest.raises(InvalidPagination, match=re.escape(str(raised.value))):
        await off_loop(lambda: agent.list_suspended_runs_sync(**pagination))

    assert isinstance(raised.value, AgentsRuntimeError)


# -- order -----------------------------------------------------------------------------------------


async def test_most_recently_suspended_run_comes_first(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)

    ids = await suspend_runs(agent, 4)

    listing = await agent.list_suspended_runs()
    assert run_ids(listing) == ids[::-1]
    suspended_at = [run.suspended_at for run in listing.runs]
    assert suspended_at == sorted(suspended_at, reverse=True)


async def test_runs_suspended_at_the_same_moment_are_ordered_by_run_id(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    agent = refund_agent()
    runtime_for(agent)
    moment = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    for run_id in ["run-b", "run-c", "run-a"]:
        suspension = Suspension(
            run_id=run_id,
            agent_id="support",
            thread_id=None,
            resource_id=None,
            parent_run_id=None,
            created_at=moment - timedelta(minutes=1),
            suspended_at=moment,
            calls=(
                ParkedCall(tool_call_id="call-1", tool_name="refund", kind="approval", args={"amount": 1}),
            ),
            snapshot={},
        )
        await off_loop(lambda s=suspension: store.insert_suspended(s))
    later = await agent.generate("7")

    listing = await agent.list_suspended_runs()

    assert run_ids(listing) == [later.run_id, "run-a", "run-b", "run-c"]
    assert run_ids(await agent.list_suspended_runs(per_page=2, page=1)) == ["run-b", "run-c"]


# -- storage, not process memory -------------------------------------------------------------------


async def test_a_new_runtime_over_the_same_store_lists_and_continues_the_runs(
    runtime_for: RuntimeFor,
) -> None:
    before = refund_agent()
    runtime_for(before)
    first = await before.generate("10", thread_id="t-1", resource_id="r-1")
    second = await before.generate("20")
    listed_before = await before.list_suspended_runs()

    log = ToolLog()
    after = refund_agent(log=log)
    runtime_for(after)
    listed_after = await after.list_suspended_runs()
    result = await (await after.approve_tool_call(run_id=first.run_id, tool_call_id="call-10")).result()

    assert listed_after == listed_before
    assert run_ids(listed_after) == [second.run_id, first.run_id]
    assert result.status == "success"
    assert log.calls == [{"amount": 10}]
    assert run_ids(await after.list_suspended_runs()) == [second.run_id]


async def test_listing_from_another_event_loop_sees_the_same_runs(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)
    ids = await suspend_runs(agent, 2)

    other = refund_agent()
    runtime_for(other)
    listing = await asyncio.to_thread(lambda: asyncio.run(other.list_suspended_runs()))

    assert run_ids(listing) == ids[::-1]


# -- the synchronous twin ----------------------------------------------------------------------------


async def test_the_synchronous_listing_lists_what_the_async_one_lists(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)
    first = await suspend_runs(agent, 3, thread_id="t-1")
    await suspend_runs(agent, 2, thread_id="t-2")
    asked: list[dict[str, Any]] = [
        {},
        {"thread_id": "t-1", "per_page": 2, "page": 1},
        {"order": "oldest", "per_page": 3, "page": 0},
        {"kind": "approval", "tool_name": "refund"},
        {"thread_id": "t-nobody"},
    ]

    listed = [await off_loop(lambda f=f: agent.list_suspended_runs_sync(**f)) for f in asked]

    assert listed == [await agent.list_suspended_runs(**f) for f in asked]
    assert [len(page.runs) for page in listed] == [5, 1, 3, 5, 0]
    assert run_ids(listed[1]) == [first[0]] and listed[1].total == 3


async def test_the_synchronous_listing_refuses_what_the_async_one_refuses(runtime_for: RuntimeFor) -> None:
    agent = refund_agent()
    runtime_for(agent)
    await suspend_runs(agent, 1)

    for bad in [{"order": "sideways"}, {"kind": "vote"}, {"thread_id": 7}, {"expiring_before": "soon"}]:
        with pytest.raises((TypeError, ValueError)) as from_async:
            await agent.list_suspended_runs(**bad)
        with pytest.raises(type(from_async.value), match=re.escape(str(from_async.value))):
            await off_loop(lambda b=bad: agent.list_suspended_runs_sync(**b))
    with pytest.raises(TypeError):  # a name the listing does not take
        await off_loop(lambda: agent.list_suspended_runs_sync(per_pages=5))  # type: ignore[call-arg]


def test_the_synchronous_listing_takes_the_async_ones_arguments() -> None:
    takes = inspect.signature(Agent.list_suspended_runs).parameters.keys() - {"self"}
    assert SuspendedRunFilters.__annotations__.keys() == takes


#: What each synchronous read of one run must find of run "5" (its call's arguments, its prompt).
_FOUND_OF_FIVE: dict[str, Callable[[Any], bool]] = {
    "get_suspended_run": lambda run: run.tool_calls[0].args == {"amount": 5},
    "run_messages": lambda messages: any("5" in str(message) for message in messages),
}


@pytest.mark.parametrize("read", sorted(_FOUND_OF_FIVE))
async def test_the_synchronous_read_of_one_run_finds_what_the_async_one_finds(
    runtime_for: RuntimeFor, read: str
) -> None:
    agent, other = refund_agent(), refund_agent("billing")
    runtime_for(agent, other)
    mine, theirs = await agent.generate("5"), await other.generate("6")
    read_async, read_sync = getattr(agent, read), getattr(agent, f"{read}_sync")

    found = await off_loop(lambda: read_sync(mine.run_id))

    assert found == await read_async(mine.run_id)
    assert _FOUND_OF_FIVE[read](found)
    for missing in (theirs.run_id, "run-nobody"):
        with pytest.raises(RunNotFound):
            await off_loop(lambda r=missing: read_sync(r))
    await agent.approve_tool_call(run_id=mine.run_id, tool_call_id="call-5")
    with pytest.raises(RunNotFound):  # decided: no longer waiting
        await off_loop(lambda: read_sync(mine.run_id))
