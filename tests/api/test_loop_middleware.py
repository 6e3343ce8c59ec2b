"""Django's middlewares under ASGI: hooks that do no I/O stay on the event loop, the ones that write
still go to the request's thread (approvals/server/loop_middleware.py)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import AsyncClient

from agents_runtime import Runtime
from tests.support.api import Api
from tests.support.queries import count_queries, thread_hops
from tests.support.users import PASSWORD

LIST = "/api/agents/approver/suspended-runs"


@pytest.fixture
def hops() -> Iterator[list[str]]:
    with thread_hops() as seen:
        yield seen


async def test_an_api_listing_sends_no_middleware_hook_to_a_thread(
    mastra: Runtime, reviewer_token: str, hops: list[str]
) -> None:
    response = await Api(reviewer_token).get(LIST)

    assert response.status_code == 200
    assert [name for name in hops if "middleware" in name.lower()] == []
    # What is left: the token's and the listing's reads, and Django's own request signals.
    assert len(hops) <= 4, hops


async def test_a_sign_in_over_asgi_saves_its_session(mastra: Runtime, reviewer: User) -> None:
    """Saving a changed session writes to the database: that hook still goes to the thread."""
    client = AsyncClient()
    response = await client.post("/accounts/login/", {"username": reviewer.username, "password": PASSWORD})
    assert response.status_code == 302

    page = await client.get("/")
    assert page.status_code == 200
    assert reviewer.username in page.content.decode()


async def test_a_page_over_asgi_reads_its_user_once(mastra: Runtime, reviewer: User) -> None:
    """The view reads ``request.user`` on its thread, ``private_pages`` awaits ``request.auser()`` on
    the loop after it: one user, one read."""
    client = AsyncClient()
    await client.aforce_login(reviewer)
    await client.get("/account/api-tokens/")

    with count_queries(background=False) as statements:
        page = await client.get("/account/api-tokens/")

    assert page.status_code == 200 and reviewer.username in page.content.decode()
    assert "no-store" in page["Cache-Control"]  # private_pages saw the signed-in user
    assert len([sql for sql in statements.sql if 'FROM "auth_user"' in sql]) == 1, statements.sql


async def test_the_answer_to_a_sign_in_over_asgi_is_private(mastra: Runtime, reviewer: User) -> None:
    """login() replaces ``request.user`` during the request: the middlewares after the view see the
    user it signed in, not the anonymous one the page began with."""
    client = AsyncClient()
    await client.get("/accounts/login/")

    response = await client.post("/accounts/login/", {"username": reviewer.username, "password": PASSWORD})

    assert response.status_code == 302
    assert "no-store" in response["Cache-Control"]


async def test_a_message_over_asgi_reaches_the_next_page(mastra: Runtime, reviewer: User) -> None:
    client = AsyncClient()
    await client.aforce_login(reviewer)
    response = await client.post("/account/api-tokens/nope/revoke")
    assert response.status_code == 302

    page = await client.get(response["Location"])
    assert "No such active token of yours." in page.content.decode()


async def test_a_post_without_its_csrf_token_over_asgi_gets_the_refusal_page(
    mastra: Runtime, reviewer: User
) -> None:
    """The refusal is decided on the loop; its page (which reads the user) is made on the thread."""
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(reviewer)

    refused = await client.post("/account/api-tokens/nope/revoke")

    assert refused.status_code == 403
    page = refused.content.decode()
    assert "Form expired or not sent by this site (403)" in page
    assert "The CSRF check failed" in page
    assert reviewer.username in page  # the page's header, as the signed-in user sees it


async def test_a_post_with_its_csrf_token_over_asgi_is_let_through(
    mastra: Runtime, reviewer: User, hops: list[str]
) -> None:
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(reviewer)
    await client.get("/account/api-tokens/")  # the page that sets the token's cookie
    token = client.cookies["csrftoken"].value
    hops.clear()

    # As a browser posts a form: url-encoded, checked on the loop.
    form = urlencode({"csrfmiddlewaretoken": token})
    response = await client.post(
        "/account/api-tokens/nope/revoke", form, content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 302
    # (Not the messages' hook: the revoke added one, which goes to the thread to be stored.)
    assert [name for name in hops if any(m in name for m in ("csrf", "security", "clickjacking"))] == []
    page = await client.get(response["Location"])
    assert "No such active token of yours." in page.content.decode()

    # A multipart form (files go to temporary files) is checked on the thread, with the same verdicts.
    hops.clear()
    response = await client.post("/account/api-tokens/nope/revoke", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert any("CsrfViewMiddleware.process_view" in name for name in hops), hops
    refused = await client.post("/account/api-tokens/nope/revoke", {"csrfmiddlewaretoken": "x" * 64})
    assert refused.status_code == 403 and "The CSRF check failed" in refused.content.decode()
