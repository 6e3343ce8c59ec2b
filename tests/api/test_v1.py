"""The native API (/api/v1/): agents, one run, the audit log, JSON decisions, rate limits, OpenAPI."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import jsonschema
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.urls import get_resolver
from django.utils import timezone

from agents_runtime import Runtime, fingerprint
from approvals.api.openapi import OPERATIONS, document
from tests.support.api import Api, audit_rows, start
from tests.support.users import make_user

V1 = "/api/v1"


def run_path(agent: str, run: dict[str, Any]) -> str:
    return f"{V1}/agents/{agent}/runs/{run['runId']}"


def call_path(agent: str, run: dict[str, Any], verb: str) -> str:
    return f"{run_path(agent, run)}/calls/{run['toolCallId']}/{verb}"


def conforms(response: Any, operation_id: str) -> dict[str, Any]:
    """The body, checked against the OpenAPI document's schema for this operation and status."""
    doc = document()
    op = next(o for o in OPERATIONS if o.operation_id == operation_id)
    entry = doc["paths"][op.path][op.method]["responses"][str(response.status_code)]
    schema = {**entry["content"]["application/json"]["schema"], "components": doc["components"]}
    body: dict[str, Any] = json.loads(response.content)
    jsonschema.Draft202012Validator(schema).validate(body)
    return body


async def test_agents_lists_the_users_agents_with_pending_counts(
    mastra: Runtime, reviewer_token: str, designated: User
) -> None:
    api = Api(reviewer_token)
    await start(api, "approver", "Please delete /tmp/a.txt")
    await start(api, "approver", "Please delete /tmp/b.txt")
    await start(api, "asker", "Pick a colour for bike")
    body = conforms(await api.get(f"{V1}/agents"), "listAgents")
    pending = {a["id"]: a["pending"] for a in body["agents"]}
    assert pending == {"approver": 2, "asker": 1, "nomem": 0}
    approver = next(a for a in body["agents"] if a["id"] == "approver")
    assert (
        approver["oldestSuspendedAt"]
        and approver["links"]["suspendedRuns"] == "/api/agents/approver/suspended-runs"
    )
    # A reviewer designated for one agent sees that agent only.
    token = await sync_to_async(
        lambda: (
            __import__("approvals.services.tokens", fromlist=["x"])
            .create_token(designated, name="t")
            .plaintext
        )
    )()
    only = json.loads((await Api(token).get(f"{V1}/agents")).content)
    assert [a["id"] for a in only["agents"]] == ["asker"]


async def test_one_run_with_its_parked_calls_and_conversation(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt", thread="t1", resource="u1")
    body = conforms(await api.get(run_path("approver", run)), "getRun")
    assert body["runId"] == run["runId"] and body["threadId"] == "t1" and body["resourceId"] == "u1"
    assert body["toolCalls"] == [
        {
            "toolCallId": run["toolCallId"],
            "toolName": "deleteFile",
            "kind": "approval",
            "args": {"path": "/tmp/a.txt"},
            "suspendPayload": None,
            "resumeSchema": None,
            "toolStartedAt": None,
            "approvedBy": [],
            "preview": None,
            "approvedPreview": None,
            "recheck": None,
            # What a decider is shown (no preview, no version: the arguments), to approve on.
            "fingerprint": fingerprint({"path": "/tmp/a.txt"}),
        }
    ]
    assert [(m["role"], m["kind"]) for m in body["messages"]] == [
        ("user", "text"),
        ("assistant", "tool-call"),
    ]
    assert body["messages"][0]["text"] == "Please delete /tmp/a.txt"
    missing = await api.get(f"{V1}/agents/approver/runs/no-such-run")
    assert missing.status_code == 404 and conforms(missing, "getRun")["code"] == "run_not_found"


async def test_decisions_answer_their_outcome_as_json_and_are_audited_via_api(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    a = await start(api, "approver", "Please delete /tmp/a.txt")
    response = await api.post(call_path("approver", a, "approve"), {"editedArgs": {"path": "/tmp/b.txt"}})
    assert response.status_code == 200, response.content
    body = conforms(response, "approveCall")
    assert body["outcome"] == "completed" and body["decidedBy"] == "rita" and body["action"] == "approve"
    assert '"deleted":"/tmp/b.txt"' in body["text"]
    again = await api.post(call_path("approver", a, "approve"), {})
    assert again.status_code == 409
    assert conforms(again, "approveCall")["decidedBy"] == "rita"

    d = await start(api, "approver", "Please delete /tmp/d.txt")
    declined = conforms(
        await api.post(call_path("approver", d, "decline"), {"reason": "Not that one"}), "declineCall"
    )
    assert declined["outcome"] == "completed" and "Not that one" in declined["text"]

    q = await start(api, "asker", "Pick a colour for hat")
    refused = await api.post(call_path("asker", q, "resume"), {"resumeData": {"colour": 1}})
    assert refused.status_code == 400 and conforms(refused, "resumeCall")["code"] == "invalid_decision"
    bad = await api.post(call_path("asker", q, "resume"), {"resumeData": {"color": "red"}, "extra": 1})
    assert (
        bad.status_code == 400
        and {"field": "extra", "message": "Extra inputs are not permitted"}
        in json.loads(bad.content)["issues"]
    )
    answered = conforms(
        await api.post(call_path("asker", q, "resume"), {"resumeData": {"color": "red"}}), "resumeCall"
    )
    assert answered["outcome"] == "completed"
    assert await audit_rows() == [
        ("rita", "approve", "completed", "api"),
        ("rita", "approve", "lost_race", "api"),
        ("rita", "decline", "completed", "api"),
        ("rita", "resume", "completed", "api"),
    ]
    unknown = await api.post(f"{V1}/agents/approver/runs/nope/calls/x/decline", {})
    assert unknown.status_code == 404


async def test_the_audit_log_is_filtered_and_paged_and_needs_the_audit_permission(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    for name in ("a", "b", "c"):
        run = await start(api, "approver", f"Please delete /tmp/{name}.txt")
        verb = "decline" if name == "b" else "approve"
        assert (await api.post(call_path("approver", run, verb), {})).status_code == 200
    denied = await api.get(f"{V1}/audit")
    assert denied.status_code == 403 and json.loads(denied.content)["code"] == "permission_denied"

    admin = await sync_to_async(make_user)("ada", "Admins")
    from approvals.services.tokens import create_token

    audit = Api(await sync_to_async(lambda: create_token(admin, name="t").plaintext)())
    page = conforms(await audit.get(f"{V1}/audit", {"perPage": "2"}), "listAuditEntries")
    assert page["total"] == 3 and len(page["entries"]) == 2 and page["entries"][0]["channel"] == "api"
    assert page["entries"][0]["createdAt"] >= page["entries"][1]["createdAt"]
    second = conforms(await audit.get(f"{V1}/audit", {"perPage": "2", "page": "2"}), "listAuditEntries")
    assert len(second["entries"]) == 1
    declines = conforms(
        await audit.get(f"{V1}/audit", {"action": "decline", "user": "rita"}), "listAuditEntries"
    )
    assert [e["action"] for e in declines["entries"]] == ["decline"]
    assert conforms(await audit.get(f"{V1}/audit", {"from": "2999-01-01"}), "listAuditEntries")["total"] == 0
    # A date is a whole day (UTC) at either end: from that day to that day holds its three.
    today = page["entries"][-1]["createdAt"][:10]
    assert all(e["createdAt"].startswith(today) for e in page["entries"] + second["entries"])
    assert (
        conforms(await audit.get(f"{V1}/audit", {"from": today, "to": today}), "listAuditEntries")["total"]
        == 3
    )
    # A moment is that moment, midnight included.
    midnight = f"{today}T00:00:00Z"
    assert conforms(await audit.get(f"{V1}/audit", {"to": midnight}), "listAuditEntries")["total"] == 0
    # Offsets ISO 8601 allows and PostgreSQL does not, and bounds at the ends of time.
    for far in ("1815-03-22T09:55:00+23:58", "9999-12-31T23:00:00-23:00", "0001-01-01T00:00:00+01:00"):
        assert (await audit.get(f"{V1}/audit", {"from": far})).status_code == 200, far
        assert (await audit.get(f"{V1}/audit", {"to": far})).status_code == 200, far
    assert conforms(await audit.get(f"{V1}/audit", {"agent": "asker"}), "listAuditEntries")["total"] == 0
    for query in (
        {"action": "explode"},
        {"page": "18446744073709551615"},
        {"page": "0"},
        {"from": "soon"},
        {"from": "2026-02-02", "to": "2026-02-01"},
    ):
        response = await audit.get(f"{V1}/audit", query)
        assert response.status_code == 400, query
        assert conforms(response, "listAuditEntries")["code"] == "invalid_query"


async def test_the_audit_total_stops_counting_past_its_limit_and_says_so(
    mastra: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full COUNT reads every row of a log of millions: the total stops a limit past the page's start.
    from approvals import queries
    from approvals.models import AuditEntry
    from approvals.services.tokens import create_token

    monkeypatch.setattr(queries, "AUDIT_COUNT_LIMIT", 5)
    now = timezone.now()

    def seed() -> str:
        AuditEntry.objects.bulk_create(
            AuditEntry(
                created_at=now - timedelta(seconds=i), username="rita", agent_id="approver",
                run_id=f"run-{i}", tool_call_id="call", tool_name="delete_file", action="approve",
                outcome="completed",
            )
            for i in range(9)
        )  # fmt: skip
        return create_token(make_user("ada", "Admins"), name="t").plaintext

    audit = Api(await sync_to_async(seed)())
    first = conforms(await audit.get(f"{V1}/audit", {"perPage": "2"}), "listAuditEntries")
    later = conforms(await audit.get(f"{V1}/audit", {"perPage": "2", "page": "3"}), "listAuditEntries")
    few = conforms(await audit.get(f"{V1}/audit", {"perPage": "2", "user": "nobody"}), "listAuditEntries")

    assert (first["total"], first["totalCapped"], len(first["entries"])) == (5, True, 2)
    assert (later["total"], later["totalCapped"], len(later["entries"])) == (9, False, 2)
    assert (few["total"], few["totalCapped"]) == (0, False)


async def test_decisions_are_rate_limited_per_token_with_retry_after(
    mastra: Runtime, reviewer_token: str, reviewer: User, settings: Any
) -> None:
    settings.API_DECISION_RATE_LIMIT = "2/60"
    api = Api(reviewer_token)
    runs = [await start(api, "approver", f"Please delete /tmp/{n}.txt") for n in "abc"]
    assert (await api.post(call_path("approver", runs[0], "approve"), {})).status_code == 200
    assert (await api.post("/api/agents/approver/approve-tool-call", runs[1])).status_code == 200
    limited = await api.post(call_path("approver", runs[2], "approve"), {})
    assert limited.status_code == 429
    # Once the two have slid out of the last minute far enough: give or take half a slice (a sixth
    # of the window), the decisions of a slice counted as spread over it.
    assert 55 <= int(limited["Retry-After"]) <= 65
    assert conforms(limited, "approveCall")["code"] == "rate_limited"
    mastra_limited = await api.post("/api/agents/approver/decline-tool-call", runs[2])
    assert mastra_limited.status_code == 429 and mastra_limited["Retry-After"]
    # The limit is per token: another token of the same user still decides.
    from approvals.services.tokens import create_token

    other = Api(await sync_to_async(lambda: create_token(reviewer, name="other").plaintext)())
    assert (await other.post(call_path("approver", runs[2], "approve"), {})).status_code == 200
    # Reads are not limited.
    assert (await api.get(f"{V1}/agents")).status_code == 200


async def test_the_rate_limit_window_slides_no_burst_across_its_edge(
    mastra: Runtime, reviewer_token: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from approvals.api import ratelimit

    settings.API_DECISION_RATE_LIMIT = "3/60"
    api = Api(reviewer_token)
    runs = [await start(api, "approver", f"Please delete /tmp/{n}.txt") for n in "abcdef"]
    now = [3_600_000.0 - 1]  # a second before a minute's end: a fixed window's edge
    monkeypatch.setattr(ratelimit, "clock", lambda: now[0])

    for run in runs[:3]:
        assert (await api.post(call_path("approver", run, "approve"), {})).status_code == 200
    now[0] += 2  # past the edge, where a fixed window counted from zero again
    limited = await api.post(call_path("approver", runs[3], "approve"), {})
    assert limited.status_code == 429
    retry = int(limited["Retry-After"])
    assert 50 <= retry <= 60
    # The refused decision was not counted: once the three have slid out far enough, one more fits.
    now[0] += retry - 5
    assert (await api.post(call_path("approver", runs[3], "approve"), {})).status_code == 429
    now[0] += 5
    assert (await api.post(call_path("approver", runs[3], "approve"), {})).status_code == 200
    assert (await api.post(call_path("approver", runs[4], "approve"), {})).status_code == 429
    now[0] += 60  # a whole quiet minute later: the limit again
    for run in runs[4:]:
        assert (await api.post(call_path("approver", run, "approve"), {})).status_code == 200


def test_the_openapi_document_covers_every_api_route_and_is_valid(client: Client) -> None:
    response = client.get("/api/openapi.json")
    assert response.status_code == 200
    doc = json.loads(response.content)
    assert doc["openapi"] == "3.1.0"
    routes = {
        str(p.pattern).replace("<str:", "{").replace(">", "}")
        for p in get_resolver().url_patterns
        if str(p.pattern) == "api/"
        for p in p.url_patterns  # type: ignore[union-attr]
        if str(p.pattern).startswith(("v1/", "agents", "ag-ui/"))  # (not the document and its page)
    }
    documented = {path.removeprefix("/api/") for path in doc["paths"]}
    camel = {
        r.replace("{agent_id}", "{agentId}")
        .replace("{run_id}", "{runId}")
        .replace("{tool_call_id}", "{toolCallId}")
        .replace("{request_id}", "{requestId}")
        for r in routes
    }
    assert camel == documented
    # Every schema the document refers to is a valid JSON Schema 2020-12.
    for name, schema in doc["components"]["schemas"].items():
        jsonschema.Draft202012Validator.check_schema(schema), name


def test_the_reference_page_lists_the_operations_without_script(client: Client) -> None:
    response = client.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    for path, methods in document()["paths"].items():
        for method in methods:
            assert f"{method.upper()} {path}" in page
    assert "<script" not in page.split("</header>")[-1]
    assert "Content-Security-Policy" in response.headers
