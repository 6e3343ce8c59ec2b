"""Big JSON bodies to the API cost the event loop no more than reading them.

The API's views are coroutines: whatever they do between awaits holds the loop, every page, socket
and decision of the process. A body may be up to a megabyte (``approvals.api.params.MAX_BODY_BYTES``);
the data of a decision or of an approval request at most 64 KiB (``agents_runtime.untrusted``). A
megabyte of tiny values in a decision's data was walked in full by the storable-data check, the
tool's validators and the refusal's list of problems before it was refused as too large (up to a
second of the loop); pydantic checked every value of the v1 routes' JSON fields (300 ms). The data
is now refused as soon as it is known to be over its limit.

Counted in the loop thread's CPU time (``time.thread_time``: what runs on a thread is not in it),
against what ``json.loads`` of the same body costs here: the floor, whatever the machine's speed.
"""

from __future__ import annotations

import contextlib
import gc
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agents_runtime import InvalidToolArgs, Runtime
from agents_runtime.store import DecisionAction
from agents_runtime.untrusted import check_decision
from approvals.api.params import MAX_BODY_BYTES
from approvals.services.tokens import create_token
from tests.api.conftest import mastra, reviewer, reviewer_token, token_for  # noqa: F401 - fixtures
from tests.api.test_approval_requests import REQUESTS, payer, payer_token  # noqa: F401 - fixtures
from tests.support.api import Api, read, start
from tests.support.users import make_user

pytestmark = pytest.mark.timeout(180)

MASTRA = "/api/agents/approver"
V1 = "/api/v1/agents/approver/runs"
#: A megabyte of empty objects: the most values a body of the API's limit holds.
OBJECTS = b"[" + b"{}," * (MAX_BODY_BYTES // 3 - 100) + b"{}]"
#: 85,000 unknown arguments: each one a problem for the tool's validators and the refusal's list.
KEYS = b"{" + b",".join(b'"k%d":0' % i for i in range(85_000)) + b"}"


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """Without the garbage collector's passes, which fall on whichever request makes the objects
    that trigger them (a megabyte of them makes many): what is counted is the request's own work."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _floor(body: bytes) -> float:
    """The CPU ``json.loads`` takes to read ``body`` here (the least of three)."""
    costs = []
    for _ in range(3):
        with _no_collection():
            started = time.thread_time()
            json.loads(body)
            costs.append(time.thread_time() - started)
    return min(costs)


async def _on_the_loop(api: Api, path: str, body: bytes) -> tuple[Any, float]:
    """The answer, and the CPU the loop's thread spent on it (the test runs on the loop)."""
    with _no_collection():
        started = time.thread_time()
        response = await api.post(path, raw=body)
        await read(response)
        spent = time.thread_time() - started
    return response, spent


def _bounded(spent: float, body: bytes) -> None:
    floor = _floor(body)
    # Reading the body, plus the rest of a request (10 to 20 ms); pydantic's walk of every value took
    # 4 to 5 times the reading, the storable-data check's, the validators' and the refusal's 10 to 20.
    assert spent < 2 * floor + 0.03, f"{spent:.3f} s on the loop; reading the body takes {floor:.3f} s"


@pytest.fixture
def admin_api(mastra: Runtime) -> Api:  # noqa: F811 (the fixture)
    return Api(create_token(make_user("ada", "Reviewers", "Admins"), name="big").plaintext)


@pytest.mark.django_db(transaction=True)
async def test_a_decision_with_a_megabyte_of_data_is_refused_before_it_is_walked(admin_api: Api) -> None:
    run = await start(admin_api, "approver", "Please delete /tmp/a.txt")
    ids = b'"runId":"%s","toolCallId":"%s"' % (run["runId"].encode(), run["toolCallId"].encode())
    v1 = f"{V1}/{run['runId']}/calls/{run['toolCallId']}"
    await admin_api.post(f"{MASTRA}/decline-tool-call", raw=b'{"runId":"warm","toolCallId":"up"}')
    cases = [
        (f"{MASTRA}/approve-tool-call", b"{" + ids + b',"editedArgs":' + KEYS + b"}", "editedArgs"),
        (f"{MASTRA}/approve-tool-call", b"{" + ids + b',"editedArgs":{"a":' + OBJECTS + b"}}", "editedArgs"),
        (f"{MASTRA}/resume-stream", b"{" + ids + b',"resumeData":' + OBJECTS + b"}", "resumeData"),
        (f"{v1}/approve", b'{"editedArgs":' + KEYS + b"}", "editedArgs"),
        (f"{v1}/resume", b'{"resumeData":' + OBJECTS + b"}", "resumeData"),
    ]

    for path, body, field in cases:
        assert len(body) <= MAX_BODY_BYTES
        response, spent = await _on_the_loop(admin_api, path, body)

        _bounded(spent, body)
        assert response.status_code == 400, response.content[:300]
        issues = json.loads(response.content)["issues"]
        assert [i["field"] for i in issues] == [field], issues
        assert "too large" in issues[0]["message"], issues

    listed = json.loads((await admin_api.get(f"{MASTRA}/suspended-runs")).content)["runs"]
    assert [r["runId"] for r in listed] == [run["runId"]]  # still waiting: nothing was decided


async def test_an_approval_request_with_a_megabyte_of_arguments_is_refused_before_it_is_walked(
    payer: Api,  # noqa: F811 (the fixture)
) -> None:
    # (The first request's own costs are not the attack's.)
    await payer.post(REQUESTS, raw=b'{"agent":"payer","tool":"pay","args":{}}')
    for field, key in ((b"args", b"a"), (b"argsSchema", b"a"), (b"preview", b"items")):
        extra = b"" if field == b"args" else b',"args":{}'
        data = b'"' + field + b'":{"' + key + b'":' + OBJECTS + b"}"
        body = b'{"agent":"payer","tool":"pay"' + extra + b"," + data + b"}"
        response, spent = await _on_the_loop(payer, REQUESTS, body)

        _bounded(spent, body)
        assert response.status_code == 422, response.content[:300]
        fields = [i["field"] for i in json.loads(response.content)["issues"]]
        assert fields and fields[0].startswith(field.decode()), fields


def test_data_past_the_limit_is_refused_without_looking_at_all_of_it() -> None:
    """The storable-data check stops at the limit: a megabyte of values is refused as too large at
    once, where it was walked in full, and let through to the validators (``only_json=False``)."""
    edited = {"path": [{}] * 1_000_000}
    started = time.thread_time()
    with pytest.raises(InvalidToolArgs, match="too large"):
        check_decision(DecisionAction.APPROVE, edited_args=edited)
    assert time.thread_time() - started < 0.05
