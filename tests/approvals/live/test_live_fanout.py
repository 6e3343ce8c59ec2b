"""Fan-out of live events: one layer membership per server process, however many pages are open."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client

from approvals.live import agent_group, querycount
from approvals.live.consumer import LiveConsumer
from approvals.live.fanout import fanout
from approvals.policy import visible_agent_ids
from approvals.server import layers
from config.asgi import application
from tests.support.runtime_fixtures import DashboardAgents


def _headers(user: User) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    session = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    return [
        (b"origin", b"http://127.0.0.1"),
        (b"host", b"127.0.0.1"),
        (b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={session}".encode()),
    ]


async def _open(user: User) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        application, "/ws/live/", headers=await sync_to_async(_headers)(user)
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    assert (await communicator.receive_json_from(timeout=5))["type"] == "hello"
    return communicator


async def _event(communicator: WebsocketCommunicator) -> dict[str, Any]:
    while True:
        message = await communicator.receive_json_from(timeout=10)
        if message["type"] == "event":
            return dict(message["event"])


async def _events_within(communicator: WebsocketCommunicator, seconds: float) -> list[dict[str, Any]]:
    events = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    # receive_nothing peeks; a receive that times out would cancel the consumer.
    while (left := deadline - loop.time()) > 0 and not await communicator.receive_nothing(timeout=left):
        message = await communicator.receive_json_from()
        if message["type"] == "event":
            events.append(message["event"])
    return events


@pytest.mark.django_db(transaction=True)
async def test_every_open_page_gets_the_event_through_one_layer_membership(
    agents: DashboardAgents, reviewer: User
) -> None:
    pages = [await _open(reviewer) for _ in range(3)]
    layer = get_channel_layer()
    group = agent_group("helpdesk")
    if isinstance(layer, layers.InMemoryChannelLayer):
        assert len(layer.groups[group]) == 1

    run = await agents.agent("helpdesk").generate("refund broken parcel")

    for page in pages:
        event = await _event(page)
        assert (event["type"], event["run_id"]) == ("run-suspended", run.run_id)
        # One copy each, not one per group the page is in.
        assert run.run_id not in {e["run_id"] for e in await _events_within(page, 0.3)}
    for page in pages:
        await page.disconnect()
    if isinstance(layer, layers.InMemoryChannelLayer):
        assert not layer.groups.get(group)


PAGES = 6


async def _fan_out_one_event(agents: DashboardAgents, reviewer: User) -> dict[str, int]:
    """Open ``PAGES`` pages, suspend a run, wait for its event on each: the queries counted meanwhile."""
    pages = [await _open(reviewer) for _ in range(PAGES)]
    with querycount.counting():
        run = await agents.agent("helpdesk").generate("refund broken parcel")
        for page in pages:
            event = await _event(page)
            assert (event["type"], event["run_id"]) == ("run-suspended", run.run_id)
        counts = querycount.snapshot()
    for page in pages:
        await page.disconnect()
    return counts


@pytest.mark.django_db(transaction=True)
async def test_fanning_an_event_out_to_the_open_pages_makes_no_query(
    agents: DashboardAgents, reviewer: User
) -> None:
    counts = await _fan_out_one_event(agents, reviewer)

    # The event is id-only and each socket's access was resolved when it connected: however many
    # pages a process holds, handing them an event costs the database nothing (issue 15).
    assert counts["fanout"] == 0
    assert counts["other"] > 0  # the suspension itself: the counter sees this test's queries


@pytest.mark.django_db(transaction=True)
async def test_a_query_per_page_on_the_way_of_an_event_would_be_counted(
    agents: DashboardAgents, reviewer: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the first test guards against: a page that re-checks its access per event, in the database.
    forward = LiveConsumer.forward

    async def checking_forward(self: LiveConsumer, message: dict[str, Any]) -> None:
        if message["type"] == "run.event" and self.accepted:
            # A fresh user each time: a user object keeps the rights it read.
            user = await User.objects.aget(pk=self.scope["user"].pk)
            self.agent_ids = await database_sync_to_async(visible_agent_ids)(user)
        await forward(self, message)

    monkeypatch.setattr(LiveConsumer, "forward", checking_forward)

    counts = await _fan_out_one_event(agents, reviewer)

    assert counts["fanout"] >= PAGES


async def test_in_process_layer_still_sweeps_expired_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "SWEEP_INTERVAL", 0.0)
    layer = layers.InMemoryChannelLayer(expiry=0.05)
    await layer.group_add("g", "specific.x!a")
    await layer.group_send("g", {"type": "never.read"})
    await asyncio.sleep(0.1)

    await layer.group_send("g", {"type": "next"})

    # As in Channels: the expired message is dropped, and its reader, presumed dead, leaves the group.
    assert "specific.x!a" not in layer.channels
    assert "specific.x!a" not in layer.groups.get("g", {})


class _Page:
    """A member that notes what reaches it, in the event loop it was joined in."""

    def __init__(self) -> None:
        self.got: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def forward(self, message: dict[str, Any]) -> None:
        await self.got.put(message)


@pytest.mark.redis
async def test_two_event_loops_of_one_process_both_get_their_pages_events() -> None:
    # A process may run more than one loop with pages in it (a server thread beside the main loop,
    # async views run by a WSGI server). channels_redis lets one loop at a time receive on a layer
    # instance: each loop's fan-out must still receive.
    group = f"fanout-loops-{uuid.uuid4().hex}"
    other_loop = asyncio.new_event_loop()

    def run_other_loop() -> None:
        other_loop.run_forever()
        other_loop.close()  # here: channels_redis closes its connections in the closing loop

    thread = threading.Thread(target=run_other_loop, daemon=True)
    thread.start()
    try:

        async def join_there() -> _Page:
            page = _Page()
            await fanout.join(group, page)
            return page

        there = asyncio.run_coroutine_threadsafe(join_there(), other_loop).result(10)
        here = _Page()
        await fanout.join(group, here)

        await get_channel_layer().group_send(group, {"type": "run.event", "group": group, "n": 1})

        assert (await asyncio.wait_for(here.got.get(), 10))["n"] == 1
        received = asyncio.run_coroutine_threadsafe(asyncio.wait_for(there.got.get(), 10), other_loop)
        assert received.result(15)["n"] == 1
        await fanout.leave(group, here)
        asyncio.run_coroutine_threadsafe(fanout.leave(group, there), other_loop).result(10)
    finally:
        for task in asyncio.run_coroutine_threadsafe(_tasks_of_loop(), other_loop).result(10):
            other_loop.call_soon_threadsafe(task.cancel)
        other_loop.call_soon_threadsafe(other_loop.stop)
        thread.join(10)
        fanout.forget_closed_loops()


async def _tasks_of_loop() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]
