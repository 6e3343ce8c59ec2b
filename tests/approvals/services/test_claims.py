"""Claims ("I'm on it"): others see who holds a call, a decision on someone else's claim asks for
confirmation first (without JavaScript too), and a claim lapses unless renewed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from approvals.live import uses_outbox
from approvals.models import CallClaim, LiveEvent
from tests.support.markup import main_of
from tests.support.runtime_fixtures import DashboardAgents

HX = {"HTTP_HX_REQUEST": "true"}


def call_url(run_id: str, tool_call_id: str, action: str) -> str:
    return f"/runs/{run_id}/calls/{tool_call_id}/{action}"


def test_a_claim_is_shown_to_others_and_deciding_it_asks_for_confirmation_first(
    agents: DashboardAgents, reviewer_client: Client, admin_member: User, client_for: Callable[..., Client]
) -> None:
    run = agents.start("helpdesk", "refund claimed")
    call = run.tool_calls[0]

    claimed = reviewer_client.post(
        call_url(run.run_id, call.tool_call_id, "claim"), {"agent": "helpdesk", "op": "claim"}, **HX
    )

    assert (
        "You are on this call" in claimed.content.decode() and ">Renew</button>" in claimed.content.decode()
    )
    if uses_outbox():  # with Redis it goes to the layer at once (tests/e2e sees it reach a page)
        assert LiveEvent.objects.filter(payload__type="call-claimed", run_id=run.run_id).exists()
    admin = client_for(admin_member)
    page = admin.get(f"/runs/{run.run_id}/").content.decode()
    assert "<strong>rita</strong> is on this call" in page and "Decide anyway (rita is on it)" in page
    assert "I'm on it</button>" not in page
    taken = admin.post(call_url(run.run_id, call.tool_call_id, "claim"), {"agent": "helpdesk"}, **HX)
    assert "rita is already on this call" in taken.content.decode()

    warned = admin.post(call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX)

    assert "rita is on this call (claimed it). Nothing was decided" in warned.content.decode()
    assert agents.executed["refund"].count == 0
    approved = admin.post(
        call_url(run.run_id, call.tool_call_id, "approve"),
        {"agent": "helpdesk", "confirm_claimed": "yes"},
        **HX,
    )
    assert "Completed" in approved.content.decode()
    assert agents.executed["refund"].count == 1


def test_the_warning_step_works_without_javascript_and_for_declines(
    agents: DashboardAgents, reviewer_client: Client, admin_member: User, client_for: Callable[..., Client]
) -> None:
    run = agents.start("helpdesk", "refund claimed")
    call = run.tool_calls[0]
    reviewer_client.post(call_url(run.run_id, call.tool_call_id, "claim"), {"agent": "helpdesk"})
    admin = client_for(admin_member)

    warned = admin.post(
        call_url(run.run_id, call.tool_call_id, "decline"), {"agent": "helpdesk", "reason": "no"}
    )

    assert warned.status_code == 400
    assert "rita is on this call" in warned.content.decode()
    assert len(agents.suspended("helpdesk")) == 1
    done = admin.post(
        call_url(run.run_id, call.tool_call_id, "decline"),
        {"agent": "helpdesk", "reason": "no", "confirm_claimed": "yes", "next": "/"},
    )
    assert done.status_code == 302 and agents.suspended("helpdesk") == []


def test_the_holder_decides_without_a_warning_and_a_lapsed_claim_warns_nobody(
    agents: DashboardAgents, reviewer_client: Client, admin_member: User, client_for: Callable[..., Client]
) -> None:
    mine = agents.start("helpdesk", "refund mine")
    reviewer_client.post(
        call_url(mine.run_id, mine.tool_calls[0].tool_call_id, "claim"), {"agent": "helpdesk"}
    )
    own = reviewer_client.post(
        call_url(mine.run_id, mine.tool_calls[0].tool_call_id, "approve"), {"agent": "helpdesk"}, **HX
    )
    assert "Completed" in own.content.decode()

    old = agents.start("helpdesk", "refund lapsed")
    reviewer_client.post(call_url(old.run_id, old.tool_calls[0].tool_call_id, "claim"), {"agent": "helpdesk"})
    CallClaim.objects.filter(run_id=old.run_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    admin = client_for(admin_member)
    assert "is on this call" not in main_of(admin.get(f"/runs/{old.run_id}/").content.decode())
    lapsed = admin.post(
        call_url(old.run_id, old.tool_calls[0].tool_call_id, "approve"), {"agent": "helpdesk"}, **HX
    )
    assert "Completed" in lapsed.content.decode()
    assert agents.executed["refund"].count == 2


def test_the_holder_renews_and_releases(agents: DashboardAgents, reviewer_client: Client) -> None:
    run = agents.start("helpdesk", "refund renew")
    path = call_url(run.run_id, run.tool_calls[0].tool_call_id, "claim")
    reviewer_client.post(path, {"agent": "helpdesk"})
    first = CallClaim.objects.get().expires_at
    CallClaim.objects.update(expires_at=first - timedelta(minutes=4))

    renewed = reviewer_client.post(path, {"agent": "helpdesk", "op": "claim"}, follow=True)

    assert "You renewed this call" in renewed.content.decode()
    assert CallClaim.objects.get().expires_at >= first
    released = reviewer_client.post(path, {"agent": "helpdesk", "op": "release"}, **HX)
    assert (
        "You are on this call" not in released.content.decode()
        and "I'm on it</button>" in released.content.decode()
    )
    assert not CallClaim.objects.exists()


def test_a_claim_post_that_says_neither_claim_nor_release_changes_nothing_and_says_so(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund typo")
    path = call_url(run.run_id, run.tool_calls[0].tool_call_id, "claim")

    answer = reviewer_client.post(path, {"agent": "helpdesk", "op": "relase"}, **HX)

    assert "Nothing changed" in answer.content.decode()
    assert not CallClaim.objects.exists()
