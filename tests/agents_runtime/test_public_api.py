"""The package's public surface: the names runtime.md fixes, one error base class, the Runtime registry."""

from __future__ import annotations

from pathlib import Path

import pytest

import agents_runtime
from agents_runtime import Agent, InMemoryRunStore, Reply, RunStore, Runtime, scripted_model
from tests.support.runtime_helpers import ToolLog

SPEC_NAMES = [
    "Agent",
    "Runtime",
    "tool",
    "ToolContext",
    "InMemoryRunStore",
    "RunResult",
    "RunStream",
    "ListSuspendedRunsResult",
    "AgentRun",
    "AgentRunToolCall",
    "AgentsRuntimeError",
    "RunNotFound",
    "ToolCallNotSuspended",
    "RunAlreadyDecided",
    "InvalidResumeData",
    "InvalidPagination",
]

ERROR_NAMES = [
    "RunNotFound",
    "ToolCallNotSuspended",
    "RunAlreadyDecided",
    "InvalidResumeData",
    "InvalidPagination",
]


def test_spec_names_import_from_the_package() -> None:
    from agents_runtime import (  # noqa: F401 - the import itself is the test
        Agent,
        AgentRun,
        AgentRunToolCall,
        AgentsRuntimeError,
        InMemoryRunStore,
        InvalidPagination,
        InvalidResumeData,
        ListSuspendedRunsResult,
        RunAlreadyDecided,
        RunNotFound,
        RunResult,
        RunStream,
        Runtime,
        ToolCallNotSuspended,
        ToolContext,
        tool,
    )


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_spec_name_is_exported_in_all(name: str) -> None:
    assert name in agents_runtime.__all__
    assert getattr(agents_runtime, name).__module__.startswith("agents_runtime")


def test_every_name_in_all_exists() -> None:
    missing = [name for name in agents_runtime.__all__ if not hasattr(agents_runtime, name)]
    assert missing == []


@pytest.mark.parametrize("name", ERROR_NAMES)
def test_every_error_is_an_agents_runtime_error(name: str) -> None:
    assert issubclass(getattr(agents_runtime, name), agents_runtime.AgentsRuntimeError)


def test_the_package_ships_type_information() -> None:
    assert (Path(agents_runtime.__file__).parent / "py.typed").is_file()


def test_in_memory_store_implements_the_store_protocol() -> None:
    assert isinstance(InMemoryRunStore(), RunStore)


def test_runtime_registers_agents_and_their_sub_agents() -> None:
    worker = Agent("worker", model=scripted_model(Reply("ok")))
    supervisor = Agent("desk", model=scripted_model(Reply("ok")), agents=[worker])
    other = Agent("other", model=scripted_model(Reply("ok")))

    runtime = Runtime([supervisor, other])

    assert runtime.get_agent("desk") is supervisor
    assert runtime.get_agent("worker") is worker
    assert {agent.id for agent in runtime.agents} == {"desk", "worker", "other"}
    assert isinstance(runtime.storage, InMemoryRunStore)
    with pytest.raises(KeyError):
        runtime.get_agent("nobody")


def test_runtime_refuses_two_different_agents_with_one_id() -> None:
    with pytest.raises(ValueError):
        Runtime([Agent("desk", model=scripted_model()), Agent("desk", model=scripted_model())])


def test_runtime_uses_the_storage_it_is_given(store: RunStore) -> None:
    assert Runtime([], storage=store).storage is store


async def test_agent_without_runtime_works_on_a_private_store() -> None:
    log = ToolLog()

    @agents_runtime.tool(requires_approval=True)
    def refund(amount: int) -> str:
        log.record(amount=amount)
        return "refunded"

    agent = Agent(
        "solo",
        model=scripted_model(agents_runtime.Call("refund", {"amount": 3}), Reply("done")),
        tools=[refund],
    )
    suspended = await agent.generate("refund 3")
    listing = await agent.list_suspended_runs()
    stream = await agent.approve_tool_call(
        run_id=suspended.run_id, tool_call_id=suspended.tool_calls[0].tool_call_id
    )
    finished = await stream.result()

    assert suspended.status == "suspended"
    assert [run.run_id for run in listing.runs] == [suspended.run_id]
    assert finished.status == "success" and finished.text == "done"
    assert log.calls == [{"amount": 3}]
    assert (await agent.list_suspended_runs()).total == 0


async def test_agents_without_runtime_do_not_share_storage() -> None:
    def model() -> object:
        return scripted_model(agents_runtime.Call("refund", {"amount": 1}), Reply("done"))

    @agents_runtime.tool(requires_approval=True)
    def refund(amount: int) -> str:
        return "refunded"

    first = Agent("solo", model=model(), tools=[refund])
    second = Agent("solo", model=model(), tools=[refund])

    await first.generate("go")

    assert (await first.list_suspended_runs()).total == 1
    assert (await second.list_suspended_runs()).total == 0
