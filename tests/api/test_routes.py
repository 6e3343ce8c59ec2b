"""The Mastra-compatible routes: happy paths, refusals that change nothing, and the audit "via API"."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client

from agents_runtime import DecisionRequest, GrantRequest, GrantScope, Origin, Runtime, fingerprint
from agents_runtime.store import DecisionAction
from approvals.models import AuditEntry
from approvals.services.decisions import decide
from tests.support.api import Api, audit_rows, events, listing, read, start

A = "/api/agents/approver"
ASK = "/api/agents/asker"


async def test_stream_starts_a_run_in_mastras_framing(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt", thread="t1", resource="u1")
    assert [e["type"] for e in run["events"][:-1]] == [
        "start",
        "step-start",
        "tool-call",
        "tool-call-approval",
    ]
    first = run["events"][0]
    assert first["from"] == "AGENT" and first["payload"]["id"] == "approver"
    approval = run["events"][3]["payload"]
    assert approval["args"] == {"path": "/tmp/a.txt"} and json.loads(approval["resumeSchema"])[
        "required"
    ] == ["approved"]
    assert run["toolCallId"] == "approver-call_1"


async def test_suspended_runs_lists_with_mastras_fields_and_filters(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    a = await start(api, "approver", "Please delete /tmp/a.txt", thread="t1", resource="u1")
    middle = datetime.now(UTC)
    b = await start(api, "approver", "Please delete /tmp/b.txt", thread="t2", resource="u1")
    d = await start(api, "approver", "Please delete /tmp/d.txt")
    everything = await listing(api)
    assert everything["total"] == 3
    assert [r["runId"] for r in everything["runs"]] == [d["runId"], b["runId"], a["runId"]]
    newest, oldest = everything["runs"][0], everything["runs"][2]
    # No memory: threadId and resourceId are absent, not null.
    assert list(newest) == ["runId", "status", "suspendedAt", "toolCalls"]
    assert list(oldest) == ["runId", "status", "threadId", "resourceId", "suspendedAt", "toolCalls"]
    assert oldest["toolCalls"] == [
        {
            "toolCallId": "approver-call_1",
            "toolName": "deleteFile",
            "args": {"path": "/tmp/a.txt"},
            "requiresApproval": True,
        }
    ]
    assert oldest["suspendedAt"].endswith("Z") and datetime.fromisoformat(oldest["suspendedAt"])
    assert [r["runId"] for r in (await listing(api, threadId="t2"))["runs"]] == [b["runId"]]
    assert (await listing(api, resourceId="u1"))["total"] == 2
    assert (await listing(api, fromDate=middle.isoformat()))["total"] == 2
    assert (await listing(api, toDate=middle.isoformat()))["total"] == 1
    page = await listing(api, perPage="2", page="1")
    assert page["total"] == 3 and [r["runId"] for r in page["runs"]] == [a["runId"]]
    assert len((await listing(api, perPage="2"))["runs"]) == 3  # both or nothing, as Mastra
    assert (await listing(api, perPage="2", page="5"))["runs"] == []
    assert next(r["runId"] for r in (await listing(api, order="oldest"))["runs"]) == a["runId"]
    assert (await listing(api, toolName="nothing"))["total"] == 0
    assert (await listing(api, kind="input"))["total"] == 0
    assert (await listing(api, kind="approval"))["total"] == 3


async def test_suspended_runs_shows_a_suspend_payload_without_args(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    await start(api, "asker", "Pick a colour for bike", thread="t4", resource="u1")
    (run,) = (await listing(api, "asker"))["runs"]
    assert run["toolCalls"] == [
        {
            "toolCallId": "asker-call_1",
            "toolName": "askColor",
            "requiresApproval": False,
            "suspendPayload": {"question": "Which colour for bike?", "item": "bike"},
        }
    ]


async def test_bad_query_parameters_are_400_with_field_issues(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    cases = {
        "perPage=0": ("perPage", "Too small: expected number to be >0"),
        "perPage=-1": ("perPage", "Too small: expected number to be >0"),
        "perPage=1.5": ("perPage", "Invalid input: expected int, received number"),
        "perPage=abc": ("perPage", "Invalid input: expected number, received NaN"),
        "page=-1": ("page", "Too small: expected number to be >=0"),
        "fromDate=2026-01-02T00:00:00Z&toDate=2026-01-01T00:00:00Z": (
            "fromDate",
            "fromDate must be less than or equal to toDate",
        ),
        "fromDate=yesterday": ("fromDate", "Invalid input: expected date, received Date"),
        "kind=other": ("kind", 'Invalid option: expected one of "approval"|"input"'),
        "perPage=1&page=18446744073709551615": ("page", "Too big: expected number to be <=1000000000"),
    }
    for query, (field, message) in cases.items():
        response = await api.client.get(f"{A}/suspended-runs?{query}", headers=api.headers)
        assert response.status_code == 400, query
        body = json.loads(response.content)
        assert body == {
            "error": "Invalid query parameters",
            "code": "invalid_query",
            "issues": [{"field": field, "message": message}],
        }


async def test_unknown_agent_is_404_in_mastras_words(mastra: Runtime, reviewer_token: str) -> None:
    response = await Api(reviewer_token).get("/api/agents/no-such-agent/suspended-runs")
    assert response.status_code == 404
    assert json.loads(response.content) == {
        "error": "Agent with id no-such-agent not found",
        "code": "agent_not_found",
    }


async def test_approve_streams_the_continuation_and_is_audited_via_api(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt", thread="t1", resource="u1")
    response = await api.post(
        f"{A}/approve-tool-call", {"runId": run["runId"], "toolCallId": run["toolCallId"]}
    )
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-cache" and response["X-Accel-Buffering"] == "no"
    sent = events(await read(response))
    types = [e if isinstance(e, str) else e["type"] for e in sent]
    assert types[0] == "tool-result" and types[-3:] == ["step-finish", "finish", "[DONE]"]
    assert "tool-call" not in types  # announced by the stream that parked it, as Mastra
    assert sent[0]["payload"] == {
        "args": {"path": "/tmp/a.txt"},
        "toolCallId": run["toolCallId"],
        "toolName": "deleteFile",
        "result": {"deleted": "/tmp/a.txt"},
    }
    assert all(e["runId"] == run["runId"] for e in sent[:-1])
    text = "".join(e["payload"]["text"] for e in sent[:-1] if e["type"] == "text-delta")
    assert text.startswith("[scripted-approver] MODEL_SAW_TOOL_RESULTS")
    assert (await listing(api))["total"] == 0
    assert await audit_rows() == [("rita", "approve", "completed", "api")]


async def test_finish_carries_usage_model_messages_and_the_threads_ui_messages(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt", thread="t1", resource="u1")
    response = await api.post(
        f"{A}/approve-tool-call", {"runId": run["runId"], "toolCallId": run["toolCallId"]}
    )
    sent = events(await read(response))
    steps = [e["payload"] for e in sent[:-1] if e["type"] == "step-finish"]
    [finish] = [e["payload"] for e in sent[:-1] if e["type"] == "finish"]
    for payload in [*steps, finish]:
        usage = payload["output"]["usage"]
        assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"] > 0
        assert payload["metadata"]["modelId"] == "scripted-approver"
    # The run's total: the parked response's step and the answer's.
    assert finish["output"]["usage"]["totalTokens"] == sum(s["output"]["usage"]["totalTokens"] for s in steps)
    every = finish["messages"]["all"]
    assert [m["role"] for m in every] == ["user", "assistant", "tool", "assistant"]
    assert every[0]["content"] == [{"type": "text", "text": "Please delete /tmp/a.txt"}]
    assert every[2]["content"][0]["output"] == {"type": "json", "value": {"deleted": "/tmp/a.txt"}}
    assert finish["messages"]["nonUser"] == every[1:] == finish["response"]["messages"]
    tool_turn, answer = finish["response"]["uiMessages"]
    assert tool_turn["parts"] == [
        {
            "type": "tool-deleteFile",
            "toolCallId": run["toolCallId"],
            "input": {"path": "/tmp/a.txt"},
            "output": {"deleted": "/tmp/a.txt"},
            "state": "output-available",
        }
    ]
    assert answer["id"] == finish["messageId"] and answer["parts"][0]["type"] == "text"
    assert answer["metadata"]["threadId"] == "t1" and answer["metadata"]["resourceId"] == "u1"


async def test_stream_honours_a_chosen_run_id(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    response = await api.post(f"{A}/stream", {"messages": "Please delete /tmp/a.txt", "runId": "order-42:a"})
    assert response.status_code == 200
    sent = events(await read(response))
    assert {e["runId"] for e in sent[:-1]} == {"order-42:a"}
    assert [r["runId"] for r in (await listing(api))["runs"]] == ["order-42:a"]
    decided = await api.post(
        f"{A}/approve-tool-call", {"runId": "order-42:a", "toolCallId": sent[-2]["payload"]["toolCallId"]}
    )
    assert decided.status_code == 200
    assert events(await read(decided))[-2]["type"] == "finish"


async def test_a_chosen_run_id_that_names_another_run_is_400_and_starts_nothing(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    waiting = await start(api, "approver", "Please delete /tmp/a.txt")
    chosen = await api.post(f"{A}/stream", {"messages": "Please delete /tmp/b.txt", "runId": "mine"})
    assert chosen.status_code == 200
    sent = events(await read(chosen))
    for run_id, agent in ((waiting["runId"], "approver"), ("mine", "approver"), ("mine", "nomem")):
        response = await api.post(
            f"/api/agents/{agent}/stream", {"messages": "Please delete /tmp/c.txt", "runId": run_id}
        )
        assert response.status_code == 400, (run_id, agent)
        body = json.loads(response.content)
        assert body["code"] == "run_id_in_use" and body["issues"][0]["field"] == "runId"
    # Still in use once the run has ended.
    await read(
        await api.post(
            f"{A}/approve-tool-call", {"runId": "mine", "toolCallId": sent[-2]["payload"]["toolCallId"]}
        )
    )
    again = await api.post(f"{A}/stream", {"messages": "Please delete /tmp/d.txt", "runId": "mine"})
    assert again.status_code == 400
    assert [r["runId"] for r in (await listing(api))["runs"]] == [waiting["runId"]]
    assert (await listing(api, "nomem"))["total"] == 0


@pytest.mark.parametrize("run_id", [42, "", "   ", "a/b", "tab\there", "x" * 256, None])
async def test_an_invalid_run_id_is_400_with_a_field_issue(
    mastra: Runtime, reviewer_token: str, run_id: Any
) -> None:
    api = Api(reviewer_token)
    response = await api.post(f"{A}/stream", {"messages": "Please delete /tmp/a.txt", "runId": run_id})
    assert response.status_code == 400
    body = json.loads(response.content)
    assert body["error"] == "Invalid request body" and body["issues"][0]["field"] == "runId"
    assert (await listing(api))["total"] == 0


async def test_approve_with_edited_args_runs_the_tool_with_them(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt")
    body = {"runId": run["runId"], "toolCallId": run["toolCallId"], "editedArgs": {"path": "/tmp/safe.txt"}}
    sent = events(await read(await api.post(f"{A}/approve-tool-call", body)))
    assert sent[0]["payload"]["result"] == {"deleted": "/tmp/safe.txt"}
    entry = await AuditEntry.objects.aget()
    assert entry.edited_args == {"path": "/tmp/safe.txt"} and entry.channel == "api"


async def test_bad_edited_args_are_400_and_nothing_runs(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt")
    body = {"runId": run["runId"], "toolCallId": run["toolCallId"], "editedArgs": {"path": 5}}
    response = await api.post(f"{A}/approve-tool-call", body)
    assert response.status_code == 400
    issues = json.loads(response.content)["issues"]
    assert issues[0]["field"].startswith("editedArgs")
    assert (await listing(api))["total"] == 1


async def test_decline_sends_the_reason_to_the_model(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/b.txt", thread="t2", resource="u1")
    body = {"runId": run["runId"], "toolCallId": run["toolCallId"], "reason": "User said no: keep the file"}
    sent = events(await read(await api.post(f"{A}/decline-tool-call", body)))
    assert sent[0]["type"] == "tool-output-denied"
    assert sent[0]["payload"]["approval"] == {
        "id": run["toolCallId"],
        "approved": False,
        "reason": "User said no: keep the file",
    }
    text = "".join(e["payload"]["text"] for e in sent[:-1] if e["type"] == "text-delta")
    assert "User said no: keep the file" in text
    entry = await AuditEntry.objects.aget()
    assert (entry.action, entry.reason, entry.channel) == ("decline", "User said no: keep the file", "api")


async def test_a_reason_over_2000_characters_is_400_on_every_route_and_nothing_is_recorded(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/b.txt")
    ids = {"runId": run["runId"], "toolCallId": run["toolCallId"]}
    long = "x" * 2001

    refusals = [
        await api.post(f"{A}/decline-tool-call", {**ids, "reason": long}),
        await api.post(f"{A}/resume-stream", {**ids, "resumeData": {"approved": False, "reason": long}}),
        await api.post(
            f"/api/v1/agents/approver/runs/{run['runId']}/calls/{run['toolCallId']}/decline", {"reason": long}
        ),
    ]

    for response in refusals:
        assert response.status_code == 400 and response["Content-Type"] == "application/json"
        answer = json.loads(response.content)
        assert answer["issues"][0]["field"] in ("reason", "resumeData.reason"), answer
        assert "2000" in answer["issues"][0]["message"].replace(",", ""), answer
    assert (await listing(api))["total"] == 1
    assert await audit_rows() == []
    taken = await api.post(f"{A}/decline-tool-call", {**ids, "reason": "y" * 2000})
    assert taken.status_code == 200
    assert (await AuditEntry.objects.aget()).reason == "y" * 2000


async def test_decline_without_a_reason_uses_mastras_default(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/c.txt")
    sent = events(
        await read(
            await api.post(f"{A}/decline-tool-call", {"runId": run["runId"], "toolCallId": run["toolCallId"]})
        )
    )
    assert sent[0]["payload"]["approval"]["reason"] == "Tool call was not approved by the user"


async def test_resume_answers_a_suspended_call_with_or_without_its_id(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    e = await start(api, "asker", "Pick a colour for bike", thread="t4", resource="u1")
    f = await start(api, "asker", "Pick a colour for car")
    body = {
        "runId": e["runId"],
        "toolCallId": e["toolCallId"],
        "memory": {"thread": "t4", "resource": "u1"},
        "resumeData": {"color": "blue"},
    }
    sent = events(await read(await api.post(f"{ASK}/resume-stream", body)))
    assert sent[0]["type"] == "tool-result" and sent[0]["payload"]["result"] == {
        "item": "bike",
        "color": "blue",
    }
    sent = events(
        await read(
            await api.post(f"{ASK}/resume-stream", {"runId": f["runId"], "resumeData": {"color": "green"}})
        )
    )
    assert sent[0]["payload"]["result"] == {"item": "car", "color": "green"}
    assert await audit_rows() == [("rita", "resume", "completed", "api")] * 2


async def test_resume_with_approved_true_approves_an_approval(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    g = await start(api, "nomem", "Please delete /tmp/g.txt")
    sent = events(
        await read(
            await api.post(
                "/api/agents/nomem/resume-stream", {"runId": g["runId"], "resumeData": {"approved": True}}
            )
        )
    )
    assert sent[0]["type"] == "tool-result" and sent[0]["payload"]["result"] == {"deleted": "/tmp/g.txt"}


async def test_resume_data_that_breaks_the_schema_is_400_and_the_run_still_waits(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    h = await start(api, "asker", "Pick a colour for hat")
    response = await api.post(f"{ASK}/resume-stream", {"runId": h["runId"], "resumeData": {"colour": 1}})
    assert response.status_code == 400
    body = json.loads(response.content)
    assert body["code"] == "invalid_decision" and body["issues"][0]["field"].startswith("resumeData")
    assert (await listing(api, "asker"))["total"] == 1
    # A refused request changes nothing, the audit log included (the dashboard records its attempts).
    assert await audit_rows() == []


async def test_refused_decision_data_is_400_and_leaves_no_audit_row(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/e.txt")
    ids = {"runId": run["runId"], "toolCallId": run["toolCallId"]}
    refused = [
        (f"{A}/approve-tool-call", {**ids, "editedArgs": {"path": 5}}, "editedArgs.path"),
        (f"{A}/approve-tool-call", {**ids, "editedArgs": {"nope": "x"}}, "editedArgs"),
        (f"{A}/resume-stream", {**ids, "resumeData": {"colour": "red"}}, "resumeData"),
    ]
    for path, body, field in refused:
        response = await api.post(path, body)
        assert response.status_code == 400, (body, response.content)
        answer = json.loads(response.content)
        assert answer["code"] == "invalid_decision"
        assert any(i["field"].startswith(field) for i in answer["issues"]), answer
    # A reason the runtime would refuse is a malformed body, checked with the rest of it.
    response = await api.post(f"{A}/decline-tool-call", {**ids, "reason": "bad\u0000reason"})
    assert response.status_code == 400
    assert json.loads(response.content)["issues"][0]["field"] == "reason"
    asker = await start(api, "asker", "Pick a colour for cap")
    response = await api.post(
        f"{ASK}/approve-tool-call", {"runId": asker["runId"], "toolCallId": asker["toolCallId"]}
    )
    assert response.status_code == 400
    assert await audit_rows() == []
    assert (await listing(api))["total"] == 1 and (await listing(api, "asker"))["total"] == 1


async def test_bad_bodies_are_400_and_change_nothing(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt")
    cases = [
        (
            f"{A}/approve-tool-call",
            {"runId": run["runId"]},
            "toolCallId",
            "Invalid input: expected string, received undefined",
        ),
        (
            f"{A}/approve-tool-call",
            {"toolCallId": run["toolCallId"]},
            "runId",
            "Invalid input: expected string, received undefined",
        ),
        (
            f"{A}/approve-tool-call",
            {"runId": 5, "toolCallId": run["toolCallId"]},
            "runId",
            "Invalid input: expected string, received number",
        ),
        (
            f"{A}/approve-tool-call",
            {**run, "events": None, "editedArgs": [1]},
            "editedArgs",
            "Invalid input: expected object, received array",
        ),
        (
            f"{A}/decline-tool-call",
            {"runId": run["runId"], "toolCallId": run["toolCallId"], "reason": 3},
            "reason",
            "Invalid input: expected string, received number",
        ),
        (f"{A}/resume-stream", {"runId": run["runId"]}, "resumeData", "resumeData is required"),
    ]
    for path, body, field, message in cases:
        response = await api.post(path, body)
        assert response.status_code == 400, body
        answer = json.loads(response.content)
        assert (
            answer["error"] == "Invalid request body"
            and {"field": field, "message": message} in answer["issues"]
        )
    for raw in (b"{not json", b"[1, 2]"):
        response = await api.post(f"{A}/approve-tool-call", raw=raw)
        assert response.status_code == 400 and json.loads(response.content)["issues"][0]["field"] == "body"
    assert (await listing(api))["total"] == 1
    assert await audit_rows() == []


async def test_unknown_run_is_404_and_a_wrong_call_id_too(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/c.txt")
    for path in ("approve-tool-call", "decline-tool-call"):
        response = await api.post(f"{A}/{path}", {"runId": "no-such-run", "toolCallId": "x"})
        assert response.status_code == 404
        assert json.loads(response.content)["code"] == "run_not_found"
    response = await api.post(
        f"{A}/resume-stream", {"runId": "no-such-run", "resumeData": {"approved": True}}
    )
    assert response.status_code == 404
    response = await api.post(
        f"{A}/approve-tool-call", {"runId": run["runId"], "toolCallId": "wrong-call-id"}
    )
    assert response.status_code == 404 and json.loads(response.content)["code"] == "tool_call_not_found"
    # Still waiting, and still decidable.
    assert (await listing(api))["total"] == 1
    assert await audit_rows() == []
    ok = await api.post(f"{A}/decline-tool-call", {"runId": run["runId"], "toolCallId": run["toolCallId"]})
    assert ok.status_code == 200


async def test_a_lost_race_is_409_naming_who_decided_and_when(
    mastra: Runtime, reviewer: User, reviewer_token: str
) -> None:
    from approvals.policy import Access

    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt")
    other = await sync_to_async(User.objects.create_user)("otto")
    await sync_to_async(other.groups.add)(*[g async for g in reviewer.groups.all()])

    def dashboard_approve() -> None:
        access = Access.of(User.objects.get(username="otto")).for_agent("approver")
        decide(
            access,
            DecisionRequest(run["runId"], run["toolCallId"], DecisionAction.APPROVE, origin=Origin.DASHBOARD),
        )

    await sync_to_async(dashboard_approve)()
    response = await api.post(
        f"{A}/approve-tool-call", {"runId": run["runId"], "toolCallId": run["toolCallId"]}
    )
    assert response.status_code == 409
    body = json.loads(response.content)
    assert body["code"] == "already_decided" and body["decidedBy"] == "otto"
    winner = await AuditEntry.objects.filter(username="otto").aget()
    assert abs(datetime.fromisoformat(body["decidedAt"]) - winner.created_at) < timedelta(milliseconds=1)
    assert "otto" in body["error"]
    assert await audit_rows() == [
        ("otto", "approve", "completed", "dashboard"),
        ("rita", "approve", "lost_race", "api"),
    ]


def test_the_audit_log_says_via_api_and_the_csv_ends_with_the_channel(
    mastra: Runtime, reviewer: User
) -> None:
    from tests.support.users import make_user

    AuditEntry.objects.create(
        username="rita",
        agent_id="approver",
        run_id="r",
        tool_call_id="c",
        action="approve",
        outcome="completed",
        channel="api",
    )
    admin = make_user("ada", "Admins")
    client = Client()
    client.force_login(admin)
    response = client.get("/audit/export.csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    header = rows[0]
    assert header[-3:] == ["channel", "batch", "grant"]
    assert rows[1][header.index("channel")] == "api"
    assert 'rita <span class="muted">via API</span>' in client.get("/audit/").content.decode()


@pytest.mark.slow
async def test_with_a_db_worker_the_stream_relays_the_workers_chunks_to_the_end(
    mastra: Runtime, reviewer_token: str, settings: Any, artifacts_dir: Path
) -> None:
    """The continuation runs in a real ``db_worker`` process; its chunks reach the HTTP stream through
    the channel layer (the run's live group), and the stream ends at the run's finish."""
    from tests.support import server
    from tests.support.services import database_url

    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/later.txt")
    response = await api.post(
        f"{A}/approve-tool-call", {"runId": run["runId"], "toolCallId": run["toolCallId"]}
    )
    assert response.status_code == 200
    # The decision is on record before the worker starts; the stream waits for the worker.
    assert await audit_rows() == [("rita", "approve", "continuing", "api")]
    # The worker reaches this process as the dashboard's worker does: Redis if the suite uses it,
    # else the outbox table.
    env = server.env_for(database_url(), redis_url=os.environ.get("REDIS_URL"), tasks_backend="database")
    env["AGENTS_RUNTIME"] = "tests.support.mastra_agents:runtime"
    log = (artifacts_dir / "db_worker.log").open("wb")
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        server.MANAGE,
        "db_worker",
        "--batch",
        "--no-startup-delay",
        "--no-reload",
        cwd=server.ROOT,
        env=env,
        stdout=log,
        stderr=log,
    )
    try:
        sent = events(await asyncio.wait_for(read(response), timeout=60))
        assert await asyncio.wait_for(worker.wait(), timeout=60) == 0
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
        log.close()
    kinds = [e if e == "[DONE]" else e["type"] for e in sent]
    assert kinds[0] == "tool-result" and kinds[-2:] == ["finish", "[DONE]"], kinds
    assert sent[0]["payload"]["result"] == {"deleted": "/tmp/later.txt"}
    text = "".join(e["payload"]["text"] for e in sent[:-1] if e["type"] == "text-delta")
    assert "MODEL_SAW_TOOL_RESULTS" in text
    # The worker's step ends and finish came through the channel layer with their usage and messages.
    steps = [e["payload"] for e in sent[:-1] if e["type"] == "step-finish"]
    finish = sent[-2]["payload"]
    assert len(steps) == 2 and all(s["output"]["usage"]["totalTokens"] > 0 for s in steps)
    assert finish["output"]["usage"]["totalTokens"] == sum(s["output"]["usage"]["totalTokens"] for s in steps)
    assert finish["metadata"]["modelId"] == "scripted-approver" and len(finish["messages"]["all"]) == 4
    assert (await listing(api))["total"] == 0


async def test_a_grant_whose_condition_raises_does_not_hang_the_stream(
    mastra: Runtime, reviewer_token: str
) -> None:
    # A grant made before conditions were checked against the tool's parameters: evaluating it on
    # any call raises. The grant does not apply; the stream ends with the call waiting.
    # (Kept by the store as it was then: the agent now refuses it.)
    agent = mastra.get_agent("approver")
    await sync_to_async(agent.storage.add_grant)(  # type: ignore[attr-defined]
        GrantRequest(
            agent_id="approver",
            tool_name="deleteFile",
            scope=GrantScope.EVERYONE,
            scope_value=None,
            created_by="rita",
            created_at=datetime.now(UTC),
            expires_at=datetime.now(UTC) + timedelta(hours=1),
            condition='meta.tier == "gold"',
        )
    )
    run = await asyncio.wait_for(start(Api(reviewer_token), "approver", "Please delete /tmp/g.txt"), 30)
    assert run["events"][-2]["type"] == "tool-call-approval"
    assert (await listing(Api(reviewer_token)))["total"] == 1


async def test_an_approval_carrying_a_stale_fingerprint_is_refused_and_runs_nothing(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt")
    ids = {"runId": run["runId"], "toolCallId": run["toolCallId"]}
    stale = fingerprint({"path": "/tmp/b.txt"})  # what the caller saw is not what waits

    refused = await api.post(f"{A}/approve-tool-call", {**ids, "fingerprint": stale})

    assert refused.status_code == 403, refused.content
    assert "changed since you saw it" in json.loads(refused.content)["error"]
    # Nothing ran; the refusal is on record, as every door's refusals are.
    assert (await listing(api))["total"] == 1
    assert await audit_rows() == [("rita", "approve", "refused", "api")]
    malformed = await api.post(f"{A}/approve-tool-call", {**ids, "fingerprint": 7})
    assert malformed.status_code == 400
    assert json.loads(malformed.content)["issues"][0]["field"] == "fingerprint"
    approved = await api.post(
        f"{A}/approve-tool-call", {**ids, "fingerprint": fingerprint({"path": "/tmp/a.txt"})}
    )
    assert approved.status_code == 200
    assert events(await read(approved))[0]["payload"]["result"] == {"deleted": "/tmp/a.txt"}


async def test_an_approval_through_resume_data_is_bound_to_its_fingerprint_too(
    mastra: Runtime, reviewer_token: str
) -> None:
    """``resume-stream`` with ``resumeData: {"approved": true}`` is the same approval as
    ``approve-tool-call``: a stale fingerprint refuses it alike, nothing runs."""
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt")
    ids = {"runId": run["runId"], "toolCallId": run["toolCallId"]}
    approval = {**ids, "resumeData": {"approved": True}}

    refused = await api.post(
        f"{A}/resume-stream", {**approval, "fingerprint": fingerprint({"path": "/tmp/b.txt"})}
    )
    await read(refused)

    assert refused.status_code == 403, refused.status_code
    assert (await listing(api))["total"] == 1
    approved = await api.post(
        f"{A}/resume-stream", {**approval, "fingerprint": fingerprint({"path": "/tmp/a.txt"})}
    )
    assert approved.status_code == 200
    assert (await listing(api))["total"] == 0
