"""Two clients approve the same call at once over HTTP, against Daphne: one wins, the other is told who."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.api import test_mastra_client

pytestmark = pytest.mark.slow

#: A Daphne of its own (the client test's counts tool call ids from a fresh start).
countersign = test_mastra_client.countersign


def _post(port: int, token: str, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture(scope="module")
def server(countersign: tuple[int, str, Path]) -> Iterator[tuple[int, str]]:
    port, token, _ = countersign
    yield port, token


def test_a_race_of_two_approvals_over_http_has_one_winner(server: tuple[int, str]) -> None:
    port, token = server
    status, body = _post(
        port, token, "/api/agents/approver/stream", {"messages": "Please delete /tmp/race.txt"}
    )
    assert status == 200
    parked = [json.loads(b[6:]) for b in body.decode().split("\n\n") if b.startswith("data: {")][-1]
    decision = {"runId": parked["runId"], "toolCallId": parked["payload"]["toolCallId"]}

    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(
            pool.map(
                lambda _: _post(port, token, "/api/agents/approver/approve-tool-call", decision), range(2)
            )
        )

    statuses = sorted(status for status, _ in answers)
    assert statuses == [200, 409], answers
    won = next(body for status, body in answers if status == 200)
    lost = json.loads(next(body for status, body in answers if status == 409))
    events = [json.loads(b[6:]) for b in won.decode().split("\n\n") if b.startswith("data: {")]
    assert [e["type"] for e in events].count("tool-result") == 1 and won.endswith(b"data: [DONE]\n\n")
    assert lost["code"] == "already_decided" and lost["decidedBy"] == "client" and lost["decidedAt"]
