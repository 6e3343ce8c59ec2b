"""API tokens: stored hashed, shown once, expiry and revocation, scope = the user's agents, Bearer only."""

from __future__ import annotations

import hashlib
import io
import re
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from agents_runtime import Runtime
from approvals import agents
from approvals.models import ApiToken, AuditEntry
from approvals.services.tokens import create_token
from tests.support.api import Api, read

LIST = "/api/agents/approver/suspended-runs"


def test_a_token_is_stored_as_a_salted_hash_only(reviewer: User) -> None:
    created = create_token(reviewer, name="ci")
    secret = created.plaintext.split("_", 2)[2]
    row = ApiToken.objects.get()
    assert created.plaintext.startswith(f"cs_{row.key_id}_") and len(secret) >= 43
    stored = " ".join(str(v) for v in ApiToken.objects.values_list().get())
    assert secret not in stored
    assert row.digest == hashlib.sha256(f"{row.salt}:{secret}".encode()).hexdigest()
    # Two tokens never share a salt: equal secrets would still hash differently.
    assert create_token(reviewer, name="other").token.salt != row.salt


async def test_a_valid_token_authenticates_and_records_its_last_use(
    mastra: Runtime, reviewer_token: str
) -> None:
    response = await Api(reviewer_token).get(LIST)
    assert response.status_code == 200
    assert (await ApiToken.objects.aget()).last_used_at is not None


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer",
        "Basic cnRpdGE6eA==",
        "Bearer cs_nope",
        "Bearer cs_000000000000_wrongsecret",
        "Token abc",
    ],
)
async def test_requests_without_a_valid_token_are_401(
    mastra: Runtime, reviewer_token: str, header: str | None
) -> None:
    api = Api(None, **({"Authorization": header} if header else {}))
    response = await api.get(LIST)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert (await read(response)).startswith(b'{"error":')


async def test_a_token_with_a_wrong_secret_is_refused(mastra: Runtime, reviewer_token: str) -> None:
    key_id = reviewer_token.split("_")[1]  # the secret may hold "_" too
    response = await Api(f"cs_{key_id}_" + "x" * 43).get(LIST)
    assert response.status_code == 401
    assert b"unknown token" in await read(response)


async def test_an_expired_token_is_refused(mastra: Runtime, reviewer: User) -> None:
    created = await sync_to_async(create_token)(
        reviewer, name="short", expires_at=timezone.now() + timedelta(hours=1)
    )
    await ApiToken.objects.filter(pk=created.token.pk).aupdate(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    response = await Api(created.plaintext).get(LIST)
    assert response.status_code == 401
    assert b"expired" in await read(response)


async def test_a_revoked_token_is_refused(mastra: Runtime, reviewer: User) -> None:
    created = await sync_to_async(create_token)(reviewer, name="ci")
    assert (await Api(created.plaintext).get(LIST)).status_code == 200
    out = io.StringIO()
    await sync_to_async(call_command)("api_token", "revoke", created.token.key_id, stdout=out)
    response = await Api(created.plaintext).get(LIST)
    assert response.status_code == 401
    assert b"revoked" in await read(response)


async def test_a_token_of_a_deactivated_user_is_refused(
    mastra: Runtime, reviewer: User, reviewer_token: str
) -> None:
    await User.objects.filter(pk=reviewer.pk).aupdate(is_active=False)
    assert (await Api(reviewer_token).get(LIST)).status_code == 401


async def test_a_token_sees_only_its_users_agents(mastra: Runtime, designated: User) -> None:
    token = (await sync_to_async(create_token)(designated, name="asker only")).plaintext
    api = Api(token)
    assert (await api.get("/api/agents/asker/suspended-runs")).status_code == 200
    response = await api.get(LIST)
    assert response.status_code == 403
    assert b"agent:approver" in await read(response)
    # Deciding on a foreign agent is refused before anything is looked at.
    decided = await api.post("/api/agents/approver/approve-tool-call", {"runId": "r", "toolCallId": "c"})
    assert decided.status_code == 403
    assert not await AuditEntry.objects.aexists()


async def test_a_token_of_a_user_who_may_not_decide_cannot_decide(
    mastra: Runtime, transactional_db: None
) -> None:
    from tests.support.users import make_user

    viewer = await sync_to_async(make_user)("vic")
    await sync_to_async(viewer.groups.create)(name="agent:approver")
    token = (await sync_to_async(create_token)(viewer, name="read only")).plaintext
    run = await mastra.get_agent("approver").generate("Please delete /tmp/x")
    api = Api(token)
    assert (await api.get(LIST)).status_code == 200
    response = await api.post(
        "/api/agents/approver/approve-tool-call",
        {"runId": run.run_id, "toolCallId": run.tool_calls[0].tool_call_id},
    )
    assert response.status_code == 403
    assert b"Reviewers" in await read(response)
    assert len((await mastra.get_agent("approver").list_suspended_runs()).runs) == 1


def test_a_signed_in_browser_may_read_but_decides_only_with_its_csrf_token(
    mastra: Runtime, reviewer: User
) -> None:
    run = mastra_start()
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    body: dict[str, Any] = {}
    approve = f"/api/v1/agents/approver/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/approve"

    assert client.get(LIST).status_code == 200  # a read needs no CSRF token

    # A page of another site posting through the reviewer's cookie: no token, or not this origin.
    refused = client.post(approve, body, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["code"] == "csrf_failed"
    client.get("/")  # the dashboard hands the browser its CSRF cookie
    token = client.cookies["csrftoken"].value
    forged = client.post(
        approve,
        body,
        content_type="application/json",
        headers={"X-CSRFToken": token, "Origin": "https://evil.test"},
    )
    assert forged.status_code == 403 and forged.json()["code"] == "csrf_failed"
    assert not AuditEntry.objects.exists()
    assert len(async_to_sync(agents.get("approver").list_suspended_runs)().runs) == 1

    # A same-origin script sends the token, as the dashboard's own requests do.
    response = client.post(approve, body, content_type="application/json", headers={"X-CSRFToken": token})
    assert response.status_code == 200 and response.json()["outcome"] == "completed"
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.channel, entry.action) == ("rita", "api", "approve")


async def test_an_authorization_header_is_judged_alone_even_with_a_session(
    mastra: Runtime, reviewer: User
) -> None:
    from django.test import AsyncClient

    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(reviewer)
    # (The session is not read on the way either: on the server's loop that would be a 500.)
    response = await client.get(LIST, headers={"Authorization": "Bearer cs_nope_nope"})
    assert response.status_code == 401 and response.json()["code"] == "invalid_token"
    assert (await client.get(LIST)).status_code == 200


def mastra_start() -> Any:
    return async_to_sync(agents.get("approver").generate)("Please delete /tmp/s")


async def test_bearer_posts_need_no_csrf_token(mastra: Runtime, reviewer_token: str) -> None:
    run = await mastra.get_agent("approver").generate("Please delete /tmp/s")
    # ``Api`` enforces CSRF checks like a browser's request.
    response = await Api(reviewer_token).post(
        "/api/agents/approver/decline-tool-call",
        {"runId": run.run_id, "toolCallId": run.tool_calls[0].tool_call_id},
    )
    assert response.status_code == 200
    assert b"tool-output-denied" in await read(response)


def test_the_tokens_page_creates_a_token_shown_once_and_revokes_it(reviewer: User) -> None:
    client = Client(enforce_csrf_checks=False)
    client.force_login(reviewer)
    assert "API tokens" in client.get("/").content.decode()
    response = client.post("/account/api-tokens/", {"name": "chat front end", "expires_in_days": "30"})
    assert response.status_code == 201
    page = response.content.decode()
    shown = re.search(r'id="new-token-value">(cs_[^<]+)<', page)
    assert shown is not None
    token = ApiToken.objects.get(user=reviewer)
    assert token.name == "chat front end" and token.expires_at is not None
    # Shown once: the list shows only the key id.
    again = client.get("/account/api-tokens/").content.decode()
    assert shown.group(1) not in again and f"cs_{token.key_id}_" in again
    client.post(f"/account/api-tokens/{token.key_id}/revoke")
    token.refresh_from_db()
    assert token.status == "revoked"


def test_the_tokens_page_needs_a_login_and_a_csrf_token(reviewer: User) -> None:
    assert Client().get("/account/api-tokens/").status_code == 302
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    assert client.post("/account/api-tokens/", {"name": "x"}).status_code == 403
    assert not ApiToken.objects.exists()


def test_a_user_cannot_revoke_someone_elses_token(reviewer: User) -> None:
    from tests.support.users import make_user

    other = make_user("otto", "Reviewers")
    theirs = create_token(other, name="theirs").token
    client = Client()
    client.force_login(reviewer)
    client.post(f"/account/api-tokens/{theirs.key_id}/revoke")
    theirs.refresh_from_db()
    assert theirs.status == "active"


def test_the_api_token_command_creates_lists_and_revokes(reviewer: User) -> None:
    out = io.StringIO()
    call_command(
        "api_token",
        "create",
        "rita",
        "--name",
        "deploy bot",
        "--expires-days",
        "7",
        stdout=out,
        stderr=io.StringIO(),
    )
    plaintext = out.getvalue().strip()
    token = ApiToken.objects.get()
    assert plaintext.startswith(f"cs_{token.key_id}_") and token.expires_at is not None
    listing = io.StringIO()
    call_command("api_token", "list", "rita", stdout=listing)
    assert "deploy bot" in listing.getvalue() and "active" in listing.getvalue()
    assert plaintext not in listing.getvalue()
    call_command("api_token", "revoke", plaintext, stdout=io.StringIO())
    token.refresh_from_db()
    assert token.status == "revoked"
