"""Trying a grant's terms against the decided history: "would have matched N of the last M calls,
K declined, E edited", from the audit rows of one agent's tool, with the bounded CEL evaluator."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agents_runtime.grants import GrantScope, InvalidGrant
from approvals.services import history
from approvals.services.history import Terms, trial
from tests.support.history import decided, refund
from tests.support.runtime_fixtures import DashboardAgents


def test_a_trial_counts_the_calls_its_condition_and_scope_pick_among_the_decided_ones(
    agents: DashboardAgents,
) -> None:
    small = [decided(refund(500), resource="dana") for _ in range(3)]
    edited = decided(refund(700), edited=refund(600), resource="dana")
    declined = decided(refund(900), action="decline", resource="lee")
    decided(refund(50_000), action="decline", resource="dana")
    decided(refund(800), agent_id="worker")  # another agent's
    decided(refund(300), ago=timedelta(days=8))  # before the window
    decided(refund(300), outcome="lost_race")  # changed nothing

    tried = trial(Terms("helpdesk", "refund", condition="amount_cents <= 1000"))

    assert (tried.considered, tried.matched, tried.declined, tried.edited) == (6, 5, 1, 1)
    assert tried.approved_by_person == 4
    assert tried.sentence == "Would have matched 5 of the last 6 decided calls: 1 declined, 1 edited."
    assert tried.declined_examples == [(declined.run_id, declined.tool_call_id)]
    assert tried.edited_examples == [(edited.run_id, edited.tool_call_id)]
    assert (small[0].run_id, small[0].tool_call_id) in tried.examples

    for_dana = trial(Terms("helpdesk", "refund", GrantScope.RESOURCE, "dana", "amount_cents <= 1000"))
    assert (for_dana.matched, for_dana.declined, for_dana.edited) == (4, 0, 1)


def test_a_trial_reads_at_most_the_newest_calls_it_is_given(agents: DashboardAgents) -> None:
    decided(refund(500), action="decline", ago=timedelta(hours=3))
    for _ in range(4):
        decided(refund(500))

    tried = trial(Terms("helpdesk", "refund"), limit=4)

    assert (tried.considered, tried.matched, tried.declined) == (4, 4, 0)
    assert history.MAX_CALLS == 1_000


def test_a_condition_that_is_not_cel_is_refused_and_nothing_is_read(agents: DashboardAgents) -> None:
    decided(refund(500))

    with pytest.raises(InvalidGrant):
        trial(Terms("helpdesk", "refund", condition="amount_cents <="))
