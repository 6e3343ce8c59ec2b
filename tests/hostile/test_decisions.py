"""Decisions that cannot be stored are refused with a field error before anything runs.

Limits (``agents_runtime.untrusted``): no NUL, no lone surrogates, no NaN or infinities, integers of
at most 100 digits, nesting at most 32 deep, at most 64 KiB of JSON.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from agents_runtime import DecisionRequest, InvalidResumeData, InvalidToolArgs
from agents_runtime.store import DecisionAction
from agents_runtime.untrusted import MAX_DEPTH
from approvals.models import AuditEntry
from approvals.policy import Access
from approvals.services.decisions import decide
from tests.hostile.conftest import HX
from tests.support.hostile_runtime import Call, Hostile


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


HOSTILE_JSON = {
    "5000-digit int": "7" * 5000,
    "101-digit int": "1" * 101,
    "nesting 900": nested(900),
    "nesting 50000": nested(50000),
    "nesting 33": nested(MAX_DEPTH + 1),
    "lone surrogate": '"\\ud800"',
    "lone surrogate key": '{"\\udfff": 1}',
    "nul": '"a\\u0000b"',
    "nul key": '{"a\\u0000": 1}',
    "NaN": "[NaN]",
    "Infinity": '{"x": -Infinity}',
    "1e999": "[1e999]",
    "-1e400": "-1e400",
    "too large": '"' + "x" * (70 * 1024) + '"',
}


def test_a_resume_answer_that_cannot_be_stored_is_a_field_error(
    hostile: Hostile, reviewer_client: Client, admin_member_client: Client
) -> None:
    run = hostile.start(Call("ask", {"topic": "anything"}))
    url = f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/resume"

    for name, text in HOSTILE_JSON.items():
        for extra in ({}, HX):
            response = reviewer_client.post(url, {"agent": "hostile", "resume-__json__": text}, **extra)

            assert response.status_code == (200 if extra else 400), name
            html = response.content.decode()
            assert 'aria-invalid="true"' in html and "field-errors" in html, name

    assert hostile.ran == 0
    assert [r.run_id for r in hostile.suspended()] == [run.run_id]
    assert not AuditEntry.objects.winning().exists()  # only invalid attempts
    assert admin_member_client.get("/audit/").status_code == 200
    assert admin_member_client.get("/audit/?invalid=on").status_code == 200


def test_a_form_field_answer_that_cannot_be_stored_is_a_field_error(
    serve: Any, reviewer_client: Client
) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "extra": {"type": "array"}}}
    hostile: Hostile = serve(fill_schema=schema)
    run = hostile.start(Call("fill", {"topic": "t"}))
    url = f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/resume"

    for name in ["5000-digit int", "nesting 900", "nesting 50000", "lone surrogate", "nul", "NaN", "1e999"]:
        response = reviewer_client.post(
            url, {"agent": "hostile", "resume-name": "ok", "resume-extra": HOSTILE_JSON[name]}, **HX
        )

        assert response.status_code == 200, name
        assert 'aria-invalid="true"' in response.content.decode(), name
    too_much = {"agent": "hostile", "resume-name": "x" * (70 * 1024), "resume-extra": "[]"}
    assert reviewer_client.post(url, too_much, **HX).status_code == 200

    assert hostile.ran == 0
    assert [r.run_id for r in hostile.suspended()] == [run.run_id]


EDITED_ARGS = [
    '{"target": "x", "amount": 1e999}',
    '{"target": "x", "amount": -1e400}',
    '{"target": "x", "amount": NaN}',
    '{"target": "\\ud800"}',
    '{"target": "a\\u0000b"}',
    '{"target": "x", "data": ' + nested(500) + "}",
    '{"target": "x", "data": ' + nested(MAX_DEPTH) + "}",
    '{"target": "x", "data": ' + nested(50000) + "}",
    '{"target": "x", "data": ' + "9" * 5000 + "}",
    '{"target": "x", "data": ' + "9" * 101 + "}",
    '{"target": "x", "data": {"k\\udc00": 1}}',
]


def test_edited_arguments_that_cannot_be_stored_are_a_field_error(
    hostile: Hostile, reviewer_client: Client, admin_member_client: Client
) -> None:
    run = hostile.start(Call("pay", {"target": "bob"}))
    url = f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/approve"

    for edited in EDITED_ARGS:
        for extra in ({}, HX):
            response = reviewer_client.post(url, {"agent": "hostile", "edited_args": edited}, **extra)

            assert response.status_code == (200 if extra else 400), edited[:80]
            assert 'aria-invalid="true"' in response.content.decode(), edited[:80]

    assert hostile.ran == 0
    assert [r.run_id for r in hostile.suspended()] == [run.run_id]
    assert admin_member_client.get("/audit/").status_code == 200
    export = admin_member_client.get("/audit/export.csv")
    assert export.status_code == 200
    b"".join(export.streaming_content)


def test_the_runtime_refuses_what_the_forms_would_for_every_caller(hostile: Hostile) -> None:
    agent = hostile.agent()
    asked = hostile.start(Call("ask", {"topic": "t"}))
    paid = hostile.start(Call("pay", {"target": "bob"}))
    deep: Any = 1
    for _ in range(100):
        deep = [deep]

    for data in (
        [float("nan")],
        {"x": "\ud800"},
        "a\x00",
        10**200,
        deep,
        {"k\x00": 1},
        {1: 2},
        {"x": object()},
    ):
        with pytest.raises(InvalidResumeData) as refused:
            async_to_sync(agent.resume_stream)(
                data, run_id=asked.run_id, tool_call_id=asked.tool_calls[0].tool_call_id
            )
        assert refused.value.errors, data
    for args in (
        {"target": "x", "amount": float("inf")},
        {"target": "\ud800"},
        {"target": "x", "data": deep},
    ):
        with pytest.raises(InvalidToolArgs):
            async_to_sync(agent.approve_tool_call)(
                run_id=paid.run_id, tool_call_id=paid.tool_calls[0].tool_call_id, edited_args=args
            )
    with pytest.raises(InvalidResumeData):
        async_to_sync(agent.decline_tool_call)(
            run_id=paid.run_id, tool_call_id=paid.tool_calls[0].tool_call_id, reason="no\x00"
        )

    assert hostile.ran == 0
    assert {r.run_id for r in hostile.suspended()} == {asked.run_id, paid.run_id}


def test_the_runtime_refuses_a_decline_reason_over_2000_characters_however_it_is_sent(
    hostile: Hostile,
) -> None:
    agent = hostile.agent()
    paid = hostile.start(Call("pay", {"target": "bob"}))
    call_id = paid.tool_calls[0].tool_call_id

    with pytest.raises(InvalidResumeData) as refused:
        async_to_sync(agent.decline_tool_call)(run_id=paid.run_id, tool_call_id=call_id, reason="x" * 2001)
    assert "at most 2,000" in str(refused.value)
    with pytest.raises(InvalidResumeData):
        async_to_sync(agent.resume_stream)(
            {"approved": False, "reason": "x" * 2001}, run_id=paid.run_id, tool_call_id=call_id
        )

    assert [r.run_id for r in hostile.suspended()] == [paid.run_id]
    async_to_sync(agent.decline_tool_call)(run_id=paid.run_id, tool_call_id=call_id, reason="x" * 2000)
    assert hostile.suspended() == [] and hostile.ran == 0


def test_the_decision_service_keeps_no_more_than_2000_characters_of_a_refused_reason(
    hostile: Hostile, reviewer: User
) -> None:
    paid = hostile.start(Call("pay", {"target": "bob"}))
    request = DecisionRequest(
        paid.run_id, paid.tool_calls[0].tool_call_id, DecisionAction.DECLINE, reason="x" * 900_000
    )

    for _ in range(3):  # (each attempt is a row of the append-only log: each one bounded)
        outcome = decide(Access.of(reviewer).for_agent("hostile"), request)
        assert outcome.status == "invalid"

    assert [len(e.reason) for e in AuditEntry.objects.all()] == [2000] * 3
    assert [r.run_id for r in hostile.suspended()] == [paid.run_id] and hostile.ran == 0


def test_answers_at_the_limits_are_taken(hostile: Hostile, reviewer_client: Client) -> None:
    run = hostile.start(Call("ask", {"topic": "t"}))
    call_id = run.tool_calls[0].tool_call_id
    answer = '{"n": ' + "9" * 100 + ', "deep": ' + nested(MAX_DEPTH - 1) + ', "text": "é ☃ 😀"}'

    response = reviewer_client.post(
        f"/runs/{run.run_id}/calls/{call_id}/resume", {"agent": "hostile", "resume-__json__": answer}, **HX
    )

    assert response.status_code == 200
    assert hostile.executed["ask"].count == 1
    assert AuditEntry.objects.get().outcome == "completed"


def test_an_audit_row_stored_with_a_lone_surrogate_is_shown_escaped(
    hostile: Hostile, admin_member_client: Client, reviewer_client: Client
) -> None:
    """What older versions let through (SQLite keeps the JSON escape): the pages still render."""
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL's json type never stored a lone surrogate")
    run = hostile.start(Call("pay", {"target": "bob"}))
    AuditEntry.objects.create(
        username="old",
        agent_id="hostile",
        run_id=run.run_id,
        tool_call_id="c1",
        tool_name="pay",
        args={"target": "bob"},
        edited_args={"target": "\ud800"},
        resume_data=["\udfff"],
        action="approve",
        outcome="completed",
    )

    audit = admin_member_client.get("/audit/")
    export = admin_member_client.get("/audit/export.csv")
    page = reviewer_client.get(f"/runs/{run.run_id}/")

    assert audit.status_code == 200 and "\\ud800" in audit.content.decode()
    assert export.status_code == 200 and "\\ud800" in b"".join(export.streaming_content).decode()
    assert page.status_code == 200
