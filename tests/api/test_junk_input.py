"""Junk sent to the API gets a 4xx JSON answer naming what is wrong, never a 5xx, and changes nothing.

On SQLite and on PostgreSQL (which refuses NUL in text and offsets past 15:59, and where a NUL thread
id on ``/stream`` used to hang the stream): ids and filters with NUL, lone surrogates or past the
store's length, JSON nested past the parser's recursion, numbers of thousands of digits, dates at
the ends of time with the largest offsets, and paths under ``/api/`` that are no route.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agents_runtime import Runtime
from approvals.services.tokens import create_token
from tests.support.api import Api, audit_rows, listing, read, start
from tests.support.users import make_user

A = "/api/agents/approver"
V1 = "/api/v1/agents/approver/runs"
NUL = "a\x00b"
DEEP = 100_000
BIG = "1" + "0" * 5000


def nested(inner: bytes, depth: int = DEEP) -> bytes:
    return b"[" * depth + inner + b"]" * depth


#: (method, path, query or JSON body or raw bytes, where the run's ids go as {run} / {call})
CASES: list[tuple[str, str, Any]] = [
    # Deeply nested JSON, on a Mastra route and a v1 one, and starting a run.
    (
        "POST",
        f"{A}/approve-tool-call",
        b'{"runId":"{run}","toolCallId":"{call}","editedArgs":{"a":' + nested(b"1") + b"}}",
    ),
    ("POST", f"{V1}/{{run}}/calls/{{call}}/approve", b'{"editedArgs":{"a":' + nested(b"1") + b"}}"),
    ("POST", f"{V1}/{{run}}/calls/{{call}}/resume", b'{"resumeData":' + nested(b"1") + b"}"),
    ("POST", f"{A}/stream", b'{"messages":' + nested(b'"hi"') + b"}"),
    # NUL and lone surrogates in ids: body, path, query.
    ("POST", f"{A}/approve-tool-call", {"runId": NUL, "toolCallId": "{call}"}),
    ("POST", f"{A}/decline-tool-call", {"runId": "{run}", "toolCallId": NUL}),
    ("POST", f"{A}/approve-tool-call", b'{"runId":"\\ud800","toolCallId":"{call}"}'),
    ("POST", f"{A}/resume-stream", b'{"runId":"\\udfff","resumeData":{"approved":true}}'),
    ("POST", f"{A}/stream", {"messages": "Please delete /tmp/n.txt", "memory": {"thread": NUL}}),
    ("POST", f"{A}/stream", {"messages": "Please delete /tmp/n.txt", "memory": {"resource": NUL}}),
    ("POST", f"{A}/stream", b'{"messages":"Please delete /tmp/n.txt","memory":{"thread":"\\ud800"}}'),
    ("POST", f"{A}/stream", {"messages": "Please delete /tmp/n.txt", "memory": {"thread": "t" * 256}}),
    ("GET", f"{V1}/a%00b", None),
    ("GET", f"{V1}/{'r' * 256}", None),
    ("POST", f"{V1}/a%00b/calls/{{call}}/decline", {"reason": "no"}),
    ("POST", f"{V1}/{{run}}/calls/a%00b/approve", {}),
    ("GET", "/api/agents/a%00b/suspended-runs", None),
    ("GET", f"{A}/suspended-runs", {"threadId": NUL}),
    ("GET", f"{A}/suspended-runs", {"resourceId": NUL}),
    ("GET", f"{A}/suspended-runs", {"toolName": "\x00"}),
    ("GET", "/api/v1/audit", {"agent": NUL}),
    ("GET", "/api/v1/audit", {"user": "\x00"}),
    # Numbers of thousands of digits, and past what a float holds.
    ("GET", f"{A}/suspended-runs", {"perPage": BIG, "page": "0"}),
    ("GET", f"{A}/suspended-runs", {"perPage": "1", "page": "-" + BIG}),
    ("GET", f"{A}/suspended-runs", {"perPage": "1e400", "page": "0"}),
    ("GET", f"{A}/suspended-runs", {"perPage": "1", "page": "1" * 5000 + ".5"}),
    ("GET", "/api/v1/audit", {"page": BIG}),
    ("POST", f"{V1}/{{run}}/calls/{{call}}/approve", b'{"editedArgs":{"path":' + BIG.encode() + b"}}"),
    (
        "POST",
        f"{A}/approve-tool-call",
        b'{"runId":"{run}","toolCallId":"{call}","editedArgs":{"path":1' + b"0" * 3000 + b"}}",
    ),
    ("POST", f"{V1}/{{run}}/calls/{{call}}/approve", b'{"editedArgs":{"path":1e99999}}'),
    (
        "POST",
        f"{A}/approve-tool-call",
        b'{"runId":"{run}","toolCallId":"{call}","editedArgs":{"path":-1e400}}',
    ),
    ("POST", f"{V1}/{{run}}/calls/{{call}}/approve", b'{"editedArgs":{"path":0.' + b"1" * 5000 + b"}}"),
    # Bodies past what the API reads (1 MiB) and past what Django reads at all (2.5 MB).
    ("POST", f"{A}/decline-tool-call", b'{"reason":"' + b"x" * (1024 * 1024) + b'"}'),
    ("POST", f"{V1}/{{run}}/calls/{{call}}/decline", b'{"reason":"' + b"x" * (3 * 1024 * 1024) + b'"}'),
    # Paths under /api/ that are no route, whatever the method.
    ("GET", "/api/nope", None),
    ("GET", "/api/v1/", None),
    ("POST", "/api/agents/approver/nope", {}),
    ("POST", "/api/v1/agents/a%00b/x", {}),
    ("GET", "/api/nothing/%0A", None),
]

#: Dates at the ends of time with the largest offsets ISO 8601 allows: answered, as bounds.
DATES = ["0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59", "2020-01-01T00:00:00+23:59", "9999-12-31"]


def _filled(value: Any, run: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.replace("{run}", run["runId"]).replace("{call}", run["toolCallId"])
    if isinstance(value, bytes):
        return value.replace(b"{run}", run["runId"].encode()).replace(b"{call}", run["toolCallId"].encode())
    if isinstance(value, dict):
        return {k: _filled(v, run) for k, v in value.items()}
    return value


@pytest.fixture
def admin_api(mastra: Runtime) -> Api:
    user = make_user("ada", "Reviewers", "Admins")
    return Api(create_token(user, name="junk").plaintext)


async def _send(api: Api, method: str, path: str, data: Any) -> Any:
    if method == "GET":
        request = api.get(path, data)
    elif isinstance(data, bytes):
        request = api.post(path, raw=data)
    else:
        request = api.post(path, data)
    response = await asyncio.wait_for(request, 30)
    await asyncio.wait_for(read(response), 30)  # (a stream that never ends is a failure too)
    return response


@pytest.mark.django_db(transaction=True)
async def test_junk_input_gets_a_4xx_json_answer_and_changes_nothing(admin_api: Api) -> None:
    run = await start(admin_api, "approver", "Please delete /tmp/a.txt")

    for method, path, data in CASES:
        response = await _send(admin_api, method, _filled(path, run), _filled(data, run))
        shown = (method, path[:70], str(data)[:70])
        assert 400 <= response.status_code < 500, (shown, response.status_code, response.content[:300])
        assert response["Content-Type"] == "application/json", shown
        answer = json.loads(response.content)
        assert answer["error"] and answer["code"], shown

    assert (await listing(admin_api))["total"] == 1
    assert (await listing(admin_api, "asker"))["total"] == 0
    assert await audit_rows() == []


@pytest.mark.django_db(transaction=True)
async def test_dates_at_the_ends_of_time_with_any_offset_are_answered_as_bounds(admin_api: Api) -> None:
    await start(admin_api, "approver", "Please delete /tmp/a.txt")

    for date in DATES:
        for path, name in ((f"{A}/suspended-runs", "fromDate"), (f"{A}/suspended-runs", "toDate")):
            response = await _send(admin_api, "GET", path, {name: date})
            assert response.status_code == 200, (name, date, response.content[:300])
        for name in ("from", "to"):
            response = await _send(admin_api, "GET", "/api/v1/audit", {name: date})
            assert response.status_code == 200, (name, date, response.content[:300])
    late = await _send(admin_api, "GET", f"{A}/suspended-runs", {"fromDate": "9999-12-31T23:59:59-23:59"})
    early = await _send(admin_api, "GET", f"{A}/suspended-runs", {"toDate": "0001-01-01T00:00:00+23:59"})
    assert json.loads(late.content)["total"] == json.loads(early.content)["total"] == 0


@pytest.mark.django_db(transaction=True)
async def test_a_nul_thread_id_on_stream_is_a_400_and_no_run_starts(admin_api: Api) -> None:
    body = {"messages": "Please delete /tmp/t.txt", "memory": {"thread": NUL, "resource": "dana"}}

    response = await _send(admin_api, "POST", f"{A}/stream", body)

    assert response.status_code == 400
    assert json.loads(response.content)["issues"][0]["field"] == "memory.thread"
    assert (await listing(admin_api))["total"] == 0
