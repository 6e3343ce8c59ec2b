"""Django's middlewares under ASGI: hooks that do no I/O stay on the event loop, the ones that write
still go to the request's thread (approvals/server/loop_middleware.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import AsyncClient

from agents_runtime import Runtime
from approvals.server.loop_middleware import LOOP_FORM_BYTES
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


async def _signed_in_with_csrf_token(user: User) -> tuple[AsyncClient, str]:
    """A client that checks CSRF as a browser is checked, signed in as ``user``, and its token."""
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(user)
    await client.get("/account/api-tokens/")  # the page that sets the token's cookie
    return client, client.cookies["csrftoken"].value


async def test_a_post_with_its_csrf_token_over_asgi_is_let_through(
    mastra: Runtime, reviewer: User, hops: list[str]
) -> None:
    client, token = await _signed_in_with_csrf_token(reviewer)
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


async def test_a_big_form_is_parsed_off_the_loop(mastra: Runtime, hops: list[str]) -> None:
    """Reading a form's CSRF token parses the whole form. 2.5 MB of percent-escapes (within
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``) cost half a second of parse, which held the loop, every page,
    socket and decision of the process, for anyone with a CSRF cookie (one they made up will do). A
    form over ``LOOP_FORM_BYTES`` is parsed on the request's thread, with the same verdict. Counted in
    the loop thread's CPU time (``time.thread_time``: the thread's work is not in it)."""
    client = AsyncClient(enforce_csrf_checks=True)
    client.cookies["csrftoken"] = "A" * 32
    form = b"username=" + b"%ZZ" * 860_000  # (escapes that are not: the slowest to parse)
    # (The first request of a process loads the URLs, the templates...: on the loop, but once.)
    await client.post("/accounts/login/", b"username=A", content_type="application/x-www-form-urlencoded")
    hops.clear()

    started = time.thread_time()
    refused = await client.post("/accounts/login/", form, content_type="application/x-www-form-urlencoded")
    on_the_loop = time.thread_time() - started

    assert refused.status_code == 403 and "The CSRF check failed" in refused.content.decode()
    # The parse alone is some 400 ms (several times that on a slow machine); the rest of the request
    # a few.
    assert on_the_loop < 0.05, on_the_loop
    assert any("CsrfViewMiddleware.process_view" in name for name in hops), hops


async def test_a_form_just_over_the_loops_size_is_let_through_from_the_thread(
    mastra: Runtime, reviewer: User, hops: list[str]
) -> None:
    client, token = await _signed_in_with_csrf_token(reviewer)
    form = urlencode({"csrfmiddlewaretoken": token, "padding": "x" * LOOP_FORM_BYTES})
    hops.clear()

    response = await client.post(
        "/account/api-tokens/nope/revoke", form, content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 302
    assert any("CsrfViewMiddleware.process_view" in name for name in hops), hops
