"""One re-check of the open pages' sessions per server process (``approvals.live.sessions``).

Every period the process checks each distinct session of its open sockets once, in a batch, and
tells each socket what its session logs in now: a session found out closes exactly its sockets, a
change to what a user may see reaches all of theirs, and a period costs the same queries however
many sockets share those sessions.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Collection
from importlib import import_module
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session as StoredSession
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.live import sessions
from tests.support.live_sockets import WAIT, Session, close_code, is_event, messages_until, next_message
from tests.support.queries import count_queries
from tests.support.runtime_fixtures import DashboardAgents

pytestmark = pytest.mark.django_db(transaction=True)

UNAUTHENTICATED = 4401
PERIOD = 0.2
#: Long enough for several periods: a socket that stays quiet this long was told nothing.
QUIET = 1.0
#: What a session check reads (the outbox relay's polling reads none of them).
LOGIN_TABLES = ("django_session", "auth_user", "auth_group")


def _delete_session(key: str) -> None:
    # Not a logout: no signal, so only the periodic re-check can find that the session is gone.
    StoredSession.objects.filter(session_key=key).delete()


def _set_designations(user: User, *agent_ids: str) -> None:
    user.groups.remove(*user.groups.filter(name__startswith="agent:"))
    for agent_id in agent_ids:
        group, _ = Group.objects.get_or_create(name=f"agent:{agent_id}")
        user.groups.add(group)


async def _disconnect(*sockets: WebsocketCommunicator) -> None:
    for socket in sockets:
        await socket.disconnect()


class Checks:
    """Records each run of the process's check: the sessions it was given and its queries."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs: list[tuple[frozenset[str], int]] = []
        self.check = sessions.check_sessions
        self.loop, self.checked = asyncio.get_running_loop(), asyncio.Event()
        monkeypatch.setattr(sessions, "check_sessions", self.recording)

    def recording(self, session_keys: Collection[str]) -> dict[str, sessions.Login]:
        # In the worker thread the check runs in: its own connection's queries.
        with CaptureQueriesContext(connection) as queries:
            logins = self.check(session_keys)
        self.runs.append((frozenset(session_keys), len(queries)))
        self.loop.call_soon_threadsafe(self.checked.set)
        return logins

    async def _next(self) -> None:
        """Until the next check has finished (the one after is most of a period away)."""
        self.checked.clear()
        await asyncio.wait_for(self.checked.wait(), WAIT)

    async def over(self, seconds: float) -> list[tuple[frozenset[str], int]]:
        """The checks in about the next ``seconds``, and that no other session or user query ran."""
        await self._next()
        with count_queries() as every_thread:
            del self.runs[:]
            await asyncio.sleep(seconds)
            await self._next()
            runs = list(self.runs)
        about_logins = [sql for sql in every_thread.sql if any(t in sql for t in LOGIN_TABLES)]
        assert len(about_logins) == sum(queries for _, queries in runs), about_logins
        return runs


async def test_a_deleted_session_closes_exactly_its_sockets(
    agents: DashboardAgents, reviewer: User, viewer: User, settings: Any
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = PERIOD
    gone, kept, other_user = await Session.of(reviewer), await Session.of(reviewer), await Session.of(viewer)
    tabs = [await gone.socket() for _ in range(3)]
    staying = [await kept.socket(), await kept.socket(), await other_user.socket()]

    await sync_to_async(_delete_session)(gone.key)

    for tab in tabs:
        assert await close_code(tab) == UNAUTHENTICATED
    for socket in staying:
        assert await socket.receive_nothing(timeout=QUIET)
    # Still open, still told about runs.
    run = await agents.agent("helpdesk").generate("refund after another login was revoked")
    for socket in staying:
        await messages_until(socket, is_event("run-suspended", run.run_id))
    await _disconnect(*staying)


async def test_a_change_to_what_a_user_may_see_reaches_every_socket_of_theirs(
    agents: DashboardAgents, reviewer: User, viewer: User, settings: Any
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = PERIOD
    first, second = await Session.of(reviewer), await Session.of(reviewer)
    theirs = [await first.socket(), await first.socket(), await second.socket(), await second.socket()]
    someone_else = await (await Session.of(viewer)).socket()

    await sync_to_async(_set_designations)(reviewer, "boss")

    for socket in theirs:
        assert (await next_message(socket, "agents"))["agents"] == ["boss"]
    assert await someone_else.receive_nothing(timeout=QUIET)
    for socket in theirs:  # told once, not every period
        assert await socket.receive_nothing(timeout=PERIOD * 2)
    await _disconnect(*theirs, someone_else)


async def test_a_period_costs_the_same_queries_for_3_sockets_as_for_30(
    agents: DashboardAgents, reviewer: User, viewer: User, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = PERIOD
    checks = Checks(monkeypatch)
    mine, theirs = await Session.of(reviewer), await Session.of(viewer)
    per_check: list[int] = []
    for count in (3, 30):
        sockets = [await (mine if i % 2 else theirs).socket() for i in range(count)]
        runs = await checks.over(QUIET)
        # One check of the two sessions a period, whatever the number of sockets on them.
        assert 3 <= len(runs) <= QUIET / (PERIOD * 0.8) + 2, runs
        assert {keys for keys, _ in runs} == {frozenset({mine.key, theirs.key})}
        assert len({queries for _, queries in runs}) == 1, runs
        per_check.append(runs[0][1])
        await _disconnect(*sockets)
    assert per_check[0] == per_check[1]
    assert per_check[0] <= 3  # the sessions, their users, the users' groups


async def test_a_socket_closing_during_a_check_leaves_the_others_checked(
    agents: DashboardAgents,
    reviewer: User,
    viewer: User,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = PERIOD
    check = sessions.check_sessions
    armed, entered, release = threading.Event(), threading.Event(), threading.Event()

    def held(session_keys: Collection[str]) -> dict[str, sessions.Login]:
        if armed.is_set() and not entered.is_set():
            entered.set()
            release.wait(WAIT)
            # Found out by this very check: no earlier one could have closed its sockets.
            _delete_session(gone.key)
        return check(session_keys)

    monkeypatch.setattr(sessions, "check_sessions", held)
    gone, other_user = await Session.of(reviewer), await Session.of(viewer)
    closing, left_open = await gone.socket(), await gone.socket()
    watching = await other_user.socket()
    armed.set()
    assert await asyncio.to_thread(entered.wait, WAIT)
    await closing.disconnect()  # while the check runs
    release.set()

    assert await close_code(left_open) == UNAUTHENTICATED
    # The watch goes on: the next periods still reach the other user's socket.
    await sync_to_async(_set_designations)(viewer, "boss")
    assert (await next_message(watching, "agents"))["agents"] == ["boss"]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    await watching.disconnect()


async def test_a_failed_check_is_logged_and_tried_again_next_period(
    agents: DashboardAgents,
    reviewer: User,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = PERIOD
    check = sessions.check_sessions
    failures = [RuntimeError("the database went away")]

    def flaky(session_keys: Collection[str]) -> dict[str, sessions.Login]:
        if failures:
            raise failures.pop()
        return check(session_keys)

    monkeypatch.setattr(sessions, "check_sessions", flaky)
    session = await Session.of(reviewer)
    socket = await session.socket()
    await sync_to_async(_delete_session)(session.key)

    assert await close_code(socket) == UNAUTHENTICATED
    assert failures == []
    assert any("re-check failed" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def _watch_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "countersign-live-session-watch"]


async def test_the_watch_stops_with_the_last_socket_and_starts_again_with_the_next(
    agents: DashboardAgents, reviewer: User, settings: Any
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = PERIOD
    first = await (await Session.of(reviewer)).socket()
    assert len(_watch_tasks()) == 1

    await first.disconnect()
    await asyncio.sleep(PERIOD)
    assert _watch_tasks() == []

    session = await Session.of(reviewer)
    again = await session.socket()
    assert len(_watch_tasks()) == 1
    await sync_to_async(_delete_session)(session.key)
    assert await close_code(again) == UNAUTHENTICATED


async def test_sessions_in_the_cache_are_checked_through_their_engine(
    agents: DashboardAgents, reviewer: User, settings: Any
) -> None:
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.cache"
    settings.LIVE_SESSION_CHECK_SECONDS = PERIOD
    gone, kept = await Session.of(reviewer), await Session.of(reviewer)
    tabs = [await gone.socket(), await gone.socket()]
    staying = await kept.socket()

    store = import_module(settings.SESSION_ENGINE).SessionStore
    await sync_to_async(store(gone.key).delete)()

    for tab in tabs:
        assert await close_code(tab) == UNAUTHENTICATED
    assert await staying.receive_nothing(timeout=QUIET)
    await sync_to_async(_set_designations)(reviewer, "boss")
    assert (await next_message(staying, "agents"))["agents"] == ["boss"]
    await staying.disconnect()


async def test_a_session_signed_with_a_fallback_secret_still_logs_in_and_is_left_as_it_is(
    agents: DashboardAgents, reviewer: User, settings: Any
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = PERIOD
    session = await Session.of(reviewer)
    socket = await session.socket()

    # The secret rotated, the old one kept as a fallback: a request would cycle the session's key (and
    # the browser get the new one); the check leaves that to the browser's next request.
    settings.SECRET_KEY_FALLBACKS, settings.SECRET_KEY = [settings.SECRET_KEY], "a brand new secret key " * 3

    assert await socket.receive_nothing(timeout=QUIET)
    assert await sync_to_async(StoredSession.objects.filter(session_key=session.key).exists)()
    await sync_to_async(_set_designations)(reviewer, "boss")
    assert (await next_message(socket, "agents"))["agents"] == ["boss"]
    await socket.disconnect()
