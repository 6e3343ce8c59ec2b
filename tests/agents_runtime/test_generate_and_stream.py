"""Starting runs: ``generate`` / ``stream``, the chunk types and their snake_case payloads."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agents_runtime import Agent, Call, Chunk, Reply, RunResult, RunStore, RunStream, ToolContext, tool
from tests.support.runtime_helpers import ModelSpy, ToolLog, stored_run

from .conftest import RuntimeFor

SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


async def collect(stream: RunStream) -> tuple[list[Chunk], RunResult]:
    chunks = [chunk async for chunk in stream]
    return chunks, await stream.result()


def of_type(chunks: list[Chunk], type_: str) -> list[dict[str, Any]]:
    return [chunk.payload for chunk in chunks if chunk.type == type_]


def every_tool_kind() -> list[Any]:
    log = ToolLog()

    @tool
    def lookup(order_id: str) -> dict[str, Any]:
        log.record(order_id=order_id)
        return {"order_id": order_id, "status": "shipped"}

    @tool(requires_approval=True)
    def refund(order_id: str, amount: int) -> str:
        return "refunded"

    @tool
    def ask(ctx: ToolContext, order_id: str) -> str:
        ctx.suspend({"question": f"Why refund {order_id}?"})

    return [lookup, refund, ask]


async def test_generate_returns_the_final_text(runtime_for: RuntimeFor) -> None:
    agent = Agent("support", model=ModelSpy(Reply("Hello there")).model)
    runtime_for(agent)

    result = await agent.generate("hi")

    assert result.status == "success"
    assert result.text == "Hello there"
    assert result.tool_calls == []
    assert result.run_id


async def test_each_run_gets_its_own_run_id(runtime_for: RuntimeFor) -> None:
    agent = Agent("support", model=ModelSpy(Reply("Hello")).model)
    runtime_for(agent)

    first = await agent.generate("hi")
    second = await agent.generate("hi")

    assert first.run_id != second.run_id


async def test_stream_yields_text_deltas_then_finish_all_with_the_run_id(runtime_for: RuntimeFor) -> None:
    agent = Agent("support", model=ModelSpy(Reply("Hello there, friend")).model)
    runtime_for(agent)

    stream = await agent.stream("hi")
    chunks, result = await collect(stream)

    assert result.run_id == stream.run_id
    assert {chunk.run_id for chunk in chunks} == {stream.run_id}
    assert "".join(p["text"] for p in of_type(chunks, "text-delta")) == "Hello there, friend"
    assert chunks[-1].type == "finish"
    assert chunks[-1].payload["status"] == "success"
    assert result.text == "Hello there, friend"


async def test_stream_reports_tool_calls_results_approvals_and_suspensions(runtime_for: RuntimeFor) -> None:
    agent = Agent(
        "support",
        model=ModelSpy(
            Call("lookup", {"order_id": "A-1"}, tool_call_id="call-lookup"),
            [
                Call("refund", {"order_id": "A-1", "amount": 30}, tool_call_id="call-refund"),
                Call("ask", {"order_id": "A-1"}, tool_call_id="call-ask"),
            ],
        ).model,
        tools=every_tool_kind(),
    )
    runtime_for(agent)

    stream = await agent.stream("refund A-1")
    chunks, result = await collect(stream)

    assert {chunk.run_id for chunk in chunks} == {result.run_id}
    assert of_type(chunks, "tool-call")[0] == {
        "tool_call_id": "call-lookup",
        "tool_name": "lookup",
        "args": {"order_id": "A-1"},
    }
    assert of_type(chunks, "tool-result") == [
        {
            "tool_call_id": "call-lookup",
            "tool_name": "lookup",
            "result": {"order_id": "A-1", "status": "shipped"},
        }
    ]
    assert of_type(chunks, "tool-call-approval") == [
        {"tool_call_id": "call-refund", "tool_name": "refund", "args": {"order_id": "A-1", "amount": 30}}
    ]
    [suspended] = of_type(chunks, "tool-call-suspended")
    assert suspended["tool_call_id"] == "call-ask"
    assert suspended["tool_name"] == "ask"
    assert suspended["suspend_payload"] == {"question": "Why refund A-1?"}
    assert chunks[-1].type == "finish"
    assert chunks[-1].payload["status"] == "suspended"
    assert result.status == "suspended"
    assert {c.tool_call_id for c in result.tool_calls} == {"call-refund", "call-ask"}


async def test_every_chunk_payload_key_is_snake_case(runtime_for: RuntimeFor) -> None:
    agent = Agent(
        "support",
        model=ModelSpy(
            Call("lookup", {"order_id": "A-1"}, tool_call_id="call-lookup"),
            [
                Call("refund", {"order_id": "A-1", "amount": 30}, tool_call_id="call-refund"),
                Call("ask", {"order_id": "A-1"}, tool_call_id="call-ask"),
            ],
            Reply("All done"),
        ).model,
        tools=every_tool_kind(),
    )
    runtime_for(agent)

    first, suspended = await collect(await agent.stream("refund A-1"))
    second, _ = await collect(
        await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-refund")
    )
    third, finished = await collect(
        await agent.decline_tool_call(run_id=suspended.run_id, tool_call_id="call-ask")
    )

    chunks = first + second + third
    assert finished.status == "success"
    assert {
        "text-delta",
        "tool-call",
        "tool-result",
        "tool-call-approval",
        "tool-call-suspended",
        "finish",
    } <= {chunk.type for chunk in chunks}
    assert [key for chunk in chunks for key in chunk.payload if not SNAKE_CASE.match(key)] == []


async def test_failing_model_ends_the_run_with_an_error_chunk_and_failed_status(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("model is down")

    agent = Agent("support", model=FunctionModel(broken))
    runtime_for(agent)

    stream = await agent.stream("hi")
    chunks, result = await collect(stream)

    assert result.status == "failed"
    assert result.run_id == stream.run_id
    assert "model is down" in (result.error or "")
    [error] = of_type(chunks, "error")
    assert "model is down" in error["error"]
    assert chunks[-1].type == "finish"
    assert chunks[-1].payload["status"] == "failed"
    assert {chunk.run_id for chunk in chunks} == {stream.run_id}
    assert await stored_run(store, result.run_id) is None


async def test_generate_reports_a_failing_tool_as_a_failed_run(runtime_for: RuntimeFor) -> None:
    @tool
    def explode() -> str:
        raise ValueError("boom")

    agent = Agent("support", model=ModelSpy(Call("explode", {}), Reply("never")).model, tools=[explode])
    runtime_for(agent)

    result = await agent.generate("go")

    assert result.status == "failed"
    assert "boom" in (result.error or "")


async def test_continuation_stream_carries_the_same_run_id(runtime_for: RuntimeFor) -> None:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        return "refunded"

    agent = Agent(
        "support",
        model=ModelSpy(Call("refund", {"amount": 5}, tool_call_id="call-1"), Reply("Refund sent")).model,
        tools=[refund],
    )
    runtime_for(agent)
    suspended = await agent.generate("refund")

    stream = await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")
    chunks, result = await collect(stream)

    assert stream.run_id == result.run_id == suspended.run_id
    assert {chunk.run_id for chunk in chunks} == {suspended.run_id}
    assert of_type(chunks, "tool-result") == [
        {"tool_call_id": "call-1", "tool_name": "refund", "result": "refunded"}
    ]
    assert "".join(p["text"] for p in of_type(chunks, "text-delta")) == "Refund sent"
    assert result.text == "Refund sent"


@pytest.mark.parametrize("iterate", [True, False], ids=["iterated", "not-iterated"])
async def test_result_does_not_depend_on_iterating_the_stream(runtime_for: RuntimeFor, iterate: bool) -> None:
    agent = Agent("support", model=ModelSpy(Reply("Hello")).model)
    runtime_for(agent)

    stream = await agent.stream("hi")
    if iterate:
        [chunk async for chunk in stream]

    assert (await stream.result()).text == "Hello"


async def test_each_model_response_ends_a_step_with_its_usage_and_finish_adds_them_up(
    runtime_for: RuntimeFor,
) -> None:
    agent = Agent(
        "support",
        model=ModelSpy(Call("lookup", {"order_id": "A-1"}, tool_call_id="c1"), Reply("Shipped")).model,
        tools=every_tool_kind(),
    )
    runtime_for(agent)

    chunks, result = await collect(await agent.stream("where is A-1?"))

    assert result.status == "success"
    steps = of_type(chunks, "step-finish")
    assert len(steps) == 2
    for step in steps:
        usage = step["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    # A step ends before the tools of its response are handled (Mastra's boundary is drawn from it).
    assert [c.type for c in chunks][:3] == ["step-finish", "tool-call", "tool-result"]
    finish = chunks[-1].payload
    assert finish["usage"] == {
        key: sum(step["usage"][key] for step in steps)
        for key in ("input_tokens", "output_tokens", "total_tokens")
    }
    assert finish["model_name"] == steps[-1]["model_name"] and finish["model_name"]
    assert [(m["role"], m["kind"]) for m in finish["messages"]] == [
        ("user", "text"),
        ("assistant", "tool-call"),
        ("tool", "tool-result"),
        ("assistant", "text"),
    ]
