"""``resume_stream``: validation against the resume schema, the optional tool_call_id, approvals."""

from __future__ import annotations

from enum import Enum
from typing import Any

import pydantic
import pytest

from agents_runtime import (
    Agent,
    Call,
    InvalidResumeData,
    Reply,
    RunStore,
    ToolCallNotSuspended,
    ToolContext,
    tool,
)
from tests.support.runtime_helpers import ModelSpy, ToolLog, only_run, stored_run

from .conftest import RuntimeFor


class Environment(Enum):
    STAGING = "staging"
    PRODUCTION = "production"


class DeployAnswer(pydantic.BaseModel):
    environment: Environment
    replicas: int = pydantic.Field(ge=1)
    confirm: bool
    note: str = ""


def deploy_setup(executions: list[Any]) -> tuple[Agent, ModelSpy]:
    @tool(resume_schema=DeployAnswer)
    def deploy(ctx: ToolContext, service: str) -> str:
        executions.append(ctx.resume_data)
        if ctx.resume_data is None:
            ctx.suspend({"question": f"Where should {service} go?"})
        answer = ctx.resume_data
        return f"{service} -> {answer.environment.value} x{answer.replicas}"

    spy = ModelSpy(Call("deploy", {"service": "api"}, tool_call_id="call-1"), Reply("Deployed."))
    return Agent("ops", model=spy.model, tools=[deploy]), spy


async def test_resume_runs_the_tool_with_the_validated_data(runtime_for: RuntimeFor) -> None:
    executions: list[Any] = []
    agent, spy = deploy_setup(executions)
    runtime_for(agent)
    suspended = await agent.generate("deploy api")

    stream = await agent.resume_stream(
        {"environment": "production", "replicas": 2, "confirm": True},
        run_id=suspended.run_id,
        tool_call_id="call-1",
    )
    result = await stream.result()

    assert result.status == "success"
    assert result.run_id == stream.run_id == suspended.run_id
    assert executions == [None, DeployAnswer(environment=Environment.PRODUCTION, replicas=2, confirm=True)]
    assert spy.tool_results() == {"call-1": "api -> production x2"}


@pytest.mark.parametrize(
    ("data", "bad_fields"),
    [
        ({"environment": "moon", "replicas": 2, "confirm": True}, {"environment"}),
        ({"environment": "staging", "replicas": 0, "confirm": True}, {"replicas"}),
        ({"environment": "staging", "replicas": "many", "confirm": "perhaps"}, {"replicas", "confirm"}),
        ({"replicas": 1}, {"environment", "confirm"}),
    ],
    ids=["enum", "minimum", "types", "missing"],
)
async def test_invalid_resume_data_is_refused_with_field_errors_and_the_run_stays_unchanged(
    runtime_for: RuntimeFor, store: RunStore, data: dict[str, Any], bad_fields: set[str]
) -> None:
    executions: list[Any] = []
    agent, spy = deploy_setup(executions)
    runtime_for(agent)
    suspended = await agent.generate("deploy api")
    listed, stored = await agent.list_suspended_runs(), await stored_run(store, suspended.run_id)

    with pytest.raises(InvalidResumeData) as raised:
        await agent.resume_stream(data, run_id=suspended.run_id, tool_call_id="call-1")

    assert {e["loc"][0] for e in raised.value.errors} == bad_fields
    assert all(e["msg"] for e in raised.value.errors)
    assert await agent.list_suspended_runs() == listed
    assert only_run(listed).run_id == suspended.run_id
    assert await stored_run(store, suspended.run_id) == stored
    assert executions == [None]
    assert spy.calls == 1


async def test_tool_call_id_may_be_left_out_when_one_call_is_parked(runtime_for: RuntimeFor) -> None:
    executions: list[Any] = []
    agent, _ = deploy_setup(executions)
    runtime_for(agent)
    suspended = await agent.generate("deploy api")

    result = await (
        await agent.resume_stream(
            {"environment": "staging", "replicas": 1, "confirm": True}, run_id=suspended.run_id
        )
    ).result()

    assert result.status == "success"
    assert len(executions) == 2


async def test_tool_call_id_must_be_given_when_several_calls_are_parked(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    @tool
    def ask(ctx: ToolContext, topic: str) -> str:
        if ctx.resume_data is None:
            ctx.suspend({"topic": topic})
        return "ok"

    agent = Agent(
        "ops",
        model=ModelSpy(
            [
                Call("ask", {"topic": "a"}, tool_call_id="call-a"),
                Call("ask", {"topic": "b"}, tool_call_id="call-b"),
            ]
        ).model,
        tools=[ask],
    )
    runtime_for(agent)
    suspended = await agent.generate("ask twice")
    stored = await stored_run(store, suspended.run_id)

    with pytest.raises(ToolCallNotSuspended):
        await agent.resume_stream({"answer": 1}, run_id=suspended.run_id)

    assert await stored_run(store, suspended.run_id) == stored
    assert len(only_run(await agent.list_suspended_runs()).tool_calls) == 2


# -- approval calls answered through resume_stream -------------------------------------------------


def refund_setup(log: ToolLog) -> tuple[Agent, ModelSpy]:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        log.record(amount=amount)
        return f"refunded {amount}"

    spy = ModelSpy(Call("refund", {"amount": 40}, tool_call_id="call-1"), Reply("Done."))
    return Agent("support", model=spy.model, tools=[refund]), spy


async def test_resume_with_approved_true_approves(runtime_for: RuntimeFor) -> None:
    log = ToolLog()
    agent, spy = refund_setup(log)
    runtime_for(agent)
    suspended = await agent.generate("refund")

    result = await (await agent.resume_stream({"approved": True}, run_id=suspended.run_id)).result()

    assert result.status == "success"
    assert log.calls == [{"amount": 40}]
    assert spy.tool_results() == {"call-1": "refunded 40"}


@pytest.mark.parametrize(
    ("data", "model_hears"),
    [
        ({"approved": False, "reason": "Too much"}, "Too much"),
        ({"approved": False}, "Tool call was not approved by the user"),
    ],
    ids=["with-reason", "default-reason"],
)
async def test_resume_with_approved_false_declines(
    runtime_for: RuntimeFor, data: dict[str, Any], model_hears: str
) -> None:
    log = ToolLog()
    agent, spy = refund_setup(log)
    runtime_for(agent)
    suspended = await agent.generate("refund")

    result = await (await agent.resume_stream(data, run_id=suspended.run_id, tool_call_id="call-1")).result()

    assert result.status == "success"
    assert log.count == 0
    assert spy.tool_results() == {"call-1": model_hears}


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"approved": "yes"},
        {"approved": 1},
        {"approved": None},
        {"approved": True, "extra": 1},
        {"approved": False, "reason": 3},
        {"reason": "no"},
        "approve",
        True,
        None,
        [{"approved": True}],
    ],
    ids=repr,
)
async def test_resume_of_an_approval_with_anything_else_is_invalid(
    runtime_for: RuntimeFor, store: RunStore, data: Any
) -> None:
    log = ToolLog()
    agent, spy = refund_setup(log)
    runtime_for(agent)
    suspended = await agent.generate("refund")
    stored = await stored_run(store, suspended.run_id)

    with pytest.raises(InvalidResumeData):
        await agent.resume_stream(data, run_id=suspended.run_id, tool_call_id="call-1")

    assert await stored_run(store, suspended.run_id) == stored
    assert log.count == 0
    assert spy.calls == 1


# -- suspending again ------------------------------------------------------------------------------


async def test_tool_that_suspends_again_keeps_the_run_id_and_lists_the_new_payload(
    runtime_for: RuntimeFor,
) -> None:
    executions: list[Any] = []

    @tool
    def interview(ctx: ToolContext) -> str:
        executions.append(ctx.resume_data)
        if ctx.resume_data is None:
            ctx.suspend({"question": "Name?"})
        if "age" not in ctx.resume_data:
            ctx.suspend({"question": f"Age of {ctx.resume_data['name']}?"})
        return f"{ctx.resume_data['name']} is {ctx.resume_data['age']}"

    spy = ModelSpy(Call("interview", {}, tool_call_id="call-1"), Reply("Thanks."))
    agent = Agent("hr", model=spy.model, tools=[interview])
    runtime_for(agent)
    first = await agent.generate("interview")
    first_listed = only_run(await agent.list_suspended_runs())

    second = await (await agent.resume_stream({"name": "Ann"}, run_id=first.run_id)).result()
    second_listed = only_run(await agent.list_suspended_runs())
    final = await (await agent.resume_stream({"name": "Ann", "age": 40}, run_id=first.run_id)).result()

    assert second.status == "suspended"
    assert second.run_id == first.run_id == second_listed.run_id
    assert [c.suspend_payload for c in second.tool_calls] == [{"question": "Age of Ann?"}]
    assert [c.suspend_payload for c in second_listed.tool_calls] == [{"question": "Age of Ann?"}]
    assert second_listed.suspended_at > first_listed.suspended_at
    assert second_listed.created_at == first_listed.created_at
    assert final.status == "success"
    assert spy.tool_results() == {"call-1": "Ann is 40"}
    assert executions == [None, {"name": "Ann"}, {"name": "Ann", "age": 40}]


async def test_approved_tool_that_then_suspends_waits_for_resume_data_on_the_same_call(
    runtime_for: RuntimeFor,
) -> None:
    executions: list[Any] = []

    @tool(requires_approval=True, resume_schema=DeployAnswer)
    def deploy(ctx: ToolContext, service: str) -> str:
        executions.append(ctx.resume_data)
        if ctx.resume_data is None:
            ctx.suspend({"question": f"Where should {service} go?"})
        return f"{service} -> {ctx.resume_data.environment.value}"

    spy = ModelSpy(Call("deploy", {"service": "api"}, tool_call_id="call-1"), Reply("Deployed."))
    agent = Agent("ops", model=spy.model, tools=[deploy])
    runtime_for(agent)
    suspended = await agent.generate("deploy api")

    approved = await (await agent.approve_tool_call(run_id=suspended.run_id, tool_call_id="call-1")).result()
    [waiting] = only_run(await agent.list_suspended_runs()).tool_calls
    result = await (
        await agent.resume_stream(
            {"environment": "staging", "replicas": 1, "confirm": True}, run_id=suspended.run_id
        )
    ).result()

    assert suspended.tool_calls[0].requires_approval is True
    assert executions[0] is None and len(executions) == 2
    assert approved.status == "suspended"
    assert (waiting.tool_call_id, waiting.requires_approval, waiting.suspend_payload) == (
        "call-1",
        False,
        {"question": "Where should api go?"},
    )
    assert waiting.resume_schema == DeployAnswer.model_json_schema()
    assert result.status == "success"
    assert spy.tool_results() == {"call-1": "api -> staging"}


async def test_resume_data_for_a_sub_agents_tool_is_validated_on_the_supervisor(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    executions: list[Any] = []
    worker_agent, _ = deploy_setup(executions)
    supervisor = Agent(
        "desk",
        model=ModelSpy(
            Call("agent_ops", {"prompt": "deploy api"}, tool_call_id="deleg-1"), Reply("ok")
        ).model,
        agents=[worker_agent],
    )
    runtime_for(supervisor)
    outer = await supervisor.generate("deploy")
    stored = await stored_run(store, outer.run_id)

    with pytest.raises(InvalidResumeData) as raised:
        await supervisor.resume_stream({"environment": "moon"}, run_id=outer.run_id, tool_call_id="deleg-1")
    unchanged = await stored_run(store, outer.run_id) == stored
    result = await (
        await supervisor.resume_stream(
            {"environment": "staging", "replicas": 2, "confirm": True}, run_id=outer.run_id
        )
    ).result()

    assert {e["loc"][0] for e in raised.value.errors} == {"environment", "replicas", "confirm"}
    assert unchanged
    assert result.status == "success"
    assert executions == [None, DeployAnswer(environment=Environment.STAGING, replicas=2, confirm=True)]
