"""AG-UI over the runtime (``approvals/api/ag_ui.py``), from Python against the ASGI app."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from ag_ui.core import EventType
from django.contrib.auth.models import User

from agents_runtime import Runtime
from approvals import agents as served
from approvals.apps import compose
from approvals.models import AuditEntry
from tests.support import ag_ui_agents
from tests.support.api import Api, read

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
