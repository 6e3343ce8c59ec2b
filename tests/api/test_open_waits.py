"""Answers one account keeps open while they wait for a person (``approvals/services/waits.py``):
at most ``API_OPEN_WAITS_PER_CALLER`` at once, through the AG-UI resumes and the approval requests'
long polls (the MCP gateway's calls: ``tests/approvals/mcp/test_gateway.py``). Past it the answer is
a 429 with ``Retry-After`` and nothing is decided; an answer gives its place back when it ends, or
when its client hangs up."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth.models import User
from django.core.handlers.asgi import ASGIHandler

from agents_runtime import Runtime
from tests.api.test_ag_ui import URL, audit, chat, concierge, interrupts, resume, run_input
from tests.api.test_approval_requests import REQUESTS, approve_path, ask, payer, payer_token
from tests.support import ag_ui_agents
from tests.support.api import Api

__all__ = ["concierge", "payer", "payer_token"]  # (their fixtures)

pytestmark = pytest.mark.asyncio


def refused_for_waits(response: Any) -> bool:
    body = json.loads(response.content)
    limited = response.status_code == 429 and int(response["Retry-After"]) > 0
    return limited and body["code"] == "too_many_waits"


@asynccontextmanager
async def streaming(token: str, body: dict[str, Any]) -> AsyncIterator[ApplicationCommunicator]:
    """The AG-UI request served by Django's ASGI handler as Daphne serves it, its client connected
    for the block and hanging up after it (``http.disconnect``)."""
    payload = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": URL,
        "raw_path": URL.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    client = ApplicationCommunicator(ASGIHandler(), scope)
    await client.send_input({"type": "http.request", "body": payload, "more_body": False})
    try:
        yield client
    finally:
        await client.send_input({"type": "http.disconnect"})
        await client.wait(30)


async def read_until(client: ApplicationCommunicator, name: str) -> None:
    """Read the stream until its ``CUSTOM`` event ``name``."""
    start = await client.receive_output(30)
    assert start["type"] == "http.response.start" and start["status"] == 200, start
    seen = b""
    while f'"name":"{name}"'.encode() not in seen:
        message = await client.receive_output(30)
        seen += message.get("body", b"")


async def test_a_resume_that_waits_keeps_its_place_until_its_client_hangs_up(
    concierge: Runtime, reviewer: User, reviewer_token: str, settings: Any
) -> None:
    settings.API_OPEN_WAITS_PER_CALLER = 1
    api = Api(reviewer_token)
    [first] = interrupts(await chat(api, run_input("w1", "refund #A1 100")))
    [second] = interrupts(await chat(api, run_input("w2", "refund #A2 200")))
    waits = resume("w1", first)
    waits["resume"][0]["metadata"] = {"countersign": {"wait": True}}

    async with streaming(reviewer_token, waits) as waiting:
        await read_until(waiting, "countersign.waiting")

        refused = await api.post(URL, resume("w2", second, {"approved": True}))

        assert refused_for_waits(refused)
        assert ag_ui_agents.EXECUTED[second["toolCallId"]] == 0 and await audit() == []

    # The client hung up: its place is free again, and the same decision goes through.
    approved = await chat(api, resume("w2", second, {"approved": True}))
    assert approved[-1]["type"] == "RUN_FINISHED" and approved[-1]["outcome"] == {"type": "success"}
    assert ag_ui_agents.EXECUTED[second["toolCallId"]] == 1


async def test_a_long_poll_keeps_its_place_while_it_waits_and_gives_it_back_with_its_answer(
    payer: Api, reviewer_token: str, settings: Any
) -> None:
    settings.API_OPEN_WAITS_PER_CALLER = 1
    asked = await ask(payer)
    path = f"{REQUESTS}/{asked['id']}"

    # Two long polls at once: one waits, the other is refused at once, whichever came first.
    polls = [asyncio.ensure_future(payer.get(path, {"wait": 30})) for _ in range(2)]
    done, _ = await asyncio.wait(polls, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    [refused] = done
    assert refused_for_waits(refused.result())
    # A read that does not wait is never refused.
    read = await payer.get(path)
    assert read.status_code == 200 and json.loads(read.content)["status"] == "pending"

    assert (await Api(reviewer_token).post(approve_path(asked["id"]), {})).status_code == 200
    [holder] = [poll for poll in polls if poll is not refused]
    answered = await asyncio.wait_for(holder, 20)
    assert answered.status_code == 200 and json.loads(answered.content)["status"] == "approved"

    # Its answer gave the place back.
    again = await payer.get(path, {"wait": 5})
    assert again.status_code == 200 and json.loads(again.content)["status"] == "approved"
