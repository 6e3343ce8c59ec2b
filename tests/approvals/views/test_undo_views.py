"""The undo window's pages: the queue folds a held decision to "Approved by you · Undo" and keeps
it so on every refetch until it is taken; others see who is deciding and cannot decide meanwhile
(any door); Undo without JavaScript; the live events; a held vote is one vote when taken."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents_runtime import DecisionRequest, Origin
from agents_runtime.store import DecisionAction
from approvals import services
from approvals.live import uses_outbox
from approvals.models import AuditEntry, LiveEvent
from approvals.policy import Access
from tests.support.inbox_rows import HX
from tests.support.runtime_fixtures import DashboardAgents

QUEUE = "/queue/"
IN_QUEUE = {**HX, "HTTP_CS_LIST": "queue"}


@pytest.fixture(autouse=True)
def _undo_window(settings: Any) -> None:
    settings.DECISION_UNDO_SECONDS = 1


def post(client: Client, run_id: str, tool_call_id: str, action: str, **data: Any) -> Any:
    url = reverse(f"approvals:{action}", args=[run_id, tool_call_id])
    headers = data.pop("headers", IN_QUEUE)
    return client.post(url, {"agent": "helpdesk", **data}, **headers)


def take_due() -> int:
    return async_to_sync(services.commit_held)(timezone.now() + timedelta(seconds=2))


def test_the_queue_folds_a_held_decision_with_undo_and_keeps_it_on_refetch(
    agents: DashboardAgents, reviewer_client: Client, admin_member: User, client_for: Callable[..., Client]
) -> None:
    run = agents.start("helpdesk", "refund queued")
    call = run.tool_calls[0].tool_call_id

    held = post(reviewer_client, run.run_id, call, "approve").content.decode()

    assert "outcome-line" in held and "Approved by you" in held and ">Undo</button>" in held
    # The list's refetch (and a reload) shows the same receipt while it is held, not the call again.
    again = reviewer_client.get(QUEUE, **IN_QUEUE).content.decode()
    assert "Approved by you" in again and ">Undo</button>" in again
    assert 'aria-label="Approve' not in again
    for where in (f"/runs/{run.run_id}/", "/agents/helpdesk/"):  # the run page and the inbox too
        shown = reviewer_client.get(where).content.decode()
        assert ">Undo</button>" in shown and 'aria-label="Approve' not in shown, where
    # Another reviewer sees who is deciding it, and no decision to take.
    other = client_for(admin_member).get(QUEUE).content.decode()
    assert "rita is deciding (undo window)" in other
    other_body = client_for(admin_member).get(f"/runs/{run.run_id}/").content.decode()
    assert "is deciding this call (undo window)" in other_body and 'aria-label="Approve' not in other_body

    take_due()

    assert "Nothing waits for you here" in reviewer_client.get(QUEUE).content.decode()
    assert agents.executed["refund"].count == 1


def test_undo_without_javascript_goes_back_with_a_message(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund plain")
    call = run.tool_calls[0].tool_call_id
    decided = post(reviewer_client, run.run_id, call, "approve", next=QUEUE, headers={})
    assert decided.status_code == 302

    undone = post(reviewer_client, run.run_id, call, "undo", next=QUEUE, headers={})

    assert undone.status_code == 302 and undone["Location"] == QUEUE
    page = reviewer_client.get(QUEUE).content.decode()
    assert "Undone: not approved. Nothing ran." in page
    assert f'data-run-id="{run.run_id}"' in page and "has-outcome" not in page  # waiting again
    assert take_due() == 0 and agents.executed["refund"].count == 0
    assert AuditEntry.objects.get(run_id=run.run_id).outcome == "undone"


def test_held_and_undone_are_announced_to_open_pages(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    if not uses_outbox():
        pytest.skip("with Redis the events go to the layer at once (tests/e2e sees them reach a page)")
    run = agents.start("helpdesk", "refund announced")
    call = run.tool_calls[0].tool_call_id

    post(reviewer_client, run.run_id, call, "approve")
    post(reviewer_client, run.run_id, call, "undo")

    kinds = list(
        LiveEvent.objects.filter(run_id=run.run_id).order_by("pk").values_list("payload__type", flat=True)
    )
    assert kinds[-2:] == ["call-held", "call-undone"]  # (after the run's own: run-suspended)


def test_an_api_decision_on_a_held_call_loses_the_race(
    agents: DashboardAgents, reviewer_client: Client, admin_member: User
) -> None:
    run = agents.start("helpdesk", "refund api")
    call = run.tool_calls[0].tool_call_id
    post(reviewer_client, run.run_id, call, "approve")
    ada = Access.of(admin_member).for_agent("helpdesk")

    lost = services.decide(ada, DecisionRequest(run.run_id, call, DecisionAction.DECLINE, origin=Origin.API))

    assert lost.status == "lost_race" and lost.winner == "rita"
    assert "may still undo it" in lost.message
    take_due()
    assert agents.executed["refund"].count == 1
    assert list(
        AuditEntry.objects.filter(run_id=run.run_id).order_by("pk").values_list("username", "outcome")
    ) == [
        ("ada", "lost_race"),
        ("rita", "completed"),
    ]


def test_the_holder_cannot_decide_the_call_twice_while_it_is_held(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund twice")
    call = run.tool_calls[0].tool_call_id
    post(reviewer_client, run.run_id, call, "approve")

    twice = post(reviewer_client, run.run_id, call, "decline", reason="changed my mind").content.decode()

    assert "You decided this call a moment ago and can still undo it" in twice
    take_due()
    assert agents.executed["refund"].count == 1


def test_a_held_vote_counts_as_one_vote_when_taken(
    agents: DashboardAgents, reviewer_client: Client, admin_member: User, client_for: Callable[..., Client]
) -> None:
    run = agents.start("helpdesk", "payout", started_by="someone-else")
    call = run.tool_calls[0].tool_call_id
    post(reviewer_client, run.run_id, call, "approve")
    take_due()
    assert agents.executed["payout"].count == 0
    assert AuditEntry.objects.get(run_id=run.run_id).outcome == "vote_recorded"

    post(client_for(admin_member), run.run_id, call, "approve")
    take_due()

    assert agents.executed["payout"].count == 1
