"""Building agents and tools: delegation tools, approval rules, ToolContext, sync/async, suspend()."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from agents_runtime import (
    Agent,
    Call,
    InvalidResumeData,
    Reply,
    RunStore,
    ToolContext,
    scripted_model,
    tool,
)
from tests.support import future_annotated_tools
from tests.support.runtime_helpers import ModelSpy, ToolLog, only_run, stored_run

from .conftest import RuntimeFor

# -- building agents -------------------------------------------------------------------------------


async def test_sub_agent_is_offered_as_agent_tool_with_sanitised_name_and_one_prompt_argument(
    runtime_for: RuntimeFor,
) -> None:
    worker = Agent("billing-team.eu 2", model=scripted_model(Reply("ok")))
    spy = ModelSpy(Reply("nothing to do"))
    supervisor = Agent("desk", model=spy.model, agents=[worker])
    runtime_for(supervisor)

    await supervisor.generate("hello")

    offered = spy.tools_offered()
    assert list(offered) == ["agent_billing_team_eu_2"]
    schema = offered["agent_billing_team_eu_2"]
    assert list(schema["properties"]) == ["prompt"]
    assert schema["properties"]["prompt"]["type"] == "string"
    assert schema["required"] == ["prompt"]


def test_sub_agents_whose_ids_sanitise_to_the_same_name_are_refused() -> None:
    first = Agent("billing-eu", model=scripted_model())
    second = Agent("billing.eu", model=scripted_model())

    with pytest.raises(ValueError, match="agent_billing_eu"):
        Agent("desk", model=scripted_model(), agents=[first, second])


def test_tool_named_like_a_delegation_tool_is_refused() -> None:
    @tool
    def agent_billing(prompt: str) -> str:
        return prompt

    with pytest.raises(ValueError, match="agent_billing"):
        Agent(
            "desk",
            model=scripted_model(),
            tools=[agent_billing],
            agents=[Agent("billing", model=scripted_model())],
        )


def test_two_tools_with_one_name_are_refused() -> None:
    @tool(name="refund")
    def refund_eur(amount: int) -> str:
        return "eur"

    @tool(name="refund")
    def refund_usd(amount: int) -> str:
        return "usd"

    with pytest.raises(ValueError, match="refund"):
        Agent("desk", model=scripted_model(), tools=[refund_eur, refund_usd])


async def test_tool_name_and_argument_schema_come_from_the_function(runtime_for: RuntimeFor) -> None:
    @tool(name="issue_refund")
    def refund(ctx: ToolContext, amount: int, currency: str = "EUR") -> str:
        """Refund a customer."""
        return "ok"

    spy = ModelSpy(Reply("nothing to do"))
    agent = Agent("support", model=spy.model, tools=[refund])
    runtime_for(agent)

    await agent.generate("hello")

    tool_def = spy.infos[-1].function_tools[0]
    assert tool_def.name == "issue_refund"
    assert tool_def.description == "Refund a customer."
    schema = tool_def.parameters_json_schema
    assert set(schema["properties"]) == {"amount", "currency"}
    assert schema["properties"]["amount"]["type"] == "integer"
    assert schema["required"] == ["amount"]


# -- requires_approval -----------------------------------------------------------------------------


def refund_agent(log: ToolLog, rule: Any, *, amount: Any = 120) -> tuple[Agent, ModelSpy]:
    @tool(requires_approval=rule)
    def refund(amount: int) -> str:
        log.record(amount=amount)
        return f"refunded {amount}"

    spy = ModelSpy(Call("refund", {"amount": amount}, tool_call_id="call-1"), Reply("done"))
    return Agent("support", model=spy.model, tools=[refund]), spy


async def test_requires_approval_true_parks_the_call_without_running_the_tool(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()
    agent, _ = refund_agent(log, True)
    runtime_for(agent)

    result = await agent.generate("refund")

    assert result.status == "suspended"
    assert [(c.tool_call_id, c.tool_name, c.args, c.requires_approval) for c in result.tool_calls] == [
        ("call-1", "refund", {"amount": 120}, True)
    ]
    assert log.count == 0


async def test_tools_run_without_approval_by_default(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = refund_agent(log, False)
    runtime_for(agent)

    result = await agent.generate("refund")

    assert result.status == "success"
    assert log.calls == [{"amount": 120}]
    assert spy.tool_results() == {"call-1": "refunded 120"}


async def test_conditional_approval_receives_the_validated_arguments_as_a_dict(
    runtime_for: RuntimeFor,
) -> None:
    log = ToolLog()
    received: list[Any] = []

    def over_limit(args: dict[str, Any]) -> bool:
        received.append(args)
        return bool(args["amount"] > 100)

    # The model sends a string; the rule sees the validated int.
    agent, _ = refund_agent(log, over_limit, amount="150")
    runtime_for(agent)

    result = await agent.generate("refund")

    assert received == [{"amount": 150}]
    assert type(received[0]) is dict
    assert result.status == "suspended"
    assert log.count == 0


async def test_conditional_approval_returning_false_runs_the_tool_without_suspending(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log = ToolLog()
    agent, _ = refund_agent(log, lambda args: args["amount"] > 100, amount=20)
    runtime_for(agent)

    result = await agent.generate("refund")

    assert result.status == "success"
    assert log.calls == [{"amount": 20}]
    assert await stored_run(store, result.run_id) is None


async def test_conditional_approval_that_raises_requires_approval(runtime_for: RuntimeFor) -> None:
    log = ToolLog()

    def broken(args: dict[str, Any]) -> bool:
        raise KeyError("limit")

    agent, _ = refund_agent(log, broken)
    runtime_for(agent)

    result = await agent.generate("refund")

    assert result.status == "suspended"
    assert result.tool_calls[0].requires_approval is True
    assert log.count == 0


# -- ToolContext -----------------------------------------------------------------------------------


async def test_tool_context_describes_the_call(runtime_for: RuntimeFor) -> None:
    contexts: list[ToolContext] = []

    @tool
    def whoami(ctx: ToolContext) -> str:
        contexts.append(ctx)
        return "ok"

    agent = Agent(
        "support",
        model=scripted_model(Call("whoami", {}, tool_call_id="call-7"), Reply("done")),
        tools=[whoami],
    )
    runtime_for(agent)

    result = await agent.generate("who?", thread_id="thread-1", resource_id="customer-9")

    [ctx] = contexts
    assert (ctx.run_id, ctx.tool_call_id, ctx.agent_id, ctx.thread_id, ctx.resource_id) == (
        result.run_id,
        "call-7",
        "support",
        "thread-1",
        "customer-9",
    )
    assert ctx.resume_data is None


async def test_tool_context_is_found_from_string_annotations_that_are_never_evaluated(
    runtime_for: RuntimeFor,
) -> None:
    future_annotated_tools.seen.clear()
    spy = ModelSpy(
        [
            Call("lookup_order", {"order_id": "A-1"}, tool_call_id="call-1"),
            Call("lookup_customer", {"email": "ann@example.com"}, tool_call_id="call-2"),
        ],
        Reply("done"),
    )
    agent = Agent(
        "support",
        model=spy.model,
        tools=[tool(future_annotated_tools.lookup_order), tool(future_annotated_tools.lookup_customer)],
    )
    runtime_for(agent)

    result = await agent.generate("look up", thread_id="t-1", resource_id="r-1")

    assert result.status == "success"
    offered = spy.tools_offered(0)
    assert set(offered["lookup_order"]["properties"]) == {"order_id"}
    assert set(offered["lookup_customer"]["properties"]) == {"email"}
    context = {"run_id": result.run_id, "agent_id": "support", "thread_id": "t-1", "resource_id": "r-1"}
    assert sorted(future_annotated_tools.seen) == [
        ("lookup_customer", {**context, "tool_call_id": "call-2", "email": "ann@example.com"}),
        ("lookup_order", {**context, "tool_call_id": "call-1", "order_id": "A-1"}),
    ]


async def test_sync_and_async_tools_both_run(runtime_for: RuntimeFor) -> None:
    log = ToolLog()

    @tool
    def add(a: int, b: int) -> int:
        log.record(tool="add")
        return a + b

    @tool
    async def multiply(a: int, b: int) -> int:
        log.record(tool="multiply")
        return a * b

    spy = ModelSpy(
        [
            Call("add", {"a": 2, "b": 3}, tool_call_id="c-add"),
            Call("multiply", {"a": 2, "b": 3}, tool_call_id="c-mul"),
        ],
        Reply("done"),
    )
    agent = Agent("calc", model=spy.model, tools=[add, multiply])
    runtime_for(agent)

    result = await agent.generate("compute")

    assert result.status == "success"
    assert spy.tool_results() == {"c-add": 5, "c-mul": 6}
    assert sorted(c["tool"] for c in log.calls) == ["add", "multiply"]


# -- suspend() and schemas -------------------------------------------------------------------------


class Question(pydantic.BaseModel):
    question: str


class Answer(pydantic.BaseModel):
    environment: str
    replicas: int


async def test_suspend_cannot_be_swallowed_by_except_exception(runtime_for: RuntimeFor) -> None:
    @tool
    def careful(ctx: ToolContext) -> str:
        try:
            ctx.suspend({"question": "Which one?"})
        except Exception:
            return "swallowed"
        return "fell through"

    agent = Agent(
        "ops",
        model=scripted_model(Call("careful", {}, tool_call_id="call-1"), Reply("done")),
        tools=[careful],
    )
    runtime_for(agent)

    result = await agent.generate("go")

    assert result.status == "suspended"
    [call] = result.tool_calls
    assert (call.tool_call_id, call.requires_approval, call.suspend_payload) == (
        "call-1",
        False,
        {"question": "Which one?"},
    )


async def test_suspend_payload_that_breaks_the_suspend_schema_fails_the_run(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    @tool(suspend_schema=Question, resume_schema=Answer)
    def ask(ctx: ToolContext) -> str:
        ctx.suspend({"wrong": 1})

    agent = Agent(
        "ops", model=scripted_model(Call("ask", {}, tool_call_id="call-1"), Reply("done")), tools=[ask]
    )
    runtime_for(agent)

    result = await agent.generate("go")

    assert result.status == "failed"
    assert result.error
    assert (await agent.list_suspended_runs()).total == 0
    assert await stored_run(store, result.run_id) is None


async def test_suspend_payload_may_be_a_suspend_schema_instance(runtime_for: RuntimeFor) -> None:
    @tool(suspend_schema=Question, resume_schema=Answer)
    def ask(ctx: ToolContext) -> str:
        ctx.suspend(Question(question="Where to?"))

    agent = Agent("ops", model=scripted_model(Call("ask", {}, tool_call_id="call-1")), tools=[ask])
    runtime_for(agent)

    result = await agent.generate("go")

    assert result.status == "suspended"
    assert result.tool_calls[0].suspend_payload == {"question": "Where to?"}


async def test_suspended_call_lists_its_payload_and_both_schemas(runtime_for: RuntimeFor) -> None:
    @tool(suspend_schema=Question, resume_schema=Answer)
    def deploy(ctx: ToolContext, service: str) -> str:
        ctx.suspend({"question": f"Where should {service} go?"})

    agent = Agent(
        "ops", model=scripted_model(Call("deploy", {"service": "api"}, tool_call_id="call-1")), tools=[deploy]
    )
    runtime_for(agent)

    await agent.generate("deploy")

    [call] = only_run(await agent.list_suspended_runs()).tool_calls
    assert call.tool_call_id == "call-1"
    assert call.tool_name == "deploy"
    assert call.requires_approval is False
    assert call.args is None
    assert call.suspend_payload == {"question": "Where should api go?"}
    assert call.suspend_schema == Question.model_json_schema()
    assert call.resume_schema == Answer.model_json_schema()


async def test_tool_runs_again_from_the_top_with_the_resume_data_as_a_model_instance(
    runtime_for: RuntimeFor,
) -> None:
    executions: list[Any] = []

    @tool(suspend_schema=Question, resume_schema=Answer)
    def deploy(ctx: ToolContext, service: str) -> str:
        executions.append(ctx.resume_data)
        if ctx.resume_data is None:
            ctx.suspend({"question": "Where?"})
        return f"{service} on {ctx.resume_data.environment} x{ctx.resume_data.replicas}"

    spy = ModelSpy(Call("deploy", {"service": "api"}, tool_call_id="call-1"), Reply("deployed"))
    agent = Agent("ops", model=spy.model, tools=[deploy])
    runtime_for(agent)

    suspended = await agent.generate("deploy")
    stream = await agent.resume_stream({"environment": "staging", "replicas": "3"}, run_id=suspended.run_id)
    result = await stream.result()

    assert result.status == "success"
    assert executions[0] is None
    assert executions[1] == Answer(environment="staging", replicas=3)
    assert type(executions[1]) is Answer
    assert len(executions) == 2
    assert spy.tool_results() == {"call-1": "api on staging x3"}


DICT_RESUME_SCHEMA = {
    "type": "object",
    "properties": {"environment": {"enum": ["staging", "production"]}, "replicas": {"type": "integer"}},
    "required": ["environment"],
    "additionalProperties": False,
}


def dict_schema_agent(executions: list[Any]) -> Agent:
    @tool(resume_schema=DICT_RESUME_SCHEMA)
    def deploy(ctx: ToolContext) -> str:
        executions.append(ctx.resume_data)
        if ctx.resume_data is None:
            ctx.suspend({"question": "Where?"})
        return f"on {ctx.resume_data['environment']}"

    return Agent(
        "ops", model=scripted_model(Call("deploy", {}, tool_call_id="call-1"), Reply("done")), tools=[deploy]
    )


async def test_dict_resume_schema_gives_the_tool_the_dict(runtime_for: RuntimeFor) -> None:
    executions: list[Any] = []
    agent = dict_schema_agent(executions)
    runtime_for(agent)

    suspended = await agent.generate("deploy")
    result = await (
        await agent.resume_stream({"environment": "production"}, run_id=suspended.run_id)
    ).result()

    assert result.status == "success"
    assert executions == [None, {"environment": "production"}]
    assert suspended.tool_calls[0].resume_schema == DICT_RESUME_SCHEMA


async def test_dict_resume_schema_is_enforced_with_json_schema(runtime_for: RuntimeFor) -> None:
    executions: list[Any] = []
    agent = dict_schema_agent(executions)
    runtime_for(agent)
    suspended = await agent.generate("deploy")

    with pytest.raises(InvalidResumeData) as raised:
        await agent.resume_stream(
            {"environment": "moon", "replicas": "two", "extra": 1}, run_id=suspended.run_id
        )

    locations = sorted(tuple(e["loc"]) for e in raised.value.errors)
    assert ("environment",) in locations
    assert ("replicas",) in locations
    assert () in locations  # additionalProperties is reported on the object itself
    assert executions == [None]
    assert only_run(await agent.list_suspended_runs()).run_id == suspended.run_id
