"""Approval requests from any process (``/api/v1/approval-requests``): an external agent asks, a
reviewer decides at the desk through the one door, the agent reads the decision (long-polling), runs
the call itself and reports what it did."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, User
from django.test import AsyncClient

from agents_runtime import Runtime, fingerprint
from approvals.models import ApprovalRequest, AuditEntry, EndedRun, RunRecord
from approvals.services import requests as service
from approvals.services.tokens import create_token
from tests.api.test_v1 import conforms
from tests.api.test_webhooks import (  # noqa: F401 - the receiver's fixtures
    Receiver,
    endpoint,
    fast_retries,
    receiver,
    settled,
    wait_for,
)
from tests.approvals.notifications.test_notifications import mail, person  # noqa: F401 - its fixture
from tests.support import server
from tests.support.api import Api
from tests.support.notification_sinks import MailSink, parts
from tests.support.services import database_url
from tests.support.users import make_user

REQUESTS = "/api/v1/approval-requests"
SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "amount": {"type": "integer", "maximum": 100}},
    "required": ["to", "amount"],
    "additionalProperties": False,
}


def body(**changes: Any) -> dict[str, Any]:
    asked: dict[str, Any] = {
        "agent": "payer",
        "tool": "pay",
        "args": {"to": "ann", "amount": 40},
        "argsSchema": SCHEMA,
        "title": "Pay ann 40",
        "threadId": "t-1",
    }
    asked.update(changes)
    return {k: v for k, v in asked.items() if v is not None}


@pytest.fixture
def payer_token(mastra: Runtime) -> str:
    service.register("payer", name="Payments (elsewhere)")
    return service.agent_token("payer", name="payer's token").plaintext


@pytest.fixture
def payer(payer_token: str) -> Api:
    return Api(payer_token)


async def ask(api: Api, **changes: Any) -> dict[str, Any]:
    response = await api.post(REQUESTS, body(**changes))
    assert response.status_code == 201, response.content
    return conforms(response, "createApprovalRequest")


def approve_path(request_id: str) -> str:
    return f"/api/v1/agents/payer/runs/{request_id}/calls/request/approve"


async def test_asked_decided_with_edits_read_run_and_reported(
    payer: Api, reviewer: User, reviewer_token: str
) -> None:
    asked = await ask(payer)
    assert asked["status"] == "pending" and asked["agent"] == "payer" and asked["tool"] == "pay"
    assert asked["url"].endswith(f"/runs/{asked['id']}/") and asked["approvedArgs"] is None

    # The card waits in the reviewer's queue, titled and shown by the request's schema.
    client = AsyncClient()
    await sync_to_async(client.force_login)(reviewer)
    queue = (await client.get("/queue/")).content.decode()
    assert "Pay ann 40" in queue
    card = (await client.get(f"/runs/{asked['id']}/")).content.decode()
    assert "Pay ann 40" in card

    # An edit the schema refuses changes nothing; one it takes is what the agent runs.
    reviewer_api = Api(reviewer_token)
    refused = await reviewer_api.post(approve_path(asked["id"]), {"editedArgs": {"to": "ann", "amount": 500}})
    assert refused.status_code == 400, refused.content
    approved = await reviewer_api.post(approve_path(asked["id"]), {"editedArgs": {"to": "ann", "amount": 30}})
    assert approved.status_code == 200, approved.content

    read = conforms(await payer.get(f"{REQUESTS}/{asked['id']}"), "getApprovalRequest")
    assert (read["status"], read["approvedArgs"], read["edited"]) == (
        "approved",
        {"to": "ann", "amount": 30},
        True,
    )
    assert read["decidedBy"] == "rita" and read["decidedAt"] and read["result"] is None

    reported = await payer.post(f"{REQUESTS}/{asked['id']}/result", {"ok": True, "output": "paid 30"})
    assert reported.status_code == 200, reported.content
    assert conforms(reported, "reportApprovalRequestResult")["result"]["ok"] is True
    again = await payer.post(f"{REQUESTS}/{asked['id']}/result", {"ok": False})
    assert again.status_code == 409 and json.loads(again.content)["code"] == "result_already_reported"

    # The run ended with the decision handed over; its record reads shown, decided, executed.
    assert not await RunRecord.objects.filter(run_id=asked["id"]).aexists()
    ended = await EndedRun.objects.aget(run_id=asked["id"])
    assert ended.status == "completed" and "Approved with edits" in ended.detail
    rows = [
        r
        async for r in AuditEntry.objects.filter(run_id=asked["id"])
        .order_by("id")
        .values_list("action", "outcome", "username")
    ]
    assert rows == [("approve", "completed", "rita"), ("execute", "recorded", "external:payer")]
    record = (await client.get(f"/runs/{asked['id']}/")).content.decode()
    assert "Executed" in record and "paid 30" in record


async def test_declined_with_a_reason(payer: Api, reviewer_token: str) -> None:
    asked = await ask(payer)
    path = f"/api/v1/agents/payer/runs/{asked['id']}/calls/request/decline"
    assert (await Api(reviewer_token).post(path, {"reason": "not this month"})).status_code == 200
    read = json.loads((await payer.get(f"{REQUESTS}/{asked['id']}")).content)
    assert (read["status"], read["reason"], read["approvedArgs"]) == ("declined", "not this month", None)
    refused = await payer.post(f"{REQUESTS}/{asked['id']}/result", {"ok": True})
    assert refused.status_code == 409 and json.loads(refused.content)["code"] == "not_approved"


@pytest.mark.parametrize(("default", "status"), [("decline", "expired"), ("approve", "approved")])
async def test_a_deadline_decides_with_its_default(
    payer: Api, mastra: Runtime, default: str, status: str
) -> None:
    asked = await ask(payer, deadline={"inSeconds": 60, "default": default})
    assert asked["deadline"]["default"] == default
    assert await mastra.expire_due(datetime.now(UTC) + timedelta(minutes=2)) == 1
    read = json.loads((await payer.get(f"{REQUESTS}/{asked['id']}")).content)
    assert read["status"] == status
    assert read["approvedArgs"] == ({"to": "ann", "amount": 40} if status == "approved" else None)


async def test_an_idempotency_key_makes_one_request(payer_token: str) -> None:
    keyed = Api(payer_token, **{"Idempotency-Key": "k-1"})
    first = await keyed.post(REQUESTS, body())
    second = await keyed.post(REQUESTS, body())
    assert (first.status_code, second.status_code) == (201, 200)
    assert json.loads(first.content)["id"] == json.loads(second.content)["id"]
    other = await keyed.post(REQUESTS, body(title="Pay ann 41"))
    assert other.status_code == 422 and json.loads(other.content)["code"] == "idempotency_key_reused"
    # Two at once: one request.
    racing = Api(payer_token, **{"Idempotency-Key": "k-2"})
    answers = await asyncio.gather(racing.post(REQUESTS, body()), racing.post(REQUESTS, body()))
    assert sorted(a.status_code for a in answers) == [200, 201]
    assert len({json.loads(a.content)["id"] for a in answers}) == 1
    assert await ApprovalRequest.objects.acount() == 2
    assert await RunRecord.objects.filter(agent_id="payer").acount() == 2


async def test_an_asker_that_goes_away_mid_ask_leaves_a_request_whole_or_none(payer_token: str) -> None:
    """A client cancelling while its request is made (the MCP gateway's courtesy cancel, a dropped
    connection), at every point: the request and its parked run both stand, or neither; a retry
    under the same key finds the one that stands."""
    asked = service.Asked(agent_id="payer", tool_name="pay", args={"to": "ann", "amount": 40})
    loop = asyncio.get_running_loop()
    began = loop.time()
    await service.create(asked, started_by="payer", idempotency_key="whole")
    takes = loop.time() - began
    for point in range(24):
        begun = service.create(asked, started_by="payer", idempotency_key=f"gone-{point}")
        asking = asyncio.ensure_future(begun)
        await asyncio.sleep(takes * point / 20)
        asking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asking
    for _ in range(100):  # what a cancelled asker began finishes on its own
        await asyncio.sleep(0.05)
        rows = {r.idempotency_key: r.run_id async for r in ApprovalRequest.objects.all()}
        runs = {r async for r in RunRecord.objects.filter(agent_id="payer").values_list("run_id", flat=True)}
        if set(rows.values()) == runs:
            break
    assert set(rows.values()) == runs, "a request without its run, or a run without its request"
    assert len(rows) > 1, "no cancel landed after the request was begun"
    for key, run_id in rows.items():
        again, made = await service.create(asked, started_by="payer", idempotency_key=key)
        assert (again.run_id, made) == (run_id, False)


async def test_cancel_and_a_decision_have_one_winner(payer: Api, reviewer_token: str) -> None:
    asked = await ask(payer)
    cancelled = await payer.post(f"{REQUESTS}/{asked['id']}/cancel", {"reason": "not needed"})
    assert cancelled.status_code == 200 and json.loads(cancelled.content)["status"] == "cancelled"
    late = await Api(reviewer_token).post(approve_path(asked["id"]), {})
    assert late.status_code in (404, 409), late.content
    # The other way round, and both at once.
    decided = await ask(payer)
    assert (await Api(reviewer_token).post(approve_path(decided["id"]), {})).status_code == 200
    too_late = await payer.post(f"{REQUESTS}/{decided['id']}/cancel", {})
    assert too_late.status_code == 409 and json.loads(too_late.content)["code"] == "already_decided"
    for _ in range(3):
        raced = await ask(payer)
        answers = await asyncio.gather(
            payer.post(f"{REQUESTS}/{raced['id']}/cancel", {}),
            Api(reviewer_token).post(approve_path(raced["id"]), {}),
        )
        read = json.loads((await payer.get(f"{REQUESTS}/{raced['id']}")).content)
        cancel_won = answers[0].status_code == 200
        assert read["status"] == ("cancelled" if cancel_won else "approved"), [a.content for a in answers]
        assert answers[1].status_code == (409 if cancel_won else 200) or (
            cancel_won and answers[1].status_code == 404
        )
        winners = AuditEntry.objects.filter(run_id=raced["id"], action__in=["approve", "cancel"]).exclude(
            outcome="lost_race"
        )
        assert await winners.acount() == 1


async def test_cancellations_count_against_the_tokens_rate_limit(payer: Api, settings: Any) -> None:
    """A cancellation is a decision: past ``API_DECISION_RATE_LIMIT`` it is refused (429) and the
    request still waits."""
    settings.API_DECISION_RATE_LIMIT = "1/60"
    first, second = await ask(payer), await ask(payer, threadId="t-2")
    assert (await payer.post(f"{REQUESTS}/{first['id']}/cancel", {})).status_code == 200

    limited = await payer.post(f"{REQUESTS}/{second['id']}/cancel", {})

    assert limited.status_code == 429 and limited["Retry-After"]
    assert json.loads((await payer.get(f"{REQUESTS}/{second['id']}")).content)["status"] == "pending"


async def test_only_whoever_asked_reports_running_the_call(payer: Api, reviewer_token: str) -> None:
    """A reviewer who may ask for the agent too cannot write what running it did in the asker's
    place (and so keep the asker from reporting it)."""
    asked = await ask(payer)
    assert (await Api(reviewer_token).post(approve_path(asked["id"]), {})).status_code == 200

    forged = await Api(reviewer_token).post(f"{REQUESTS}/{asked['id']}/result", {"ok": True, "output": "x"})

    assert forged.status_code == 403 and json.loads(forged.content)["code"] == "not_the_requester"
    reported = await payer.post(f"{REQUESTS}/{asked['id']}/result", {"ok": True, "output": "paid"})
    assert reported.status_code == 200
    assert json.loads(reported.content)["result"]["output"] == "paid"


async def test_tokens_are_scoped(payer_token: str, reviewer_token: str, mastra: Runtime) -> None:
    payer = Api(payer_token)
    # An agent's token reaches nothing else of the API ...
    for path in ("/api/v1/agents", "/api/agents", "/api/v1/audit", "/api/agents/approver/suspended-runs"):
        response = await payer.get(path)
        assert response.status_code == 403 and json.loads(response.content)["code"] == "external_agent_token"
    # ... nor another agent's requests.
    await sync_to_async(service.register)("other")
    theirs = await ask(
        Api(await sync_to_async(lambda: service.agent_token("other", name="t").plaintext)()), agent="other"
    )
    assert (await payer.get(f"{REQUESTS}/{theirs['id']}")).status_code == 404
    assert (await payer.post(f"{REQUESTS}/{theirs['id']}/cancel", {})).status_code == 404
    assert (await payer.post(REQUESTS, body(agent="other"))).status_code == 403
    # A person's token without the right to start the agent's runs cannot ask; a reviewer's can.
    nobody = await sync_to_async(make_user)("nora")
    token = await sync_to_async(lambda: create_token(nobody, name="t").plaintext)()
    assert (await Api(token).post(REQUESTS, body())).status_code in (403, 404)
    assert (await Api(reviewer_token).post(REQUESTS, body())).status_code == 201
    # Not an external agent: nothing to ask through.
    assert (await Api(reviewer_token).post(REQUESTS, body(agent="approver"))).status_code == 404


@pytest.mark.parametrize(
    ("changes", "status"),
    [
        ({"args": {"to": "ann", "amount": 1000}}, 422),
        ({"args": {"blob": "x" * 100_000}, "argsSchema": None}, 422),
        ({"args": {"to": "a\u0000b", "amount": 1}}, 422),
        ({"argsSchema": {"type": "nope"}}, 422),
        ({"argsSchema": {"$ref": "#"}}, 422),
        ({"tool": "bad name"}, 422),
        ({"title": "t\u0000"}, 400),
        ({"deadline": {"at": "2001-01-01T00:00:00Z"}}, 422),
        ({"deadline": {"inSeconds": 5, "at": "2031-01-01T00:00:00Z"}}, 422),
        ({"deadline": {"at": "9999-12-31T23:59:59-23:59"}}, 422),
        ({"args": "not an object"}, 400),
    ],
)
async def test_hostile_requests_get_json_refusals_and_change_nothing(
    payer: Api, changes: dict[str, Any], status: int
) -> None:
    response = await payer.post(REQUESTS, body(**changes))
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json" and json.loads(response.content)["error"]
    assert not await ApprovalRequest.objects.aexists() and not await RunRecord.objects.aexists()


async def test_a_deep_schema_is_refused(payer: Api) -> None:
    deep: Any = {"type": "object"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"a": deep}}
    response = await payer.post(REQUESTS, body(argsSchema=deep, args={}))
    assert response.status_code in (400, 422), response.content
    assert not await ApprovalRequest.objects.aexists()


async def test_a_long_poll_is_woken_by_a_decision(payer: Api, reviewer_token: str) -> None:
    asked = await ask(payer)
    started = asyncio.get_running_loop().time()
    waiting = asyncio.ensure_future(payer.get(f"{REQUESTS}/{asked['id']}", {"wait": "30"}))
    await asyncio.sleep(0.5)
    assert not waiting.done()
    assert (await Api(reviewer_token).post(approve_path(asked["id"]), {})).status_code == 200
    read = json.loads((await asyncio.wait_for(waiting, 20)).content)
    assert read["status"] == "approved"
    assert asyncio.get_running_loop().time() - started < 5  # (woken, not by the 10 s recheck)
    # A wait with nothing to wait for answers at once; one past the limit is refused.
    assert (await payer.get(f"{REQUESTS}/{asked['id']}", {"wait": "61"})).status_code == 400


async def test_a_standing_grant_approves_a_request(payer: Api, mastra: Runtime) -> None:
    agent = mastra.get_agent("payer")
    await sync_to_async(make_user)("rita", "Reviewers")  # (a grant is its maker's account's)
    await agent.add_grant(
        agent.grant_request(
            "pay", scope="everyone", created_by="rita", expires_at=datetime.now(UTC) + timedelta(hours=1)
        )
    )
    response = await payer.post(REQUESTS, body())
    assert response.status_code == 201
    assert json.loads(response.content)["status"] == "approved"


async def test_webhooks_fire_as_for_any_run(
    payer: Api,
    reviewer_token: str,
    receiver: Receiver,  # noqa: F811
    fast_retries: None,  # noqa: F811
) -> None:
    await sync_to_async(endpoint)(receiver.url)
    asked = await ask(payer)
    path = f"/api/v1/agents/payer/runs/{asked['id']}/calls/request/decline"
    assert (await Api(reviewer_token).post(path, {"reason": "no"})).status_code == 200
    await sync_to_async(wait_for)(lambda: len(receiver.events()) >= 3)
    await sync_to_async(wait_for)(settled)
    got = sorted(receiver.events(), key=lambda r: r["json"]["timestamp"])
    assert [r["json"]["type"] for r in got] == ["call.suspended", "call.decided", "run.completed"]
    assert all(
        r["json"]["data"]["agentId"] == "payer" and r["json"]["data"]["runId"] == asked["id"] for r in got
    )
    assert got[1]["json"]["data"]["action"] == "decline"


async def test_separation_of_duties_and_designations_apply(mastra: Runtime, reviewer_token: str) -> None:
    # A reviewer may ask for an external agent's call; a tool that separates duties refuses their
    # own approval, and only the agent's designated reviewers (and whole-desk ones) see it.
    await sync_to_async(service.register)("payer", tools={"pay": {"separate_duties": True}})
    asked = await ask(Api(reviewer_token))
    own = await Api(reviewer_token).post(approve_path(asked["id"]), {})
    assert own.status_code == 403 and "separation of duties" in json.loads(own.content)["error"], own.content
    await Group.objects.aget_or_create(name="agent:approver")
    dora = await sync_to_async(make_user)("dora", "Reviewers", "agent:payer")
    nina = await sync_to_async(make_user)("nina", "Reviewers", "agent:approver")
    for user, sees in ((dora, True), (nina, False)):
        client = AsyncClient()
        await sync_to_async(client.force_login)(user)
        assert ("Pay ann 40" in (await client.get("/queue/")).content.decode()) is sees
    token = await sync_to_async(lambda: create_token(dora, name="t").plaintext)()
    assert (await Api(token).post(approve_path(asked["id"]), {})).status_code == 200
    read = json.loads((await Api(reviewer_token).get(f"{REQUESTS}/{asked['id']}")).content)
    assert (read["status"], read["decidedBy"]) == ("approved", "dora")


_DECIDE_ELSEWHERE = """
from asgiref.sync import async_to_sync
from approvals import agents
approve = async_to_sync(agents.get("payer").approve_tool_call)
stream = approve(run_id="{run_id}", tool_call_id="request", actor="rita")
print(async_to_sync(stream.result)().status)
"""


async def test_a_long_poll_is_woken_by_a_decision_in_another_process(
    payer: Api, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "RECHECK_SECONDS", 60.0)  # (only the event can wake it in time)
    asked = await ask(payer)
    env = server.env_for(database_url(), redis_url=settings.REDIS_URL or None)
    env["AGENTS_RUNTIME"] = "tests.support.mastra_agents:runtime"
    waiting = asyncio.ensure_future(payer.get(f"{REQUESTS}/{asked['id']}", {"wait": "40"}))
    answered: list[datetime] = []
    waiting.add_done_callback(lambda _: answered.append(datetime.now(UTC)))
    await asyncio.sleep(0.5)
    assert not waiting.done()
    done = await sync_to_async(server.manage)(
        env, "shell", "--command", _DECIDE_ELSEWHERE.format(run_id=asked["id"])
    )
    assert done.strip().splitlines()[-1] == "success"
    read = json.loads((await asyncio.wait_for(waiting, 20)).content)
    assert read["status"] == "approved" and read["decidedBy"] == "rita"
    # Woken by the decision's event (timed from the decision, not from the other process's start,
    # which a loaded machine makes slow).
    assert answered[0] - datetime.fromisoformat(read["decidedAt"]) < timedelta(seconds=5)


# -- effect previews (issue 38) ------------------------------------------------------------------------

PREVIEW: dict[str, Any] = {
    "sentence": "$40.00 leaves account A-1044",
    "changes": [{"label": "Balance", "before": "$100.00", "after": "$60.00"}],
    "items": ["invoice 7"],
}


async def test_an_external_agents_preview_is_on_the_card_and_read_back(payer: Api, reviewer: User) -> None:
    asked = await ask(payer, preview=PREVIEW)

    client = AsyncClient()
    await sync_to_async(client.force_login)(reviewer)
    card = (await client.get(f"/runs/{asked['id']}/")).content.decode()
    assert '<p class="preview-sentence">$40.00 leaves account A-1044</p>' in card
    assert '<td class="preview-before">$100.00</td><td class="preview-after">$60.00</td>' in card
    assert asked["preview"] == PREVIEW
    read = conforms(await payer.get(f"{REQUESTS}/{asked['id']}"), "getApprovalRequest")
    assert read["preview"] == PREVIEW


async def test_a_preview_past_its_bounds_is_refused_and_nothing_is_asked(payer: Api) -> None:
    before = await ApprovalRequest.objects.acount()

    refused = await payer.post(REQUESTS, body(preview={"sentence": "x" * 501, "changes": "no"}))

    assert refused.status_code == 422, refused.content
    issues = {i["field"] for i in refused.json()["issues"]}
    assert issues == {"preview.sentence", "preview.changes"}
    assert await ApprovalRequest.objects.acount() == before


async def test_a_v1_approval_on_a_stale_fingerprint_is_refused(payer: Api, reviewer_token: str) -> None:
    asked = await ask(payer, preview=PREVIEW)
    reviewer = Api(reviewer_token)
    run = conforms(await reviewer.get(f"/api/v1/agents/payer/runs/{asked['id']}"), "getRun")
    (call,) = run["toolCalls"]
    assert call["preview"] == {**PREVIEW, "diff": None, "error": None}
    # What a client saw before the preview was there: the arguments alone.
    stale = fingerprint(asked["args"])
    assert call["fingerprint"] != stale

    refused = await reviewer.post(approve_path(asked["id"]), {"fingerprint": stale})

    assert refused.status_code == 403, refused.content
    assert refused.json()["code"] == "approval_refused"
    assert refused.json()["error"].startswith("The call changed since you saw it")
    assert (await payer.get(f"{REQUESTS}/{asked['id']}")).json()["status"] == "pending"
    approved = await reviewer.post(approve_path(asked["id"]), {"fingerprint": call["fingerprint"]})
    assert approved.status_code == 200, approved.content
    assert (await payer.get(f"{REQUESTS}/{asked['id']}")).json()["status"] == "approved"


async def test_the_mail_about_a_request_is_titled_as_the_request_asked(
    payer: Api,
    mail: MailSink,  # noqa: F811 (the fixture)
) -> None:
    """The title an agent gives its request titles its card and the message about it alike."""
    await sync_to_async(person)("rita", "Reviewers")

    await ask(payer, title="Pay ann 40 for the March invoice")

    await sync_to_async(wait_for)(lambda: len(mail.messages) == 1)
    text, html = parts(mail.messages[0])
    assert "Pay ann 40 for the March invoice" in text and "Pay ann 40 for the March invoice" in html
