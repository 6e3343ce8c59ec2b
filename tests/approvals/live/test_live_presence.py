"""Presence on the live socket: who else has a run's card open, as pages join and leave."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from asgiref.sync import sync_to_async
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User

from tests.support.live_sockets import connect, next_message
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import make_user

pytestmark = pytest.mark.django_db(transaction=True)


async def _present(user: User, run_id: str) -> WebsocketCommunicator:
    communicator, connected, _ = await connect(user)
    assert connected
    await next_message(communicator, "hello")
    await communicator.send_json_to({"presence": run_id})
    return communicator


async def _users(communicator: WebsocketCommunicator, run_id: str) -> list[str]:
    message = await next_message(communicator, "presence")
    assert message["run_id"] == run_id
    users: list[str] = message["users"]
    return users


@pytest.fixture(autouse=True)
async def fresh_layer_after() -> AsyncIterator[None]:
    """The next test gets a channel layer of its own.

    The "leave" messages of the last sockets arrive as this test's event loop closes; a Redis layer
    releases a channel's lock from a cleanup task it starts per message received, and one still
    pending then leaves the lock held, bound to this loop, for the next test's loop (one loop per
    server process in production: only tests meet this)."""
    yield
    await asyncio.sleep(0.1)
    layer = get_channel_layer()
    for _ in range(100):
        if not getattr(layer, "receive_cleaners", None):
            break
        await asyncio.sleep(0.02)
    channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)


async def test_pages_hear_who_else_has_the_card_open_and_when_they_leave(
    agents: DashboardAgents, reviewer: User, admin_member: User
) -> None:
    run = await sync_to_async(agents.start)("helpdesk", "refund presence")
    rita = await _present(reviewer, run.run_id)
    assert await _users(rita, run.run_id) == []

    ada = await _present(admin_member, run.run_id)

    assert await _users(rita, run.run_id) == ["ada"]
    seen_by_ada = await _users(ada, run.run_id)
    while not seen_by_ada:  # her own first answer may come before rita's "here"
        seen_by_ada = await _users(ada, run.run_id)
    assert seen_by_ada == ["rita"]
    # Rita's second tab is not "someone else".
    rita_tab = await _present(reviewer, run.run_id)
    users = await _users(rita_tab, run.run_id)
    while users != ["ada"]:
        users = await _users(rita_tab, run.run_id)

    await ada.disconnect()

    users = await _users(rita, run.run_id)
    while users != []:
        users = await _users(rita, run.run_id)
    await rita.disconnect()
    await rita_tab.disconnect()


async def test_presence_on_a_foreign_or_unknown_run_is_refused(
    agents: DashboardAgents, reviewer: User
) -> None:
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")

    await communicator.send_json_to({"presence": "no-such-run"})
    refused = await next_message(communicator, "error")
    await communicator.send_json_to({"presence": 12})
    bad = await next_message(communicator, "error")

    assert refused == {"type": "error", "error": "unknown run", "run_id": "no-such-run"}
    assert "presence" in bad["error"]
    await communicator.disconnect()


async def test_a_name_with_invisible_characters_is_shown_marked(
    agents: DashboardAgents, reviewer: User
) -> None:
    run = await sync_to_async(agents.start)("helpdesk", "refund presence")
    # (Django's sign-up forms refuse such a name; one made another way is still shown as it is.)
    odd = await sync_to_async(make_user)("ad\u202ea", "Reviewers")
    rita = await _present(reviewer, run.run_id)
    assert await _users(rita, run.run_id) == []

    other = await _present(odd, run.run_id)

    assert await _users(rita, run.run_id) == ["ad⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧a"]
    await other.disconnect()
    await rita.disconnect()
