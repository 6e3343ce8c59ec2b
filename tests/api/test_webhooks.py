"""Webhooks out, against a real local HTTP receiver: signatures, events, retries, re-sends, no slowdown."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.test import Client

from agents_runtime import Runtime
from approvals.models import WebhookDelivery, WebhookEndpoint
from tests.support.api import Api, read, start
from tests.support.users import make_user


class Receiver:
    """A local HTTP server recording each POST; ``plan`` says how to answer the next ones."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        #: "ok", "500", "drop" (close without answering) or "slow" (3 s, then 200); then "ok" for good.
        self.plan: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    step = receiver.plan.pop(0) if receiver.plan else "ok"
                    receiver.received.append(
                        {
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": body,
                            "answer": step,
                        }
                    )
                if step == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if step == "slow":
                    time.sleep(3)
                self.send_response(500 if step == "500" else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, answer: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [
                {**r, "json": json.loads(r["body"])}
                for r in self.received
                if answer is None or r["answer"] == answer
            ]


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    # The receiver listens on this machine, which webhooks may not reach unless allowed.
    settings.COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS = True
    server = Receiver()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture
def fast_retries(settings: Any) -> None:
    settings.WEBHOOK_RETRY_SECONDS = [0.2, 0.2, 0.2]
    settings.WEBHOOK_TIMEOUT_SECONDS = 5


def verify(secret: str, received: dict[str, Any]) -> bool:
    """Standard Webhooks verification, written from the spec (not with the sender's code)."""
    headers = {k.lower(): v for k, v in received["headers"].items()}
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + received["body"]
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    version, _, signature = headers["webhook-signature"].partition(",")
    return version == "v1" and hmac.compare_digest(signature, expected)


def wait_for(condition: Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def endpoint(url: str, **fields: Any) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(url=url, **fields)


def settled() -> bool:
    return not WebhookDelivery.objects.filter(status__in=["pending", "sending"]).exists()


async def test_events_are_signed_and_carry_the_run(
    mastra: Runtime, reviewer_token: str, receiver: Receiver, fast_retries: None
) -> None:
    hook = await sync_to_async(endpoint)(receiver.url)
    await sync_to_async(endpoint)(receiver.url + "/failed-only", events=["run.failed"])
    await sync_to_async(endpoint)(receiver.url + "/asker-only", agents=["asker"])
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt", thread="t1", resource="u1")
    await read(await api.post("/api/agents/approver/approve-tool-call", run))
    await sync_to_async(wait_for)(lambda: len(receiver.events()) >= 3)
    await sync_to_async(wait_for)(settled)
    # Each delivery goes on its own: they may arrive in any order (the body's timestamp orders them).
    got = sorted(receiver.events(), key=lambda r: r["json"]["timestamp"])
    assert [r["json"]["type"] for r in got] == ["call.suspended", "call.decided", "run.completed"]
    assert {r["headers"]["host"] for r in got} and all(r["body"] for r in got)
    assert all(verify(hook.secret, r) for r in got)
    assert not verify("whsec_" + base64.b64encode(b"x" * 32).decode(), got[0])
    suspended, decided, completed = (r["json"]["data"] for r in got)
    assert suspended == {
        "agentId": "approver",
        "runId": run["runId"],
        "threadId": "t1",
        "resourceId": "u1",
        "toolCallId": run["toolCallId"],
        "toolName": "deleteFile",
        "kind": "approval",
        # (COUNTERSIGN_BASE_URL unset and no page loaded by anyone: approvals.site's default address.)
        "links": {
            "dashboard": f"http://localhost:8000/runs/{run['runId']}/",
            "api": f"http://localhost:8000/api/v1/agents/approver/runs/{run['runId']}",
        },
    }
    assert decided["action"] == "approve" and decided["decidedBy"] == "rita" and decided["channel"] == "api"
    assert decided["toolName"] == "deleteFile" and decided["threadId"] == "t1"
    assert completed["runId"] == run["runId"] and completed["resourceId"] == "u1"
    assert len({r["headers"]["webhook-id"] for r in got}) == 3
    stamps = [int(r["headers"]["webhook-timestamp"]) for r in got]
    assert all(abs(s - time.time()) < 60 for s in stamps)
    # The other two endpoints did not want these events: nothing recorded for them.
    assert await WebhookDelivery.objects.exclude(endpoint=hook).acount() == 0


async def test_call_decided_carries_the_reason_and_the_edited_arguments_and_its_link_outlives_the_run(
    mastra: Runtime, reviewer_token: str, receiver: Receiver, fast_retries: None
) -> None:
    await sync_to_async(endpoint)(receiver.url, events=["call.decided"])
    api = Api(reviewer_token)
    declined = await start(api, "approver", "Please delete /tmp/a.txt", thread="t1", resource="u1")
    edited = await start(api, "approver", "Please delete /tmp/b.txt")
    await read(
        await api.post("/api/agents/approver/decline-tool-call", {**declined, "reason": "Keep that file"})
    )
    await read(
        await api.post(
            "/api/agents/approver/approve-tool-call", {**edited, "editedArgs": {"path": "/tmp/c.txt"}}
        )
    )
    await sync_to_async(wait_for)(lambda: len(receiver.events()) >= 2)
    await sync_to_async(wait_for)(settled)
    data = {r["json"]["data"]["runId"]: r["json"]["data"] for r in receiver.events()}
    no, yes = data[declined["runId"]], data[edited["runId"]]
    assert (no["action"], no["reason"], no["editedArgs"]) == ("decline", "Keep that file", None)
    assert (yes["action"], yes["reason"], yes["editedArgs"]) == ("approve", None, {"path": "/tmp/c.txt"})
    # Both runs have ended: the API link answers from their permanent record.
    for payload, run in ((no, declined), (yes, edited)):
        record = await api.get(payload["links"]["api"])
        assert record.status_code == 200, record.content
        body = json.loads(record.content)
        assert body["runId"] == run["runId"] and body["status"] == "completed" and body["endedAt"]
        assert body["toolCalls"] == [] and body["detail"].startswith("[scripted-approver]")
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert json.loads((await api.get(no["links"]["api"])).content)["threadId"] == "t1"
    # Another agent's path to the same run is no link: 404.
    elsewhere = await api.get(no["links"]["api"].replace("/approver/", "/nomem/"))
    assert elsewhere.status_code == 404


async def test_a_500_and_a_dropped_connection_are_retried_with_the_same_id(
    mastra: Runtime, reviewer_token: str, receiver: Receiver, fast_retries: None
) -> None:
    hook = await sync_to_async(endpoint)(receiver.url, events=["call.suspended"])
    receiver.plan = ["500", "drop"]
    await start(Api(reviewer_token), "approver", "Please delete /tmp/a.txt")
    await sync_to_async(wait_for)(settled)
    got = receiver.events()
    assert [r["answer"] for r in got] == ["500", "drop", "ok"]
    assert len({r["headers"]["webhook-id"] for r in got}) == 1
    assert len({r["headers"]["webhook-timestamp"] for r in got}) >= 1
    assert all(verify(hook.secret, r) for r in got)
    delivery = await WebhookDelivery.objects.aget()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("delivered", 3, 204)
    assert delivery.message_id == got[0]["headers"]["webhook-id"]


async def test_a_receiver_that_keeps_failing_is_given_up_and_resent_by_hand(
    mastra: Runtime, reviewer_token: str, receiver: Receiver, fast_retries: None, settings: Any
) -> None:
    settings.WEBHOOK_RETRY_SECONDS = [0.1]
    await sync_to_async(endpoint)(receiver.url, events=["call.suspended"])
    receiver.plan = ["500", "500"]
    await start(Api(reviewer_token), "approver", "Please delete /tmp/a.txt")
    await sync_to_async(wait_for)(settled)
    delivery = await WebhookDelivery.objects.aget()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("failed", 2, "HTTP 500")

    def resend_in_admin() -> None:
        admin = make_user("ada", "Admins")  # not a superuser: the Admins group may
        client = Client()
        client.force_login(admin)
        response = client.post(
            "/admin/approvals/webhookdelivery/",
            {"action": "resend", "_selected_action": [delivery.pk]},
        )
        assert response.status_code == 302

    def register_in_admin() -> None:
        client = Client()
        client.force_login(make_user("adele", "Admins"))
        response = client.post(
            "/admin/approvals/webhookendpoint/add/",
            {
                "url": "https://hooks.example.com/countersign",
                "description": "",
                "events": '["run.failed"]',
                "agents": "[]",
                "active": "on",
                "secret": "whsec_" + base64.b64encode(b"k" * 32).decode(),
            },
        )
        assert response.status_code == 302, response.content[:2000]
        bad = client.post(
            "/admin/approvals/webhookendpoint/add/",
            {"url": "https://x.example", "events": '["nope"]', "agents": "[]", "secret": "plain"},
        )
        assert bad.status_code == 200 and b"errorlist" in bad.content

    await sync_to_async(register_in_admin)()
    assert await WebhookEndpoint.objects.filter(events=["run.failed"]).aexists()
    await sync_to_async(resend_in_admin)()
    await sync_to_async(wait_for)(settled)
    again = await WebhookDelivery.objects.aget()
    assert (again.status, again.attempts) == ("delivered", 3)
    ids = [r["headers"]["webhook-id"] for r in receiver.events()]
    assert ids == [delivery.message_id] * 3


async def test_a_slow_receiver_never_slows_a_decision(
    mastra: Runtime, reviewer_token: str, receiver: Receiver, fast_retries: None
) -> None:
    await sync_to_async(endpoint)(receiver.url, events=["call.decided", "run.completed"])
    receiver.plan = ["slow", "slow"]
    api = Api(reviewer_token)
    run = await start(api, "approver", "Please delete /tmp/a.txt")
    began = time.monotonic()
    response = await api.post(
        f"/api/v1/agents/approver/runs/{run['runId']}/calls/{run['toolCallId']}/approve", {}
    )
    assert response.status_code == 200
    assert time.monotonic() - began < 1.5
    await sync_to_async(wait_for)(settled)
    assert await WebhookDelivery.objects.filter(status="delivered").acount() == 2


def test_with_the_database_backend_a_worker_sends_the_delivery(
    mastra: Runtime, receiver: Receiver, settings: Any, transactional_db: None
) -> None:
    """The event is recorded at once; the sending is a task that the ``db_worker`` runs."""
    from asgiref.sync import async_to_sync

    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    endpoint(receiver.url, events=["call.suspended"])
    result = async_to_sync(mastra.get_agent("approver").generate)("Please delete /tmp/w.txt")
    assert result.status == "suspended"
    assert WebhookDelivery.objects.get().status == "pending" and receiver.events() == []
    call_command("db_worker", "--batch", "--no-startup-delay", "--no-reload", verbosity=0)
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("delivered", 1)
    assert [r["json"]["data"]["runId"] for r in receiver.events()] == [result.run_id]


def test_deliveries_orphaned_by_a_restart_go_out_with_their_own_ids(
    transactional_db: None, receiver: Receiver
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from approvals.webhooks.sending import schedule_orphans

    hook = endpoint(receiver.url, events=["call.suspended"])
    long_ago = timezone.now() - timedelta(minutes=5)
    # As a restart leaves them: one waiting for a retry its thread no longer makes, one cut off
    # mid-send (its lease ran out), and one whose retry is not due yet.
    waiting = WebhookDelivery.objects.create(
        endpoint=hook, message_id="msg_waiting", event_type="call.suspended", payload={"n": 1},
        attempts=1, next_attempt_at=long_ago,
    )  # fmt: skip
    cut_off = WebhookDelivery.objects.create(
        endpoint=hook, message_id="msg_cut_off", event_type="call.suspended", payload={"n": 2},
        status="sending", claimed_until=long_ago, next_attempt_at=long_ago,
    )  # fmt: skip
    WebhookDelivery.objects.create(
        endpoint=hook, message_id="msg_later", event_type="call.suspended", payload={"n": 3},
        attempts=1, next_attempt_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip

    assert schedule_orphans() == 2
    # The receiver sees a request before its sender marks the row delivered: wait for the rows.
    orphans = WebhookDelivery.objects.filter(pk__in=[waiting.pk, cut_off.pk])
    wait_for(lambda: not orphans.exclude(status="delivered").exists())

    assert sorted(r["headers"]["webhook-id"] for r in receiver.events()) == ["msg_cut_off", "msg_waiting"]
    assert WebhookDelivery.objects.get(message_id="msg_later").status == "pending"
    assert schedule_orphans() == 0  # nothing is sent twice


def test_a_sender_waiting_for_its_retry_is_stopped_and_leaves_the_row_to_the_sweep(
    transactional_db: None, receiver: Receiver, settings: Any
) -> None:
    """What ends each test (``deliveries.stop_senders``): a thread asleep until its retry wakes at
    once and ends without another attempt; its row keeps its place for the sweep."""
    from approvals.outbound import deliveries
    from approvals.webhooks.sending import schedule

    settings.WEBHOOK_RETRY_SECONDS = [60]
    endpoint(receiver.url, events=["call.suspended"])
    receiver.plan = ["500"]
    delivery = WebhookDelivery.objects.create(
        endpoint=WebhookEndpoint.objects.get(), message_id="msg_retry", event_type="call.suspended",
        payload={"n": 1},
    )  # fmt: skip
    schedule(delivery.pk, 0.0)  # its first attempt fails: its thread sleeps a minute
    wait_for(lambda: WebhookDelivery.objects.filter(pk=delivery.pk, attempts=1, status="pending").exists())

    began = time.monotonic()
    assert deliveries.stop_senders() == 1
    assert time.monotonic() - began < 2  # woken, not waited out
    assert deliveries.stop_senders() == 0
    row = WebhookDelivery.objects.get(pk=delivery.pk)
    assert (row.status, row.attempts, row.last_error) == ("pending", 1, "HTTP 500")
    assert len(receiver.events()) == 1
