"""Hostile input against the read surfaces, round two: ids a client chooses, page links taken apart,
posted selections and path ids that cannot name anything stored.

The standard: bad input gets a clear error and changes nothing; never a 500; every page of the desk
keeps working whatever one API client sent. Each case runs on SQLite and, with ``DATABASE_URL``, on
PostgreSQL (which refuses NUL in text: some cases only fail there).
"""

from __future__ import annotations

import base64
import html
import json
import re
from typing import Any
from urllib.parse import urljoin, urlsplit

from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.urls import resolve

from approvals.models import ApiToken, Batch
from approvals.services.tokens import create_token
from tests.support.api import Api, read
from tests.support.hostile_runtime import Call, Hostile


def _token(place: list[Any]) -> str:
    """A page link's ``after`` as ``forms.filters`` writes one, holding whatever a test puts in it."""
    return base64.urlsafe_b64encode(json.dumps(place).encode()).decode().rstrip("=")


def _bearer(user: User) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(user, name='hostile').plaintext}"}


async def _api(user: User) -> Api:
    plaintext = await sync_to_async(lambda: create_token(user, name="hostile").plaintext)()
    return Api(plaintext)


async def test_a_run_id_an_ag_ui_client_chooses_never_breaks_the_inbox_or_the_queue(
    hostile: Hostile, reviewer: User, reviewer_client: Client
) -> None:
    """AG-UI's ``runId`` is the client's; a run named ``a/b`` has no dashboard URL (``reverse``
    fails): its own stream broke, and every list that shows it (the agent's inbox, every reviewer's
    queue) answered 500 until the run was decided elsewhere."""
    hostile.steps["pay bob"] = Call("pay", {"target": "bob"})
    body = {
        "threadId": "t1",
        "runId": "a/b",
        "messages": [{"id": "m1", "role": "user", "content": "pay bob"}],
    }

    answer = await (await _api(reviewer)).post("/api/ag-ui/agents/hostile", body)

    assert b"internal_error" not in await read(answer)
    reviewer_client.raise_request_exception = False
    for url in ["/agents/hostile/", "/queue/", "/"]:
        for headers in ({}, {"HX-Request": "true"}):
            response = await sync_to_async(reviewer_client.get)(url, headers=headers)
            assert response.status_code == 200, (url, headers)


async def test_a_run_id_of_dots_is_refused_or_its_links_reach_the_run(
    hostile: Hostile, reviewer: User, reviewer_client: Client
) -> None:
    """Mastra's ``runId`` may be ``.`` or ``..`` (``params.RUN_ID``); the inbox then links the run as
    ``/runs/../``, which a browser resolves to ``/``: the run page and its forms are out of reach."""
    api = await _api(reviewer)
    for count, run_id in enumerate(["..", "."]):
        prompt = f"pay {count}"
        hostile.steps[prompt] = Call("pay", {"target": "bob"})
        answer = await api.post("/api/agents/hostile/stream", {"messages": prompt, "runId": run_id})
        body = await read(answer)
        if answer.status_code != 200:
            assert answer.status_code == 400 and b"runId" in body, (run_id, answer.status_code)
            continue
        inbox = (await sync_to_async(reviewer_client.get)("/agents/hostile/")).content.decode()
        links = {
            link
            for link in re.findall(r'href="(/runs/[^"]*)"', inbox)
            if "/calls/" not in link and link != "/runs/new/"
        }
        assert links, run_id
        for link in links:
            # Where a browser goes: dot segments resolved (RFC 3986), as urljoin does.
            path = urlsplit(urljoin("http://testserver/agents/hostile/", html.unescape(link))).path
            match = resolve(path) if path.startswith("/runs/") else None
            assert match is not None and match.url_name == "run", (run_id, link, path)


def test_a_damaged_queue_link_is_a_form_error_not_a_500(hostile: Hostile, reviewer_client: Client) -> None:
    """The queue's ``after`` carries a run id; one that no database can compare (a lone surrogate; NUL
    on PostgreSQL) reached the query and failed the page."""
    hostile.start(Call("pay", {"target": "bob"}))
    reviewer_client.raise_request_exception = False

    for run_id in ["\ud800", "a\x00b", "r" * 5000]:
        after = _token([None, "2026-01-01T00:00:00+00:00", run_id])
        page = reviewer_client.get("/queue/", {"after": after})
        partial = reviewer_client.get("/queue/", {"after": after}, headers={"HX-Request": "true"})

        assert page.status_code == 400, (repr(run_id[:10]), page.status_code)
        assert partial.status_code == 200, (repr(run_id[:10]), partial.status_code)
        assert "damaged" in partial.content.decode()


def test_a_forged_bulk_selection_changes_nothing_and_is_not_a_500(
    hostile: Hostile, reviewer_client: Client
) -> None:
    """The inbox's bulk form posts ``call`` pairs as JSON; ids that cannot name a stored call (NUL, a
    lone surrogate, longer than any id) failed the request on the way to the database."""
    run = hostile.start(Call("pay", {"target": "bob"}))
    reviewer_client.raise_request_exception = False

    for pair in [
        '["\\ud800", "call_0"]',
        '["a\\u0000b", "call_0"]',
        json.dumps([run.run_id, "c\x00"]),
        json.dumps(["r" * 5000, "c"]),
    ]:
        response = reviewer_client.post("/agents/hostile/batches/new", {"call": pair})

        assert response.status_code < 500, (pair[:30], response.status_code)
        assert not Batch.objects.exists(), pair[:30]
    assert hostile.ran == 0


def test_an_api_token_id_that_cannot_be_stored_is_not_found(
    hostile: Hostile, reviewer: User, reviewer_client: Client
) -> None:
    """``/account/api-tokens/<key_id>/revoke`` took any text: ``%00`` reached PostgreSQL (500)."""
    create_token(reviewer, name="kept")
    reviewer_client.raise_request_exception = False

    for key_id in ["x%00", "%00", "a%00b"]:
        response = reviewer_client.post(f"/account/api-tokens/{key_id}/revoke")

        assert response.status_code in (302, 404), (key_id, response.status_code)
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 1


def test_the_api_audit_log_reads_a_bare_number_as_no_date(hostile: Hostile, admin_member: User) -> None:
    """``/api/v1/audit?from=2026`` (a year) or ``from=20260101`` (ISO 8601's basic form) was read by
    pydantic as Unix seconds (1970): a filter other than the one asked, with no error. The dashboard's
    form refuses both; the OpenAPI document promises a date or a date-time."""
    client = Client()
    for value in ["2026", "20260101", "1e9", "-5"]:
        for name in ("from", "to"):
            response = client.get("/api/v1/audit", {name: value}, headers=_bearer(admin_member))

            assert response.status_code == 400, (name, value, response.content[:200])
