"""One database connection per request: where the run store's calls run, and who gives connections back.

A sync view calls the runtime through ``async_to_sync``; the store's calls must come back to the
request's own thread (its connection), not go to worker threads that each need one more connection
(ten requests holding a pool of ten while their workers waited for an eleventh deadlocked the pool).
From purely async code they run on asgiref's shared thread, which must not keep a pooled connection.
And a request's thread returns its connection even when the request was cut off mid-view.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.db.backends.utils import CursorWrapper
from django.test import Client

from agents_runtime import Agent, Call, Reply, Runtime, tool
from approvals.server.database import RequestThreads
from approvals.store import DjangoRunStore
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.runtime_helpers import ModelSpy


@contextmanager
def statement_threads() -> Iterator[list[int]]:
    """The thread of every SQL statement run meanwhile, on any connection of any thread."""
    threads: list[int] = []
    original = CursorWrapper._execute

    def execute(self: CursorWrapper, sql: str, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return original(self, sql, *args, **kwargs)

    CursorWrapper._execute = execute  # type: ignore[method-assign]
    try:
        yield threads
    finally:
        CursorWrapper._execute = original  # type: ignore[method-assign]


def test_every_statement_of_a_dashboard_request_runs_on_the_requests_own_thread(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund broken parcel")
    call = run.tool_calls[0]

    with statement_threads() as threads:
        inbox = reviewer_client.get("/agents/helpdesk/")
        approved = reviewer_client.post(
            f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve",
            {"agent": "helpdesk"},
            HTTP_HX_REQUEST="true",
        )

    assert (inbox.status_code, approved.status_code) == (200, 200)
    assert agents.executed["refund"].count == 1
    # Listing, deciding and continuing the run included: one thread, so one connection at a time.
    assert threads and set(threads) == {threading.get_ident()}


class _ThreadNotingStore(DjangoRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def insert_suspended(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.add(threading.get_ident())
        return super().insert_suspended(*args, **kwargs)

    def decide(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.add(threading.get_ident())
        return super().decide(*args, **kwargs)

    def finish(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.add(threading.get_ident())
        return super().finish(*args, **kwargs)


def _refund_agent(store: DjangoRunStore) -> Agent:
    @tool(requires_approval=True)
    def refund(order_id: str) -> str:
        return f"refunded {order_id}"

    agent = Agent(
        "shop", model=ModelSpy(Call("refund", {"order_id": "A-7"}), Reply("done")).model, tools=[refund]
    )
    Runtime(agents=[agent], storage=store)
    return agent


@pytest.mark.django_db(transaction=True)
async def test_from_async_code_store_calls_run_on_the_shared_thread_which_keeps_no_pooled_connection() -> (
    None
):
    store = _ThreadNotingStore()
    agent = _refund_agent(store)

    run = await agent.generate("refund A-7")
    stream = await agent.approve_tool_call(run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id)
    assert (await stream.result()).status == "success"

    shared = await sync_to_async(threading.get_ident)()
    assert store.threads == {shared}
    assert threading.get_ident() not in store.threads
    held = await sync_to_async(lambda: connections["default"].connection is not None)()
    if connections["default"].vendor == "postgresql":
        # Given back to the pool after each call; SQLite keeps its file handle (no pool).
        assert not held


@pytest.mark.django_db(transaction=True)
async def test_a_requests_thread_closes_its_connection_even_when_the_request_was_cancelled() -> None:
    started, finish = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def view() -> None:
        connection = connections["default"]
        connection.ensure_connection()
        seen["connection"], seen["thread"] = connection, threading.current_thread()
        started.set()
        finish.wait(10)  # the client went away meanwhile; the view goes on

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await sync_to_async(view)()

    threads = RequestThreads(app)
    request = asyncio.ensure_future(threads({"type": "http"}, None, None))
    assert await asyncio.to_thread(started.wait, 10)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert seen["thread"].name.startswith("countersign-request")
    assert seen["connection"].connection is not None  # still the view's
    assert threads._idle == []  # not offered to the next request while the view still runs

    finish.set()
    for _ in range(100):
        if threads._idle:
            break
        await asyncio.sleep(0.05)
    assert len(threads._idle) == 1  # waiting for the next request, its connection given back
    # (To the pool on PostgreSQL; SQLite's, a file handle, stays with the thread: CONN_MAX_AGE None.)
    assert (seen["connection"].connection is None) == (seen["connection"].vendor == "postgresql")


@pytest.mark.django_db(transaction=True)
async def test_the_next_request_reuses_a_thread_whose_connection_was_given_back() -> None:
    seen: list[tuple[threading.Thread, bool]] = []

    def view() -> None:
        connection = connections["default"]
        seen.append((threading.current_thread(), connection.connection is None))
        connection.ensure_connection()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await sync_to_async(view)()

    threads = RequestThreads(app)
    for _ in range(3):
        await threads({"type": "http"}, None, None)
        for _ in range(100):  # the clean-up runs on the thread after the request
            if threads._idle:
                break
            await asyncio.sleep(0.01)

    assert len({thread for thread, _ in seen}) == 1
    if connections["default"].vendor == "postgresql":
        # Each request starts without the last one's connection (it went back to the pool).
        assert [closed for _, closed in seen] == [True, True, True]
    else:
        # The thread's SQLite connection, opened once, serves the next requests.
        assert [closed for _, closed in seen] == [True, False, False]


async def test_other_protocols_pass_through_request_threads() -> None:
    scopes: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope["type"])

    await RequestThreads(app)({"type": "websocket"}, None, None)
    assert scopes == ["websocket"]
