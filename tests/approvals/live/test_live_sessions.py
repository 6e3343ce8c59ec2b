"""A live socket lives only as long as its session: logouts, revoked sessions and changed access.

These run on whichever channel layer the settings give (in-process with its outbox, or Redis), so a
logout reaches the sockets through the same path as run events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session as StoredSession
from django.utils import timezone

from approvals.live import sessions
from tests.support.live_sockets import Session, close_code, is_event, messages_until, next_message
from tests.support.runtime_fixtures import DashboardAgents

pytestmark = pytest.mark.django_db(transaction=True)

UNAUTHENTICATED = 4401


async def test_logging_out_closes_that_sessions_sockets_and_no_others(
    agents: DashboardAgents, reviewer: User, settings: Any
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = 3600  # the logout itself must close them, not a re-check
    leaving, staying = await Session.of(reviewer), await Session.of(reviewer)
    tabs = [await leaving.socket(), await leaving.socket()]
    other_browser = await staying.socket()

    await leaving.log_out()

    for tab in tabs:
        assert await close_code(tab) == UNAUTHENTICATED
    # The reviewer's other login still gets events.
    run = await agents.agent("helpdesk").generate("refund after a logout elsewhere")
    await messages_until(other_browser, is_event("run-suspended", run.run_id))
    await other_browser.disconnect()


def _delete(user: User, key: str) -> None:
    StoredSession.objects.filter(session_key=key).delete()


def _expire(user: User, key: str) -> None:
    StoredSession.objects.filter(session_key=key).update(expire_date=timezone.now() - timedelta(seconds=1))


def _deactivate(user: User, key: str) -> None:
    User.objects.filter(pk=user.pk).update(is_active=False)


def _change_password(user: User, key: str) -> None:
    user.set_password("a brand new passphrase")
    user.save()


@pytest.mark.parametrize("revoke", [_delete, _expire, _deactivate, _change_password])
async def test_socket_closes_once_its_session_no_longer_logs_anyone_in(
    agents: DashboardAgents, reviewer: User, settings: Any, revoke: Any
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = 0.2
    session = await Session.of(reviewer)
    socket = await session.socket()

    await sync_to_async(revoke)(reviewer, session.key)

    assert await close_code(socket) == UNAUTHENTICATED


def _set_designations(user: User, *agent_ids: str) -> None:
    user.groups.remove(*user.groups.filter(name__startswith="agent:"))
    for agent_id in agent_ids:
        group, _ = Group.objects.get_or_create(name=f"agent:{agent_id}")
        user.groups.add(group)


async def test_socket_follows_changes_to_the_agents_its_user_may_see(
    agents: DashboardAgents, reviewer: User, settings: Any
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = 0.2
    await sync_to_async(_set_designations)(reviewer, "helpdesk", "boss")
    watched = await agents.agent("helpdesk").generate("refund watched then hidden")
    socket = await (await Session.of(reviewer)).socket()
    await socket.send_json_to({"subscribe_run": watched.run_id})
    await next_message(socket, "subscribed")

    # Taken off the help desk's reviewers: its events and its run's output stop.
    await sync_to_async(_set_designations)(reviewer, "boss")
    assert (await next_message(socket, "agents"))["agents"] == ["boss"]
    stream = await agents.agent("helpdesk").approve_tool_call(
        run_id=watched.run_id, tool_call_id=watched.tool_calls[0].tool_call_id
    )
    assert (await stream.result()).status == "success"
    await agents.agent("helpdesk").generate("refund nobody here may see")
    boss_run = await agents.agent("boss").generate("wipe the old server")
    seen = await messages_until(socket, is_event("run-suspended", boss_run.run_id))
    assert [m for m in seen if m["type"] == "chunk"] == []
    assert {m["event"]["agent_id"] for m in seen if m["type"] == "event"} == {"boss"}

    # Put back: the help desk's events come again.
    await sync_to_async(_set_designations)(reviewer, "helpdesk", "boss")
    assert (await next_message(socket, "agents"))["agents"] == ["helpdesk", "boss"]
    again = await agents.agent("helpdesk").generate("refund visible again")
    await messages_until(socket, is_event("run-suspended", again.run_id))
    await socket.disconnect()


async def test_pages_that_connected_together_are_checked_together_once_a_period(
    agents: DashboardAgents, reviewer: User, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a restart or a deploy every page reconnects at once. Each page checking its own session
    # put thousands of checks (three queries each) in every period (issue 15: 5,000 sockets); the
    # process checks its pages' sessions together instead: once a period for all of them, the first
    # time anywhere in the first period (so processes started together do not check in step).
    settings.LIVE_SESSION_CHECK_SECONDS = period = 2.0
    checks: list[tuple[float, frozenset[str]]] = []
    check = sessions.check_sessions

    def recording(session_keys: Collection[str]) -> dict[str, sessions.Login]:
        checks.append((time.monotonic(), frozenset(session_keys)))
        return check(session_keys)

    monkeypatch.setattr(sessions, "check_sessions", recording)
    session = await Session.of(reviewer)
    opened = time.monotonic()
    sockets = [await session.socket() for _ in range(16)]
    await asyncio.sleep(period + 0.5)  # the first check is due by then

    assert 1 <= len(checks) <= 2, checks  # not one per page
    first_at, keys = checks[0]
    assert keys == {session.key}
    assert first_at - opened < period + 0.5, checks
    for socket in sockets:
        await socket.disconnect()
