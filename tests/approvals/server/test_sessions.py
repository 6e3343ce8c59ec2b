"""The signed-in session's read (``approvals.server.database.SessionStore``, the ``SESSION_ENGINE``): the
same sessions as Django's database engine, read with a statement compiled once. A live session signs
its request in, through the WSGI and the ASGI handler; one past its expiry, or a key no session has,
signs nobody in."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import AsyncClient, Client
from django.utils import timezone

from tests.support.queries import count_queries


def test_the_engine_is_the_compiled_read() -> None:
    assert settings.SESSION_ENGINE == "approvals.server.database"


def test_a_live_session_signs_its_request_in(reviewer: User, client_for: Callable[[User], Client]) -> None:
    client = client_for(reviewer)

    for _ in range(2):  # (the second time from the statement compiled the first)
        with count_queries() as statements:
            page = client.get("/agents/")
        assert page.status_code == 200 and reviewer.username in page.content.decode()
        assert len([sql for sql in statements.sql if '"django_session"' in sql]) == 1


async def test_a_live_session_signs_its_request_in_over_asgi(reviewer: User) -> None:
    client = AsyncClient()
    await client.aforce_login(reviewer)

    page = await client.get("/agents/")

    assert page.status_code == 200 and reviewer.username in page.content.decode()


@pytest.mark.parametrize("asgi", [False, True], ids=["wsgi", "asgi"])
def test_a_session_past_its_expiry_signs_nobody_in(
    asgi: bool, reviewer: User, client_for: Callable[[User], Client]
) -> None:
    client = client_for(reviewer)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    Session.objects.filter(session_key=key).update(expire_date=timezone.now() - timedelta(seconds=1))

    page = _get(client, "/agents/", asgi=asgi)

    assert page.status_code == 302 and page["Location"].startswith(settings.LOGIN_URL)


@pytest.mark.parametrize("asgi", [False, True], ids=["wsgi", "asgi"])
def test_a_key_no_session_has_signs_nobody_in(
    asgi: bool, reviewer: User, client_for: Callable[[User], Client]
) -> None:
    client = client_for(reviewer)
    client.cookies[settings.SESSION_COOKIE_NAME] = "k" * 32

    page = _get(client, "/agents/", asgi=asgi)

    assert page.status_code == 302 and page["Location"].startswith(settings.LOGIN_URL)


def _get(client: Client, path: str, *, asgi: bool) -> object:
    if not asgi:
        return client.get(path)
    from asgiref.sync import async_to_sync

    over_asgi = AsyncClient()
    over_asgi.cookies = client.cookies
    return async_to_sync(over_asgi.get)(path)
