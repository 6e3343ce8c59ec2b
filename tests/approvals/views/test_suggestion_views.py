"""Suggested grants on the grants page: Accept makes the grant (scoped, expiring, recorded), Dismiss
records and hides it; only those who may make grants for the agent see or choose them; CSRF holds."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import timedelta

from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from approvals.models import AuditEntry, GrantRecord, GrantSuggestionRecord
from tests.approvals.views.test_escalation import escalated_and_not, manager
from tests.support.history import approvals, decided, refund
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import make_user

HX = {"HTTP_HX_REQUEST": "true"}


def form_of(page: str, action: str) -> dict[str, str]:
    """The hidden fields of the first suggestion's form posting to ``action``."""
    form = re.search(rf'<form method="post" action="{re.escape(action)}".*?</form>', page, re.S)
    assert form is not None, page
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form.group(0))
    return {name: html.unescape(value) for name, value in fields}


def suggested(agents: DashboardAgents) -> None:
    for amount in range(1000, 2200, 100):
        decided(refund(amount, order_id=f"A-{amount}", note=f"n{amount}"))
    decided(refund(90_000, order_id="A-9", note="big"), action="decline")


def test_accept_makes_a_scoped_expiring_grant_records_it_and_the_next_call_goes_through(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    suggested(agents)
    page = reviewer_client.get("/grants/").content.decode()
    assert "12 of 12 refund calls where amount_cents &lt;= 2100 approved by reviewers" in page
    assert "Would have matched 12 of the last 13 decided calls: 0 declined, 0 edited." in page

    answer = reviewer_client.post(
        "/grants/suggestions/accept", form_of(page, "/grants/suggestions/accept"), **HX
    )

    assert answer.status_code == 200
    assert "Allowed from now on: refund for everyone" in answer.content.decode()
    grant = GrantRecord.objects.get()
    assert (grant.scope, grant.condition, grant.created_by_name) == (
        "everyone",
        "amount_cents <= 2100",
        "rita",
    )
    assert grant.expires_at is not None
    assert timedelta(days=6) < grant.expires_at - timezone.now() <= timedelta(days=7)
    chosen = GrantSuggestionRecord.objects.get()
    assert (chosen.choice, chosen.grant_id, chosen.decided_by_name) == ("accepted", grant.pk, "rita")
    assert "12 of 12 refund calls" in chosen.summary
    assert AuditEntry.objects.filter(action="allow", grant=grant, username="rita").exists()
    # Not offered again; and a small refund now goes through without a reviewer.
    assert "Suggested from the last 7 days" not in reviewer_client.get("/grants/").content.decode()
    assert agents.start("helpdesk", "refund small").status == "success"


def test_dismiss_records_the_choice_and_the_suggestion_is_not_offered_again(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    approvals(10)
    page = reviewer_client.get("/grants/").content.decode()

    answer = reviewer_client.post(
        "/grants/suggestions/dismiss", form_of(page, "/grants/suggestions/dismiss"), **HX
    )

    assert "Dismissed: this suggestion is not offered again for 14 days." in answer.content.decode()
    chosen = GrantSuggestionRecord.objects.get()
    assert (chosen.choice, chosen.grant_id, chosen.condition, chosen.decided_by_name) == (
        "dismissed",
        None,
        "",
        "rita",
    )
    assert GrantRecord.objects.count() == 0
    approvals(5)  # more of the same: still dismissed
    assert "Suggested from the last 7 days" not in reviewer_client.get("/grants/").content.decode()


def test_terms_no_longer_offered_make_nothing(agents: DashboardAgents, reviewer_client: Client) -> None:
    approvals(10)
    fields = form_of(reviewer_client.get("/grants/").content.decode(), "/grants/suggestions/accept")

    tampered = reviewer_client.post("/grants/suggestions/accept", {**fields, "condition": "true"}, **HX)
    decided(refund(500), action="decline")
    stale = reviewer_client.post("/grants/suggestions/accept", fields, **HX)

    assert "Nothing was made: This suggestion is no longer offered" in tampered.content.decode()
    assert "Nothing was made: This suggestion is no longer offered" in stale.content.decode()
    assert GrantRecord.objects.count() == 0 and GrantSuggestionRecord.objects.count() == 0


def test_a_user_who_may_not_make_grants_sees_no_suggestion_and_is_refused(
    agents: DashboardAgents, reviewer_client: Client, viewer: User, client_for: Callable[..., Client]
) -> None:
    approvals(10)
    fields = form_of(reviewer_client.get("/grants/").content.decode(), "/grants/suggestions/accept")
    looker = client_for(viewer)  # sees helpdesk, may not decide

    assert "Suggested from the last 7 days" not in looker.get("/grants/").content.decode()
    refused = looker.post("/grants/suggestions/accept", fields, **HX)

    assert refused.status_code == 403
    assert GrantRecord.objects.count() == 0 and GrantSuggestionRecord.objects.count() == 0


def test_an_escalation_only_user_sees_no_suggestion_for_the_agent(
    agents: DashboardAgents, reviewer_client: Client, client_for: Callable[..., Client]
) -> None:
    escalated_and_not(agents)
    approvals(10)
    assert "Suggested from the last 7 days" in reviewer_client.get("/grants/").content.decode()
    max_client = client_for(manager())
    assert "Suggested from the last 7 days" not in max_client.get("/grants/").content.decode()

    Group.objects.get_or_create(name="agent:worker")
    other_agent_reviewer = make_user("otto", "Reviewers", "agent:worker")
    assert (
        "Suggested from the last 7 days"
        not in client_for(other_agent_reviewer).get("/grants/").content.decode()
    )


def test_accept_without_the_csrf_token_is_refused(agents: DashboardAgents, reviewer: User) -> None:
    approvals(10)
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    fields = form_of(client.get("/grants/").content.decode(), "/grants/suggestions/accept")
    fields.pop("csrfmiddlewaretoken", None)

    assert client.post("/grants/suggestions/accept", fields, **HX).status_code == 403
    assert GrantRecord.objects.count() == 0 and GrantSuggestionRecord.objects.count() == 0


def test_admins_read_the_choices_in_the_django_admin(
    agents: DashboardAgents, reviewer_client: Client, admin_member_client: Client
) -> None:
    approvals(10)
    page = reviewer_client.get("/grants/").content.decode()
    reviewer_client.post("/grants/suggestions/dismiss", form_of(page, "/grants/suggestions/dismiss"), **HX)

    listing = admin_member_client.get("/admin/approvals/grantsuggestionrecord/")

    assert listing.status_code == 200
    assert "dismissed" in listing.content.decode() and "rita" in listing.content.decode()
