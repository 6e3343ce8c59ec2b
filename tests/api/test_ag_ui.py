"""AG-UI over the runtime (``approvals/api/ag_ui.py``), from Python against the ASGI app."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import EventType
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient, Client
from django.urls import reverse

from agents_runtime import Runtime
from approvals import agents as served
from approvals.apps import compose
from approvals.models import AuditEntry
from approvals.services.tokens import create_token
from tests.support import ag_ui_agents
from tests.support.api import Api, read
from tests.support.users import make_user

URL = "/api/ag-ui/agents/concierge"


@pytest.fixture
def concierge(settings: Any, transactional_db: None) -> Iterator[Runtime]:
    built = ag_ui_agents.build()
    previous = served.runtime()
    ag_ui_agents.runtime = built
    settings.AGENTS_RUNTIME = "tests.support.ag_ui_agents:runtime"
    compose(built)
    ag_ui_agents.EXECUTED.clear()
    yield built
    served.install(previous)


def run_input(thread: str, text: str | None = None, **more: Any) -> dict[str, Any]:
    messages = [] if text is None else [{"id": str(uuid.uuid4()), "role": "user", "content": text}]
    return {"threadId": thread, "runId": str(uuid.uuid4()), "messages": messages, **more}


def sse(body: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(b.removeprefix("data: ")) for b in body.decode().split("\n\n") if b.startswith("data: ")
    ]


async def chat(api: Api, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = await api.post(URL, body)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream"
    return sse(await read(response))


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


@pytest.mark.asyncio
async def test_a_run_that_completes(concierge: Runtime, reviewer: User, reviewer_token: str) -> None:
    events = await chat(Api(reviewer_token), run_input("t1", "hello there"))
    assert types(events) == [
        EventType.RUN_STARTED,
        EventType.TEXT_MESSAGE_START,
        *[EventType.TEXT_MESSAGE_CONTENT] * (len(events) - 4),
        EventType.TEXT_MESSAGE_END,
        EventType.RUN_FINISHED,
    ]
    assert (
        "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        == "Hello! You said: hello there"
    )
    assert events[-1]["outcome"] == {"type": "success"}


def interrupts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["outcome"]["type"] == "interrupt", events[-3:]
    found: list[dict[str, Any]] = finished["outcome"]["interrupts"]
    return found


def resume(
    thread: str, interrupt: dict[str, Any], payload: Any = None, status: str = "resolved"
) -> dict[str, Any]:
    entry = {"interruptId": interrupt["id"], "status": status}
    if payload is not None:
        entry["payload"] = payload
    return run_input(thread, resume=[entry])


async def audit() -> list[tuple[str, str, str, str]]:
    return [
        row
        async for row in AuditEntry.objects.order_by("id").values_list(
            "username", "action", "outcome", "channel"
        )
    ]


async def test_a_parked_approval_ends_with_its_interrupt_and_the_chat_user_approves_it(
    concierge: Runtime, reviewer: User, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    events = await chat(api, run_input("t2", "please refund #A7 1200"))
    assert EventType.TOOL_CALL_START in types(events)
    [start] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "refund"
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"order_id": "A7", "amount_cents": 1200}
    [interrupt] = interrupts(events)
    assert interrupt["id"] == f"int-{start['toolCallId']}" and interrupt["toolCallId"] == start["toolCallId"]
    assert interrupt["reason"] == "tool_call"
    assert interrupt["responseSchema"]["required"] == ["approved"]
    meta = interrupt["metadata"]["countersign"]
    assert meta["kind"] == "approval" and meta["mayDecide"] is True and meta["toolName"] == "refund"
    run_id = meta["runId"]
    assert run_id == events[0]["runId"]  # the AG-UI run that started it named the runtime's run
    # The same call waits in the desk's queue.
    waiting = await concierge.get_agent("concierge").get_suspended_run(run_id)
    assert [c.tool_call_id for c in waiting.tool_calls] == [start["toolCallId"]]

    done = await chat(
        api,
        resume("t2", interrupt, {"approved": True, "editedArgs": {"order_id": "A7", "amount_cents": 1000}}),
    )
    assert types(done)[0] == EventType.RUN_STARTED and done[-1]["type"] == "RUN_FINISHED"
    assert done[-1]["outcome"] == {"type": "success"}
    [result] = [e for e in done if e["type"] == "TOOL_CALL_RESULT"]
    assert json.loads(result["content"]) == {"refunded": "A7", "amount_cents": 1000}
    assert EventType.TOOL_CALL_START not in types(done)  # (the client has the call from the first run)
    assert {start["toolCallId"]: 1} == ag_ui_agents.EXECUTED
    assert await audit() == [("rita", "approve", "completed", "api")]


async def waiting_calls(runtime: Runtime, run_id: str) -> list[str]:
    run = await runtime.get_agent("concierge").get_suspended_run(run_id)
    return [c.tool_call_id for c in run.tool_calls]


async def test_a_suspend_call_interrupts_with_its_resume_schema_and_refused_data_changes_nothing(
    concierge: Runtime, reviewer: User, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    [interrupt] = interrupts(await chat(api, run_input("t3", "please paint the door")))
    assert interrupt["reason"] == "input_required"
    assert interrupt["message"] == "Which colour for the door?"
    assert interrupt["responseSchema"]["required"] == ["colour"]
    meta = interrupt["metadata"]["countersign"]
    assert (
        meta["kind"] == "suspend"
        and meta["suspendPayload"]["item"] == "door"
        and meta["args"] == {"item": "door"}
    )

    refused = await chat(api, resume("t3", interrupt, {"colour": ["red"]}))
    assert types(refused) == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    assert refused[-1]["code"] == "invalid_decision" and "colour" in refused[-1]["message"]
    bad_approval = await chat(api, resume("t3", interrupt, {"approved": "yes"}))
    assert bad_approval[-1]["type"] == "RUN_ERROR"
    assert await waiting_calls(concierge, meta["runId"]) == [interrupt["toolCallId"]]
    assert await audit() == []

    done = await chat(api, resume("t3", interrupt, {"colour": "teal"}))
    assert done[-1]["outcome"] == {"type": "success"}
    assert '"colour": "teal"' in done[-1]["result"]
    assert await audit() == [("rita", "resume", "completed", "api")]


async def test_an_approval_payload_that_breaks_pydantic_ais_schema_is_a_run_error(
    concierge: Runtime, reviewer: User, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    [interrupt] = interrupts(await chat(api, run_input("t4", "refund #B2 300")))
    refused = await chat(api, resume("t4", interrupt, {"approved": 1}))
    assert types(refused) == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    assert refused[-1]["code"] == "invalid_resume" and "approved" in refused[-1]["message"]
    assert await audit() == []

    declined = await chat(api, resume("t4", interrupt, {"approved": False, "reason": "Not this order"}))
    assert declined[-1]["outcome"] == {"type": "success"} and "Not this order" in declined[-1]["result"]
    assert ag_ui_agents.EXECUTED == {}
    assert await audit() == [("rita", "decline", "completed", "api")]


async def test_a_thread_that_waits_answers_a_new_message_with_what_it_owes(
    concierge: Runtime, reviewer: User, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    [interrupt] = interrupts(await chat(api, run_input("t5", "refund #C3 100")))
    again = await chat(api, run_input("t5", "hello?"))
    assert types(again) == [EventType.RUN_STARTED, EventType.RUN_FINISHED]
    assert interrupts(again) == [interrupt]
    listed = await concierge.get_agent("concierge").list_suspended_runs(thread_id="t5")
    assert listed.total == 1


def refusal(events: list[dict[str, Any]]) -> dict[str, Any]:
    [custom] = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "countersign.decision_refused"]
    value: dict[str, Any] = custom["value"]
    return value


async def test_a_chat_user_the_rules_refuse_is_told_and_the_call_waits_for_a_reviewer(
    concierge: Runtime, reviewer: User, reviewer_token: str, settings: Any
) -> None:
    settings.API_STREAM_MAX_SECONDS = 1
    api = Api(reviewer_token)
    [interrupt] = interrupts(await chat(api, run_input("t6", "wire 5000")))
    meta = interrupt["metadata"]["countersign"]
    assert meta["mayDecide"] is False and meta["refusal"] == "separation_of_duties"

    events = await chat(api, resume("t6", interrupt, {"approved": True}))
    said = refusal(events)
    assert said["code"] == "separation_of_duties" and said["waitsFor"] == "reviewer"
    assert said["toolCallId"] == interrupt["toolCallId"] and said["runId"] == meta["runId"]
    # Nobody decided within the stream's time: the run ends with the interrupt it still waits on.
    assert interrupts(events)[0]["id"] == interrupt["id"]
    assert await waiting_calls(concierge, meta["runId"]) == [interrupt["toolCallId"]]
    assert ag_ui_agents.EXECUTED == {}
    assert await audit() == [("rita", "approve", "refused", "api")]

    # Reconnecting to wait decides nothing (the entry's metadata says so) and waits again.
    waits = resume("t6", interrupt)
    waits["resume"][0]["metadata"] = {"countersign": {"wait": True}}
    again = await chat(api, waits)
    [waiting] = [e for e in again if e["type"] == "CUSTOM"]
    assert waiting["name"] == "countersign.waiting" and waiting["value"]["waitsFor"] == "reviewer"
    assert interrupts(again)[0]["id"] == interrupt["id"]
    # A reviewer approves while no chat is connected: the next reconnect hears who, and the answer.
    victor = await sync_to_async(make_user)("victor", "Reviewers")
    other = Api(await sync_to_async(lambda: create_token(victor, name="desk").plaintext)())
    page = f"/api/v1/agents/concierge/runs/{meta['runId']}/calls/{interrupt['toolCallId']}/approve"
    assert (await other.post(page, {})).status_code == 200
    back = await chat(api, waits)
    decided = [e["value"] for e in back if e["type"] == "CUSTOM"]
    assert decided == [
        {
            "runId": meta["runId"],
            "interruptId": interrupt["id"],
            "toolCallId": interrupt["toolCallId"],
            "action": "approve",
            "decidedBy": "victor",
        }
    ]
    assert back[-1]["outcome"] == {"type": "success"} and '"wired": 5000' in back[-1]["result"]
    assert await audit() == [("rita", "approve", "refused", "api"), ("victor", "approve", "completed", "api")]


async def test_a_user_who_decides_nothing_is_refused_without_a_decision(
    concierge: Runtime, reviewer: User, reviewer_token: str, settings: Any
) -> None:
    settings.API_STREAM_MAX_SECONDS = 1
    [interrupt] = interrupts(await chat(Api(reviewer_token), run_input("t7", "refund #D4 100")))
    auditor = await sync_to_async(make_user)("aude", "Auditors")
    watcher = Api(await sync_to_async(lambda: create_token(auditor, name="chat").plaintext)())
    owed = interrupts(await chat(watcher, run_input("t7", "what is going on?")))
    assert owed[0]["metadata"]["countersign"]["mayDecide"] is False

    events = await chat(watcher, resume("t7", interrupt, {"approved": True}))
    assert refusal(events)["code"] == "not_a_decider"
    assert await waiting_calls(concierge, interrupt["metadata"]["countersign"]["runId"]) == [
        interrupt["toolCallId"]
    ]
    assert await audit() == []


class Stream:
    """A streamed answer read event by event (the request's work runs as it is read)."""

    def __init__(self, response: Any) -> None:
        assert response.status_code == 200, response.content
        self.chunks = aiter(response.streaming_content)
        self.pending = b""
        self.events: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any]:
        while b"\n\n" not in self.pending:
            self.pending += await asyncio.wait_for(anext(self.chunks), 30)
        block, self.pending = self.pending.split(b"\n\n", 1)
        event: dict[str, Any] = json.loads(block.removeprefix(b"data: "))
        self.events.append(event)
        return event

    async def until(self, type_: str) -> dict[str, Any]:
        while (event := await self.next())["type"] != type_:
            pass
        return event


async def test_a_reviewers_decision_at_the_desk_continues_the_connected_chat(
    concierge: Runtime, reviewer: User, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    [interrupt] = interrupts(await chat(api, run_input("t8", "wire 2500")))
    run_id = interrupt["metadata"]["countersign"]["runId"]
    stream = Stream(await api.post(URL, resume("t8", interrupt, {"approved": True})))
    assert (await stream.until("CUSTOM"))["name"] == "countersign.decision_refused"

    victor = await sync_to_async(make_user)("victor", "Reviewers")
    desk = Client()
    await sync_to_async(desk.force_login)(victor)
    page = reverse("approvals:approve", args=[run_id, interrupt["toolCallId"]])
    answer = await sync_to_async(desk.post)(page, {"agent": "concierge"})
    assert answer.status_code in (200, 302)

    decided = await stream.until("CUSTOM")
    assert decided["name"] == "countersign.decided"
    assert decided["value"]["decidedBy"] == "victor" and decided["value"]["action"] == "approve"
    finished = await stream.until("RUN_FINISHED")
    assert finished["outcome"] == {"type": "success"} and '"wired": 2500' in finished["result"]
    [result] = [e for e in stream.events if e["type"] == "TOOL_CALL_RESULT"]
    assert json.loads(result["content"]) == {"wired": 2500, "to": "ACME"}
    assert dict(ag_ui_agents.EXECUTED) == {interrupt["toolCallId"]: 1}
    assert await audit() == [
        ("rita", "approve", "refused", "api"),
        ("victor", "approve", "completed", "dashboard"),
    ]


async def test_an_interrupt_answered_twice_is_decided_once(
    concierge: Runtime, reviewer: User, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    [interrupt] = interrupts(await chat(api, run_input("t9", "refund #E5 700")))
    both = await asyncio.gather(
        chat(api, resume("t9", interrupt, {"approved": True})),
        chat(api, resume("t9", interrupt, {"approved": False, "reason": "changed my mind"})),
    )
    later = await chat(api, resume("t9", interrupt, {"approved": True}))
    won = [e for e in both if not any(x["type"] == "CUSTOM" for x in e)]
    lost = [e for e in [*both, later] if any(x["type"] == "CUSTOM" for x in e)]
    assert len(won) == 1 and len(lost) == 2
    for events in lost:
        [told] = [x for x in events if x["type"] == "CUSTOM"]
        assert told["name"] == "countersign.already_decided" and told["value"]["decidedBy"] == "rita"
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert sum(ag_ui_agents.EXECUTED.values()) <= 1
    rows = await audit()
    assert sorted(outcome for _, _, outcome, _ in rows) == ["completed", "lost_race", "lost_race"]


async def test_who_may_chat_over_ag_ui(concierge: Runtime, reviewer: User) -> None:
    body = run_input("t10", "hello")
    nobody = await Api(None).post(URL, body)
    assert nobody.status_code == 401 and json.loads(nobody.content)["code"] == "unauthenticated"
    # A signed-in browser's session needs its CSRF token, as the other API routes do.
    browser = AsyncClient(enforce_csrf_checks=True)
    await sync_to_async(browser.force_login)(reviewer)
    forged = await browser.post(URL, body, content_type="application/json")
    assert forged.status_code == 403 and json.loads(forged.content)["code"] == "csrf_failed"
    await browser.get("/")  # (the dashboard sets the CSRF cookie)
    token = browser.cookies["csrftoken"].value
    used = run_input("t10", "hello")
    allowed = await browser.post(URL, used, content_type="application/json", headers={"X-CSRFToken": token})
    assert allowed.status_code == 200
    assert sse(await read(allowed))[-1]["type"] == "RUN_FINISHED"
    assert (await Api(None).post("/api/ag-ui/agents/nope", body)).status_code == 401
    api = Api(await sync_to_async(lambda: create_token(reviewer, name="t").plaintext)())
    assert (await api.post("/api/ag-ui/agents/nope", body)).status_code == 404
    for bad in ({"threadId": "t"}, {**body, "messages": "hi"}, run_input("t10", None)):
        refused = await api.post(URL, bad)
        assert refused.status_code == 400 and json.loads(refused.content)["code"] == "invalid_body", bad
    clash = await api.post(URL, {**run_input("t11", "hi"), "runId": used["runId"]})
    assert clash.status_code == 400 and json.loads(clash.content)["code"] == "run_id_in_use"


async def test_a_stream_that_breaks_on_the_server_ends_with_a_run_error(
    concierge: Runtime, reviewer: User, reviewer_token: str, monkeypatch: Any
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the rules are out of reach")

    monkeypatch.setattr(concierge.get_agent("concierge"), "would_decide", broken)
    events = await chat(Api(reviewer_token), run_input("t12", "refund #F6 100"))
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1] == {
        "type": "RUN_ERROR",
        "message": "The stream broke on the server",
        "code": "internal_error",
    }
    assert "rules are out of reach" not in json.dumps(events)


async def test_an_approval_that_is_one_vote_of_two_waits_for_the_second_reviewer(
    concierge: Runtime, reviewer: User, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    [interrupt] = interrupts(await chat(api, run_input("t13", "payout 900")))
    assert interrupt["metadata"]["countersign"]["approvalsRequired"] == 2
    stream = Stream(await api.post(URL, resume("t13", interrupt, {"approved": True})))
    vote = await stream.until("CUSTOM")
    assert vote["name"] == "countersign.vote_recorded"
    assert vote["value"]["approvedBy"] == ["rita"] and vote["value"]["required"] == 2
    assert ag_ui_agents.EXECUTED == {}

    victor = await sync_to_async(make_user)("victor", "Reviewers")
    other = Api(await sync_to_async(lambda: create_token(victor, name="desk").plaintext)())
    page = f"/api/v1/agents/concierge/runs/{vote['value']['runId']}/calls/{interrupt['toolCallId']}/approve"
    assert (await other.post(page, {})).status_code == 200
    decided = await stream.until("CUSTOM")
    assert decided["name"] == "countersign.decided" and decided["value"]["decidedBy"] == "victor"
    finished = await stream.until("RUN_FINISHED")
    assert finished["outcome"] == {"type": "success"} and '"paid_out": 900' in finished["result"]
    assert dict(ag_ui_agents.EXECUTED) == {interrupt["toolCallId"]: 1}
    assert [outcome for _, _, outcome, _ in await audit()] == ["vote_recorded", "completed"]


@pytest.mark.slow
async def test_with_a_db_worker_the_chat_hears_the_workers_continuation(
    concierge: Runtime, reviewer: User, reviewer_token: str, settings: Any, artifacts_dir: Path
) -> None:
    """The chat user's approval is taken here; the continuation runs in a real ``db_worker`` process,
    and its chunks reach the AG-UI stream through the run's live group."""
    from tests.support import server
    from tests.support.services import database_url

    api = Api(reviewer_token)
    [interrupt] = interrupts(await chat(api, run_input("t14", "refund #W1 250")))
    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    reading = asyncio.ensure_future(read(await api.post(URL, resume("t14", interrupt, {"approved": True}))))
    for _ in range(300):  # (the decision is on record before the worker starts)
        if await audit() == [("rita", "approve", "continuing", "api")]:
            break
        await asyncio.sleep(0.1)
    env = server.env_for(database_url(), redis_url=os.environ.get("REDIS_URL"), tasks_backend="database")
    env["AGENTS_RUNTIME"] = "tests.support.ag_ui_agents:runtime"
    with (artifacts_dir / "ag_ui_db_worker.log").open("wb") as log:
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
            sent = sse(await asyncio.wait_for(reading, timeout=60))
            assert await asyncio.wait_for(worker.wait(), timeout=60) == 0
        finally:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
    assert types(sent)[0] == EventType.RUN_STARTED and sent[-1]["type"] == "RUN_FINISHED"
    [result] = [e for e in sent if e["type"] == "TOOL_CALL_RESULT"]
    assert json.loads(result["content"]) == {"refunded": "W1", "amount_cents": 250}
    assert sent[-1]["outcome"] == {"type": "success"} and "Result:" in sent[-1]["result"]


async def test_a_cancelled_interrupt_declines_its_call_with_pydantic_ais_words(
    concierge: Runtime, reviewer: User, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    [interrupt] = interrupts(await chat(api, run_input("t15", "please paint the shed")))
    done = await chat(api, resume("t15", interrupt, status="cancelled"))
    assert done[-1]["outcome"] == {"type": "success"} and "Cancelled by user." in done[-1]["result"]
    assert ag_ui_agents.EXECUTED == {}
    assert await audit() == [("rita", "decline", "completed", "api")]


async def test_an_answer_to_a_call_of_an_older_waiting_run_is_decided_there_as_asked(
    concierge: Runtime, reviewer: User, reviewer_token: str, settings: Any
) -> None:
    """The thread's newest waiting run is another (started since): the answer still goes to the run
    that waits on its call, with its edits, never as a bare approval of the model's arguments."""
    settings.API_STREAM_MAX_SECONDS = 1
    api = Api(reviewer_token)  # rita asks for the wire: separation of duties refuses her approval
    [wire] = interrupts(await chat(api, run_input("tw", "wire 5000")))
    assert refusal(await chat(api, resume("tw", wire, {"approved": True})))["code"] == "separation_of_duties"
    newer = await api.post(
        "/api/agents/concierge/stream",
        {"messages": "refund #Z9 100", "memory": {"thread": "tw", "resource": "rita"}},
    )
    await read(newer)
    assert (await concierge.get_agent("concierge").list_suspended_runs(thread_id="tw")).total == 2
    victor = Api(
        await sync_to_async(lambda: create_token(make_user("victor", "Reviewers"), name="v").plaintext)()
    )

    events = await chat(
        victor, resume("tw", wire, {"approved": True, "editedArgs": {"to": "ACME", "amount_cents": 1}})
    )

    results = [json.loads(e["content"]) for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert results == [{"wired": 1, "to": "ACME"}], types(events)
    assert ag_ui_agents.EXECUTED[wire["toolCallId"]] == 1
    approved = await AuditEntry.objects.aget(username="victor")
    assert approved.edited_args == {"to": "ACME", "amount_cents": 1}
    # Entries of two runs in one resume: refused whole, nothing decided.
    [refund] = interrupts(await chat(api, run_input("tw", "anything")))
    both = resume("tw", refund, {"approved": True})
    both["resume"].append({"interruptId": wire["id"], "status": "resolved", "payload": {"approved": True}})
    mixed = await chat(victor, both)
    assert mixed[-1]["type"] == "RUN_ERROR" and mixed[-1]["code"] == "invalid_resume"
    assert ag_ui_agents.EXECUTED[refund["toolCallId"]] == 0


async def test_decisions_over_ag_ui_count_against_the_tokens_rate_limit(
    concierge: Runtime, reviewer: User, reviewer_token: str, settings: Any
) -> None:
    """As the v1 and Mastra routes count theirs (``API_DECISION_RATE_LIMIT``): a token whose
    decisions of the window are spent is refused (429) before anything is decided."""
    settings.API_DECISION_RATE_LIMIT = "1/60"
    api = Api(reviewer_token)
    [first] = interrupts(await chat(api, run_input("r1", "refund #A1 100")))
    [second] = interrupts(await chat(api, run_input("r2", "refund #A2 200")))
    assert types(await chat(api, resume("r1", first, {"approved": True})))[-1] == "RUN_FINISHED"

    limited = await api.post(URL, resume("r2", second, {"approved": True}))

    assert limited.status_code == 429 and limited["Retry-After"]
    assert ag_ui_agents.EXECUTED[second["toolCallId"]] == 0
    # Waiting for the desk decides nothing: not counted, not refused.
    waits = resume("r2", second)
    waits["resume"][0]["metadata"] = {"countersign": {"wait": True}}
    settings.API_STREAM_MAX_SECONDS = 1
    assert (await api.post(URL, waits)).status_code == 200


async def test_an_approval_echoing_the_interrupts_fingerprint_is_bound_to_the_call_as_shown(
    concierge: Runtime, reviewer: User, reviewer_token: str
) -> None:
    """As the v1 API's ``fingerprint``: an interrupt carries the call's as shown, and an answer whose
    metadata echoes it approves that call or nothing (a chat showing an older call is told to look
    again, and is given the call as it is now); an answer without one decides unbound."""
    api = Api(reviewer_token)
    [interrupt] = interrupts(await chat(api, run_input("fp", "refund #F1 700")))
    meta = interrupt["metadata"]["countersign"]
    read = json.loads((await api.get(f"/api/v1/agents/concierge/runs/{meta['runId']}")).content)
    assert meta["fingerprint"] == read["toolCalls"][0]["fingerprint"]

    stale = resume("fp", interrupt, {"approved": True})
    stale["resume"][0]["metadata"] = {"countersign": {"fingerprint": "0" * 32}}
    events = await chat(api, stale)

    [refused] = [e for e in events if e["type"] == "CUSTOM"]
    assert refused["name"] == "countersign.decision_refused"
    assert refused["value"]["code"] == "arguments_changed" and "waitsFor" not in refused["value"]
    assert interrupts(events) == [interrupt]  # (the call as it is now, to look at again)
    assert ag_ui_agents.EXECUTED[interrupt["toolCallId"]] == 0

    malformed = resume("fp", interrupt, {"approved": True})
    malformed["resume"][0]["metadata"] = {"countersign": {"fingerprint": 7}}
    said = await chat(api, malformed)
    assert (
        types(said) == [EventType.RUN_STARTED, EventType.RUN_ERROR] and said[-1]["code"] == "invalid_resume"
    )
    assert ag_ui_agents.EXECUTED[interrupt["toolCallId"]] == 0

    bound = resume("fp", interrupt, {"approved": True})
    bound["resume"][0]["metadata"] = {"countersign": {"fingerprint": meta["fingerprint"]}}
    assert (await chat(api, bound))[-1]["outcome"] == {"type": "success"}
    assert ag_ui_agents.EXECUTED[interrupt["toolCallId"]] == 1
