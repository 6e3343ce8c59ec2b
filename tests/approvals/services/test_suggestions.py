"""Grants suggested from the decided history: offered only where reviewers approved the same kind of
call at least 10 times in 7 days without declining or editing one, narrowed where that holds only
for part of the calls, and never for a tool that takes no grants."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User

from approvals.policy import Access
from approvals.services.suggestions import dismiss, suggestions
from tests.support.history import approvals, decided, refund
from tests.support.runtime_fixtures import DashboardAgents


def offered(user: User) -> list[str]:
    return [s.summary for s in suggestions(Access.of(user))]


def test_ten_clean_approvals_are_offered_as_a_grant_for_everyone(
    agents: DashboardAgents, reviewer: User
) -> None:
    approvals(10)

    assert offered(reviewer) == [
        "10 of 10 refund calls approved by reviewers, none declined, none edited, in 7 days. "
        "Would have matched 10 of the last 10 decided calls: 0 declined, 0 edited."
    ]


def test_nine_approvals_or_approvals_older_than_the_window_are_not_enough(
    agents: DashboardAgents, reviewer: User
) -> None:
    approvals(9)
    approvals(5, ago=timedelta(days=8))

    assert offered(reviewer) == []


def test_a_decline_or_an_edit_of_the_same_kind_of_call_means_no_suggestion(
    agents: DashboardAgents, reviewer: User
) -> None:
    approvals(12)
    decided(refund(500), action="decline")
    assert offered(reviewer) == []

    decided(refund(500, order_id="A-2"), agent_id="helpdesk", tool_name="transfer")  # another tool
    approvals(12, tool_name="transfer")
    decided(refund(500), tool_name="transfer", edited=refund(400))
    assert offered(reviewer) == []


def test_where_the_large_calls_were_declined_the_grant_offered_stops_below_them(
    agents: DashboardAgents, reviewer: User
) -> None:
    for amount in range(1000, 2200, 100):  # 12 approvals up to $21
        decided(refund(amount, order_id=f"A-{amount}", note=f"n{amount}"))
    decided(refund(90_000, order_id="A-9", note="big"), action="decline")

    (suggestion,) = suggestions(Access.of(reviewer))

    assert suggestion.terms.condition == "amount_cents <= 2100"
    assert suggestion.headline == (
        "12 of 12 refund calls where amount_cents <= 2100 approved by reviewers, none declined, "
        "none edited, in 7 days"
    )
    assert (
        suggestion.trial.sentence
        == "Would have matched 12 of the last 13 decided calls: 0 declined, 0 edited."
    )


def test_one_end_users_clean_approvals_are_offered_for_that_end_user(
    agents: DashboardAgents, reviewer: User
) -> None:
    for n in range(10):
        decided(refund(500 + n, order_id=f"A-{n}", note=f"n{n}"), resource="gold-1")
    decided(refund(400, order_id="A-99", note="x"), resource="other", action="decline")

    (suggestion,) = suggestions(Access.of(reviewer))

    assert (suggestion.terms.scope, suggestion.terms.scope_value) == ("resource", "gold-1")
    assert "for end user gold-1" in suggestion.headline


def test_a_tool_that_takes_no_grants_is_never_offered(agents: DashboardAgents, reviewer: User) -> None:
    for _ in range(12):
        decided({"disk": "sda"}, agent_id="worker", tool_name="wipe_disk")

    assert offered(reviewer) == []


def test_a_dismissed_ceiling_is_not_offered_again_when_the_ceiling_moves(
    agents: DashboardAgents, reviewer: User
) -> None:
    for amount in range(1000, 2200, 100):
        decided(refund(amount, order_id=f"A-{amount}", note=f"n{amount}"))
    decided(refund(90_000, order_id="A-9", note="big"), action="decline")
    access = Access.of(reviewer)
    (first,) = suggestions(access)

    dismiss(access, first.terms)
    decided(refund(2150, order_id="A-2150", note="n2150"))

    assert [s.terms.condition for s in suggestions(access)] == []
