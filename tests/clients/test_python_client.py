"""The Python client (clients/python) against a live desk: real HTTP both ways, a reviewer deciding
over the v1 API while the client waits (long polls), nothing of ours mocked."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from countersign_client import (
    ApiError,
    ApprovalDeclined,
    AsyncCountersign,
    Countersign,
    CountersignError,
    DecisionTimeout,
    Status,
)
from countersign_client.pydantic_ai import deferred_tool_results
from pydantic_ai import DeferredToolRequests

from tests.clients.conftest import AGENT, RELEASES, Desk

# The module's tests share its desk (a server): one worker runs them all, so it is started once, not
# once per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_python_client"), pytest.mark.own_sqlite]


@pytest.fixture
def client(desk: Desk) -> Iterator[Countersign]:
    with Countersign(desk.url, desk.tokens[AGENT], timeout=10) as client:
        yield client


def _when_waiting(
    desk: Desk, find: Callable[[], str | None], decide: Callable[[str], None]
) -> threading.Thread:
    """In the background, as a reviewer: once a request is in the queue, decide it."""

    def reviewer() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            request_id = find()
            if request_id:  # listed to the reviewer as a waiting run of the agent
                decide(request_id)
                return
            time.sleep(0.1)

    thread = threading.Thread(target=reviewer, daemon=True)
    thread.start()
    return thread


def _latest(desk: Desk, tool: str, agent: str = AGENT) -> Callable[[], str | None]:
    def find() -> str | None:
        listed = desk.reviewer.get(f"/api/agents/{agent}/suspended-runs", params={"perPage": 50, "page": 0})
        for run in listed.json()["runs"]:
            if any(call["toolName"] == tool for call in run["toolCalls"]):
                return str(run["runId"])
        return None

    return find


def test_request_approval_waits_for_the_reviewer_and_returns_the_edited_arguments(
    desk: Desk, client: Countersign
) -> None:
    reviewer = _when_waiting(
        desk,
        _latest(desk, "refund_edit"),
        lambda rid: desk.approve(rid, edited_args={"order_id": "A-1042", "amount_cents": 2500}),
    )

    decision = client.request_approval(
        agent=AGENT,
        tool="refund_edit",
        args={"order_id": "A-1042", "amount_cents": 4200},
        title="Refund $42.00 on A-1042",
        max_wait=30,
    )
    reviewer.join(5)

    assert decision.approved and decision.status == Status.APPROVED
    assert decision.args == {"order_id": "A-1042", "amount_cents": 2500}
    assert decision.edited and decision.decided_by == "rita" and decision.decided_at is not None
    assert decision.request.url and decision.request.url.startswith(desk.url)


def test_a_decorated_function_runs_once_approved_with_the_approved_arguments_and_reports_back(
    desk: Desk, client: Countersign
) -> None:
    ran: list[tuple[str, int]] = []

    @client.requires_approval(agent=AGENT, title=lambda a: f"Refund on {a['order_id']}", max_wait=30)
    def refund_gated(order_id: str, amount_cents: int, note: str = "") -> str:
        ran.append((order_id, amount_cents))
        return f"refunded {amount_cents} on {order_id}"

    reviewer = _when_waiting(
        desk,
        _latest(desk, "refund_gated"),
        lambda rid: desk.approve(rid, edited_args={"order_id": "A-7", "amount_cents": 100, "note": ""}),
    )
    result = refund_gated("A-7", 9_999)
    reviewer.join(5)

    assert (result, ran) == ("refunded 100 on A-7", [("A-7", 100)])
    listed = desk.reviewer.get(f"/api/agents/{AGENT}/suspended-runs").json()["runs"]
    assert not any(c["toolName"] == "refund_gated" for r in listed for c in r["toolCalls"])


def test_the_result_of_a_decorated_call_is_on_the_request(desk: Desk, client: Countersign) -> None:
    @client.requires_approval(agent=AGENT, max_wait=30)
    def export_report(month: str) -> str:
        return f"report for {month} sent"

    found = _latest(desk, "export_report")
    ids: list[str] = []
    reviewer = _when_waiting(desk, found, lambda rid: (ids.append(rid), desk.approve(rid)))
    assert export_report("2026-11") == "report for 2026-11 sent"
    reviewer.join(5)

    request = client.get_request(ids[0])
    assert request.result is not None and request.result.ok
    assert request.result.output == "report for 2026-11 sent"
    assert request.status == Status.APPROVED and not request.edited


def test_a_declined_call_raises_with_the_reason_and_the_function_never_runs(
    desk: Desk, client: Countersign
) -> None:
    ran: list[str] = []

    @client.requires_approval(agent=AGENT, max_wait=30)
    def wipe_customer(customer_id: str) -> None:
        ran.append(customer_id)

    decline = lambda rid: desk.decline(rid, "Not without a ticket")  # noqa: E731
    reviewer = _when_waiting(desk, _latest(desk, "wipe_customer"), decline)
    with pytest.raises(ApprovalDeclined) as declined:
        wipe_customer("cus_42")
    reviewer.join(5)

    assert declined.value.reason == "Not without a ticket" and ran == []
    assert "declined by rita" in str(declined.value)


def test_a_retried_create_with_the_same_key_is_the_same_request(client: Countersign) -> None:
    key = "rotate-k1"
    first = client.create_request(agent=AGENT, tool="rotate_key", args={"key": "k1"}, idempotency_key=key)
    again = client.create_request(agent=AGENT, tool="rotate_key", args={"key": "k1"}, idempotency_key=key)

    assert again.id == first.id and again.status == Status.PENDING
    with pytest.raises(ApiError) as other_body:
        client.create_request(agent=AGENT, tool="rotate_key", args={"key": "k2"}, idempotency_key="rotate-k1")
    assert other_body.value.status == 422
    client.cancel(first.id, reason="test over")


def test_waiting_longer_than_max_wait_raises_and_the_request_can_be_cancelled(client: Countersign) -> None:
    request = client.create_request(agent=AGENT, tool="slow_call", args={"n": 1})

    started = time.monotonic()
    with pytest.raises(DecisionTimeout) as timed_out:
        client.wait_for_decision(request.id, max_wait=2)
    waited = time.monotonic() - started

    assert 1 <= waited < 10 and timed_out.value.request.status == Status.PENDING
    cancelled = client.cancel(request.id, reason="no longer needed")
    assert cancelled.status == Status.CANCELLED
    with pytest.raises(ApiError) as twice:
        client.cancel(request.id)
    assert twice.value.status == 409


def test_refusals_are_api_errors_with_the_servers_code(desk: Desk, client: Countersign) -> None:
    with pytest.raises(ApiError) as unknown:
        client.get_request("req_0000")
    assert unknown.value.status == 404

    with Countersign(desk.url, "cs_not-a-token") as stranger, pytest.raises(ApiError) as refused:
        stranger.create_request(agent=AGENT, tool="refund", args={})
    assert refused.value.status == 401 and refused.value.code

    with pytest.raises(ApiError) as other_agent:  # this token is billing-scripts' only
        client.create_request(agent=RELEASES, tool="deploy", args={})
    assert other_agent.value.status in (403, 404)


def test_a_desk_out_of_reach_is_a_clear_error_after_the_retries() -> None:
    with Countersign("http://127.0.0.1:9", "token", retries=1, timeout=2) as client:
        started = time.monotonic()
        with pytest.raises(CountersignError, match="out of reach"):
            client.get_request("req_1")
        assert time.monotonic() - started < 10


def test_the_pydantic_ai_bridge_answers_deferred_tool_requests_with_the_reviewers_decisions(
    desk: Desk,
) -> None:
    from examples.any_agent import pydantic_ai_bridge as example

    async def scenario() -> tuple[Any, Any]:
        async with AsyncCountersign(desk.url, desk.tokens[RELEASES], timeout=10) as client:
            first = await example.agent.run("Deploy v2.4.1 to production")
            assert isinstance(first.output, DeferredToolRequests)
            ask = {"agent": RELEASES, "thread_id": "releases", "args_schemas": example.SCHEMAS}
            answers = await deferred_tool_results(client, first.output, max_wait=30, **ask)
            again = await deferred_tool_results(client, first.output, max_wait=5, **ask)
            final = await example.agent.run(
                message_history=first.all_messages(), deferred_tool_results=answers
            )
            return (answers, again), final.output

    reviewer = _when_waiting(
        desk,
        _latest(desk, "deploy", agent=RELEASES),
        lambda rid: desk.approve(
            rid, agent=RELEASES, edited_args={"service": "checkout", "version": "v2.4.0"}
        ),
    )
    (answers, again), output = asyncio.run(scenario())
    reviewer.join(5)

    (answer,) = answers.approvals.values()
    assert answer.override_args == {"service": "checkout", "version": "v2.4.0"}
    # Asked again (a crash, a retry): the same requests, already decided, the same answers.
    assert again.approvals == answers.approvals
    assert output == "Done: checkout is now at v2.4.0"
