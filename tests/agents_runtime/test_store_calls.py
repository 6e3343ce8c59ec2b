"""A store says which thread runs its synchronous methods (``run_sync``); by default a worker thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from agents_runtime import Agent, Call, InMemoryRunStore, Reply, Runtime, tool
from agents_runtime.store import SyncRunner, call_store
from tests.support.runtime_helpers import ModelSpy


@dataclass
class CallerThreadStore(InMemoryRunStore):
    """Runs every call where it is asked for (here: on the event loop) and notes which ones ran."""

    ran: list[tuple[str, int]] = field(default_factory=list)

    async def run_sync[T](self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        self.ran.append((fn.__name__, threading.get_ident()))
        return fn(*args, **kwargs)


def _refund_agent() -> Agent:
    @tool(requires_approval=True)
    def refund(order_id: str) -> str:
        return f"refunded {order_id}"

    spy = ModelSpy(Call("refund", {"order_id": "A-7"}), Reply("all done"))
    return Agent("shop", model=spy.model, tools=[refund])


async def test_every_store_call_of_a_run_goes_through_the_stores_run_sync() -> None:
    store = CallerThreadStore()
    agent = _refund_agent()
    Runtime(agents=[agent], storage=store)

    run = await agent.generate("refund A-7")
    stream = await agent.approve_tool_call(run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id)
    result = await stream.result()

    assert result.status == "success"
    names = [name for name, _ in store.ran]
    # The routing rules and grants that could decide the call are read before the run is stored
    # (what they say of it, and their failures, are stored with its calls).
    assert names[:3] == ["rules_for", "live_grants", "insert_suspended"]
    assert {"decide", "finish"} <= set(names)
    assert {thread for _, thread in store.ran} == {threading.get_ident()}


async def test_a_store_without_run_sync_is_called_in_a_worker_thread() -> None:
    assert not isinstance(InMemoryRunStore(), SyncRunner)
    assert await call_store(InMemoryRunStore(), threading.get_ident) != threading.get_ident()
    assert await call_store(CallerThreadStore(), threading.get_ident) == threading.get_ident()


async def test_call_store_passes_arguments_and_errors_through() -> None:
    def divide(a: int, *, by: int) -> float:
        return a / by

    for store in (InMemoryRunStore(), CallerThreadStore()):
        assert await call_store(store, divide, 6, by=3) == 2
        with pytest.raises(ZeroDivisionError):
            await call_store(store, divide, 1, by=0)
