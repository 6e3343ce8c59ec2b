"""Django's middlewares under ASGI: hooks that do no I/O stay on the event loop, the ones that write
still go to the request's thread (approvals/server/loop_middleware.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from django.contrib.auth.models import User
from django.test import AsyncClient

from agents_runtime import Runtime
from tests.support.api import Api
from tests.support.users import PASSWORD

LIST = "/api/agents/approver/suspended-runs"


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The qualified names of the functions each request sent to a thread."""
    seen: list[str] = []
    original = SyncToAsync.__call__

    async def counted(self: SyncToAsync, *args: Any, **kwargs: Any) -> Any:
        func = getattr(self.func, "__func__", self.func)
        seen.append(f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}")
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    yield seen


async def test_an_api_listing_sends_no_middleware_hook_to_a_thread(
    mastra: Runtime, reviewer_token: str, hops: list[str]
) -> None:
    response = await Api(reviewer_token).get(LIST)

    assert response.status_code == 200
    on_the_loop = ("sessions", "auth", "messages", "common", "csp")
    assert [name for name in hops if any(f"{m}.middleware" in name for m in on_the_loop)] == []
    # What is left: the three middlewares Django's deploy checks find by name, the token and the
    # listing's reads, and Django's own request signals.
    assert len(hops) <= 10, hops


async def test_a_sign_in_over_asgi_saves_its_session(mastra: Runtime, reviewer: User) -> None:
    """Saving a changed session writes to the database: that hook still goes to the thread."""
    client = AsyncClient()
    response = await client.post("/accounts/login/", {"username": reviewer.username, "password": PASSWORD})
    assert response.status_code == 302

    page = await client.get("/")
    assert page.status_code == 200
    assert reviewer.username in page.content.decode()


async def test_a_message_over_asgi_reaches_the_next_page(mastra: Runtime, reviewer: User) -> None:
    client = AsyncClient()
    await client.aforce_login(reviewer)
    response = await client.post("/account/api-tokens/nope/revoke")
    assert response.status_code == 302

    page = await client.get(response["Location"])
    assert "No such active token of yours." in page.content.decode()
