"""Thread memory per (agent, thread), and the snapshot lifecycle: stored only while a run waits."""

from __future__ import annotations

import pytest

from agents_runtime import Agent, Call, Reply, RunStore, ScriptContext, ToolContext, tool
from tests.support.runtime_helpers import ModelSpy, ToolLog, stored_run

from .conftest import RuntimeFor


def refund_tool(log: ToolLog | None = None) -> object:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        if log is not None:
            log.record(amount=amount)
        return f"refunded {amount}"

    return refund


# -- thread memory ---------------------------------------------------------------------------------


async def test_second_run_on_a_thread_sees_the_first_runs_messages(runtime_for: RuntimeFor) -> None:
    spy = ModelSpy(lambda ctx: Reply(f"answer to {ctx.prompt}"))
    agent = Agent("support", model=spy.model)
    runtime_for(agent)

    await agent.generate("my order is A-1", thread_id="thread-1")
    await agent.generate("what was my order?", thread_id="thread-1")

    assert spy.user_prompts(1) == ["my order is A-1", "what was my order?"]
    assert spy.texts(1) == ["answer to my order is A-1"]


async def test_thread_holds_each_ended_run_once_in_order(runtime_for: RuntimeFor) -> None:
    spy = ModelSpy(lambda ctx: Reply(f"answer to {ctx.prompt}"))
    agent = Agent("support", model=spy.model)
    runtime_for(agent)

    for prompt in ["one", "two", "three"]:
        await agent.generate(prompt, thread_id="thread-1")

    assert spy.user_prompts() == ["one", "two", "three"]
    assert spy.texts() == ["answer to one", "answer to two"]


async def test_a_run_remembers_the_threads_latest_runs_only(runtime_for: RuntimeFor) -> None:
    spy = ModelSpy(lambda ctx: Reply(f"answer to {ctx.prompt}"))
    agent = Agent("support", model=spy.model, memory_last_runs=2)
    runtime_for(agent)

    for prompt in ["one", "two", "three", "four"]:
        await agent.generate(prompt, thread_id="thread-1")

    assert spy.user_prompts() == ["two", "three", "four"]
    assert spy.texts() == ["answer to two", "answer to three"]


async def test_a_remembered_run_keeps_its_tool_calls_with_their_results(runtime_for: RuntimeFor) -> None:
    """Memory is cut between runs, never between a tool call and its result (a model API rejects a
    result whose call it was not shown)."""

    def script(ctx: ScriptContext) -> object:
        if ctx.prompt.startswith("refund") and ctx.step == 0:
            return Call("refund", {"amount": 5}, tool_call_id=f"call-{ctx.prompt[-1]}")
        return Reply(f"answer to {ctx.prompt}")

    spy = ModelSpy(script)
    agent = Agent("support", model=spy.model, tools=[refund_tool()], memory_last_runs=1)
    runtime_for(agent)
    for prompt in ["refund 1", "refund 2"]:
        parked = await agent.generate(prompt, thread_id="thread-1")
        await (
            await agent.approve_tool_call(run_id=parked.run_id, tool_call_id=f"call-{prompt[-1]}")
        ).result()

    await agent.generate("and now?", thread_id="thread-1")

    assert spy.user_prompts() == ["refund 2", "and now?"]
    assert spy.tool_call_ids() == ["call-2"]
    assert spy.tool_results() == {"call-2": "refunded 5"}


def test_memory_is_bounded_by_default_and_its_bound_is_checked() -> None:
    from agents_runtime._loop import DEFAULT_MEMORY_LAST_RUNS

    model = ModelSpy(Reply("ok")).model
    assert Agent("support", model=model).memory_last_runs == DEFAULT_MEMORY_LAST_RUNS == 20
    assert Agent("support", model=model, memory_last_runs=None).memory_last_runs is None
    for bad in (0, -1, 2.5, "3", True):
        with pytest.raises(ValueError, match="memory_last_runs"):
            Agent("support", model=model, memory_last_runs=bad)  # type: ignore[arg-type]


async def test_runs_on_other_threads_or_without_a_thread_start_fresh(runtime_for: RuntimeFor) -> None:
    spy = ModelSpy(Reply("ok"))
    agent = Agent("support", model=spy.model)
    runtime_for(agent)

    await agent.generate("secret A-1", thread_id="thread-1")
    await agent.generate("other thread", thread_id="thread-2")
    await agent.generate("no thread")

    assert spy.user_prompts(1) == ["other thread"]
    assert spy.user_prompts(2) == ["no thread"]
    assert spy.texts(1) == spy.texts(2) == []


async def test_runs_without_a_thread_are_not_remembered(runtime_for: RuntimeFor) -> None:
    spy = ModelSpy(Reply("ok"))
    agent = Agent("support", model=spy.model)
    runtime_for(agent)

    await agent.generate("no thread")
    await agent.generate("next", thread_id="thread-1")

    assert spy.user_prompts(1) == ["next"]


async def test_another_agent_on_the_same_thread_does_not_see_the_messages(runtime_for: RuntimeFor) -> None:
    first_spy, second_spy = ModelSpy(Reply("ok")), ModelSpy(Reply("ok"))
    first = Agent("support", model=first_spy.model)
    second = Agent("billing", model=second_spy.model)
    runtime_for(first, second)

    await first.generate("secret A-1", thread_id="thread-1")
    await second.generate("hello", thread_id="thread-1")

    assert second_spy.user_prompts() == ["hello"]
    assert second_spy.texts() == []


async def test_new_run_never_sees_another_runs_pending_calls_until_that_run_ends(
    runtime_for: RuntimeFor,
) -> None:
    def script(ctx: ScriptContext) -> object:
        if ctx.prompt == "refund A-1" and ctx.step == 0:
            return Call("refund", {"amount": 5}, tool_call_id="call-pending")
        return Reply(f"answer to {ctx.prompt}")

    spy = ModelSpy(script)
    agent = Agent("support", model=spy.model, tools=[refund_tool()])
    runtime_for(agent)

    suspended = await agent.generate("refund A-1", thread_id="thread-1")
    await agent.generate("meanwhile", thread_id="thread-1")
    seen_meanwhile = (spy.user_prompts(), spy.tool_call_ids())
    await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-pending")).result()
    await agent.generate("afterwards", thread_id="thread-1")

    assert suspended.status == "suspended"
    assert seen_meanwhile == (["meanwhile"], [])
    # Once ended, the run joins the thread (after the run that ended before it).
    assert spy.user_prompts() == ["meanwhile", "refund A-1", "afterwards"]
    assert spy.tool_call_ids() == ["call-pending"]
    assert spy.tool_results() == {"call-pending": "refunded 5"}


async def test_thread_memory_survives_a_new_runtime_on_the_same_store(runtime_for: RuntimeFor) -> None:
    before = Agent("support", model=ModelSpy(Reply("noted")).model)
    runtime_for(before)
    await before.generate("remember A-1", thread_id="thread-1")

    spy = ModelSpy(Reply("ok"))
    after = Agent("support", model=spy.model)
    runtime_for(after)
    await after.generate("what was it?", thread_id="thread-1")

    assert spy.user_prompts() == ["remember A-1", "what was it?"]
    assert spy.texts() == ["noted"]


# -- snapshot lifecycle ----------------------------------------------------------------------------


async def test_run_that_never_suspends_stores_nothing(runtime_for: RuntimeFor, store: RunStore) -> None:
    agent = Agent("support", model=ModelSpy(Reply("hi")).model)
    runtime_for(agent)

    result = await agent.generate("hello", thread_id="thread-1")

    assert result.status == "success"
    assert await stored_run(store, result.run_id) is None
    assert (await agent.list_suspended_runs()).total == 0


async def test_failed_run_stores_nothing(runtime_for: RuntimeFor, store: RunStore) -> None:
    @tool
    def explode() -> str:
        raise ValueError("boom")

    agent = Agent("support", model=ModelSpy(Call("explode", {})).model, tools=[explode])
    runtime_for(agent)

    result = await agent.generate("go")

    assert result.status == "failed"
    assert await stored_run(store, result.run_id) is None


async def test_snapshot_exists_while_the_run_waits(runtime_for: RuntimeFor, store: RunStore) -> None:
    agent = Agent(
        "support",
        model=ModelSpy(Call("refund", {"amount": 5}, tool_call_id="call-1")).model,
        tools=[refund_tool()],
    )
    runtime_for(agent)

    result = await agent.generate("refund", thread_id="thread-1", resource_id="customer-1")

    stored = await stored_run(store, result.run_id)
    assert stored is not None
    assert (stored.run_id, stored.agent_id, stored.thread_id, stored.resource_id) == (
        result.run_id,
        "support",
        "thread-1",
        "customer-1",
    )
    assert stored.status == "suspended"
    assert stored.snapshot


async def test_snapshot_is_deleted_when_an_approved_run_succeeds(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    agent = Agent(
        "support",
        model=ModelSpy(Call("refund", {"amount": 5}, tool_call_id="call-1"), Reply("done")).model,
        tools=[refund_tool()],
    )
    runtime_for(agent)
    suspended = await agent.generate("refund")

    result = await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")).result()

    assert result.status == "success"
    assert await stored_run(store, suspended.run_id) is None


async def test_snapshot_is_deleted_after_a_decline_completes(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    agent = Agent(
        "support",
        model=ModelSpy(Call("refund", {"amount": 5}, tool_call_id="call-1"), Reply("ok, not refunded")).model,
        tools=[refund_tool()],
    )
    runtime_for(agent)
    suspended = await agent.generate("refund")

    result = await (await agent.decline_tool_call(run_id=suspended.run_id, tool_call_id="call-1")).result()

    assert result.status == "success"
    assert await stored_run(store, suspended.run_id) is None


async def test_snapshot_is_deleted_when_the_continuation_fails(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        raise RuntimeError("payment provider down")

    agent = Agent(
        "support",
        model=ModelSpy(Call("refund", {"amount": 5}, tool_call_id="call-1"), Reply("x")).model,
        tools=[refund],
    )
    runtime_for(agent)
    suspended = await agent.generate("refund")

    result = await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")).result()

    assert result.status == "failed"
    assert "payment provider down" in (result.error or "")
    assert await stored_run(store, suspended.run_id) is None
    assert (await agent.list_suspended_runs()).total == 0


async def test_snapshot_is_deleted_when_a_resumed_run_succeeds(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    @tool
    def ask(ctx: ToolContext) -> str:
        if ctx.resume_data is None:
            ctx.suspend({"question": "Which?"})
        return "answered"

    agent = Agent(
        "support", model=ModelSpy(Call("ask", {}, tool_call_id="call-1"), Reply("done")).model, tools=[ask]
    )
    runtime_for(agent)
    suspended = await agent.generate("ask")

    result = await (await agent.resume_stream({"answer": 1}, run_id=suspended.run_id)).result()

    assert result.status == "success"
    assert await stored_run(store, suspended.run_id) is None
