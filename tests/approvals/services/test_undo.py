"""The undo window (``DECISION_UNDO_SECONDS``): a browser's decision is held, not taken, until its
window ends; Undo in the window decides nothing; the sweep takes it after, in any process, through
the one door; the held call is taken meanwhile (others lose the race, the deadline waits for it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agents_runtime.store import Deadline
from approvals import services
from approvals.models import AuditEntry, HeldDecision
from approvals.tasks import Sweeper
from tests.support.runtime_fixtures import DashboardAgents

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _undo_window(settings: Any) -> None:
    settings.DECISION_UNDO_SECONDS = 1


def call_url(run_id: str, tool_call_id: str, action: str) -> str:
    return f"/runs/{run_id}/calls/{tool_call_id}/{action}"


def later(seconds: float = 2) -> Any:
    """A moment past the (1 s) window: the clock the commit is asked about, not the wall's."""
    return timezone.now() + timedelta(seconds=seconds)


def commit_due(now: Any = None) -> int:
    return async_to_sync(services.commit_held)(now or later())


def test_an_approval_is_held_then_taken_once_when_its_window_ends(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund held")
    call = run.tool_calls[0]

    held = reviewer_client.post(
        call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX
    )

    page = held.content.decode()
    assert "Approved" in page and ">Undo</button>" in page and 'data-undo-seconds="1"' in page
    assert agents.executed["refund"].count == 0  # held: nothing ran
    assert len(agents.suspended("helpdesk")) == 1
    assert not AuditEntry.objects.filter(run_id=run.run_id).exists()  # nothing decided yet
    assert commit_due(timezone.now()) == 0  # its window has not ended

    assert commit_due() == 1

    assert agents.executed["refund"].count == 1
    assert agents.suspended("helpdesk") == []
    entry = AuditEntry.objects.get(run_id=run.run_id)
    assert (entry.action, entry.outcome, entry.username, entry.channel) == (
        "approve",
        "completed",
        "rita",
        "dashboard",
    )
    assert not HeldDecision.objects.exists()
    assert commit_due(later(10)) == 0  # taken once
    assert agents.executed["refund"].count == 1


def test_undo_within_the_window_decides_nothing_and_is_recorded_as_undone(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund undone")
    call = run.tool_calls[0]
    reviewer_client.post(
        call_url(run.run_id, call.tool_call_id, "decline"), {"agent": "helpdesk", "reason": "no"}, **HX
    )

    undone = reviewer_client.post(
        call_url(run.run_id, call.tool_call_id, "undo"), {"agent": "helpdesk"}, **HX
    )

    page = undone.content.decode()
    assert f'id="run-{run.run_id}"' in page and 'aria-label="Approve' in page  # the card is back
    assert commit_due(later(10)) == 0
    assert agents.executed["refund"].count == 0
    assert len(agents.suspended("helpdesk")) == 1
    (entry,) = AuditEntry.objects.filter(run_id=run.run_id)
    assert (entry.action, entry.outcome, entry.username, entry.reason) == ("decline", "undone", "rita", "no")
    assert "nothing was decided, nothing ran" in entry.outcome_detail
    # The call can be decided again (and held again).
    again = reviewer_client.post(
        call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX
    )
    assert ">Undo</button>" in again.content.decode()


def test_undo_after_the_decision_was_taken_is_refused_with_what_stands(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund too late")
    call = run.tool_calls[0]
    reviewer_client.post(call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX)
    commit_due()

    late = reviewer_client.post(call_url(run.run_id, call.tool_call_id, "undo"), {"agent": "helpdesk"}, **HX)

    page = late.content.decode()
    assert "Too late to undo: your decision was taken" in page and "It stands." in page
    assert "Completed" in page
    assert agents.executed["refund"].count == 1
    assert not AuditEntry.objects.filter(run_id=run.run_id, outcome="undone").exists()
    # Without JavaScript: back with the same message.
    plain = reviewer_client.post(
        call_url(run.run_id, call.tool_call_id, "undo"), {"agent": "helpdesk", "next": "/queue/"}
    )
    assert plain.status_code == 302


def test_a_held_call_is_taken_another_reviewers_decision_loses_the_race(
    agents: DashboardAgents, reviewer_client: Client, admin_member: User, client_for: Callable[..., Client]
) -> None:
    run = agents.start("helpdesk", "refund raced")
    call = run.tool_calls[0]
    reviewer_client.post(call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX)
    admin = client_for(admin_member)

    shown = admin.get(f"/runs/{run.run_id}/").content.decode()
    lost = admin.post(
        call_url(run.run_id, call.tool_call_id, "decline"), {"agent": "helpdesk", "reason": "mine"}, **HX
    )

    assert "<strong>rita</strong> is deciding this call (undo window)" in shown
    assert 'aria-label="Approve' not in shown
    assert "rita decided this call a moment ago and may still undo it" in lost.content.decode()
    assert AuditEntry.objects.get(run_id=run.run_id, username="ada").outcome == "lost_race"
    commit_due()
    assert agents.executed["refund"].count == 1  # rita's approval, once
    winner = AuditEntry.objects.get(run_id=run.run_id, username="rita")
    assert (winner.action, winner.outcome) == ("approve", "completed")


def test_a_deadline_passing_during_the_window_is_met_by_the_held_decision(
    agents: DashboardAgents, reviewer_client: Client, settings: Any
) -> None:
    settings.DECISION_UNDO_SECONDS = 30
    helpdesk = agents.agent("helpdesk")
    run = async_to_sync(helpdesk.generate)(
        "refund at the wire", deadline=Deadline(timedelta(seconds=2), on_expiry="decline")
    )
    call = run.tool_calls[0]
    reviewer_client.post(call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX)
    due = later(3)

    # The deadline alone does not decide a held call (another sweeper may not have taken it yet).
    assert async_to_sync(agents.runtime.expire_due)(due) == 0
    assert len(agents.suspended("helpdesk")) == 1
    # Its window ends at the deadline: the sweep takes it there, before expiring anything.
    assert commit_due(due) == 1

    assert agents.executed["refund"].count == 1
    assert list(AuditEntry.objects.filter(run_id=run.run_id).values_list("action", "outcome")) == [
        ("approve", "completed")
    ]


def test_a_held_decision_survives_a_restart_a_fresh_sweep_takes_it(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund across a restart")
    call = run.tool_calls[0]
    reviewer_client.post(call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX)
    # The process that held it is gone; its window ended while nothing ran.
    HeldDecision.objects.update(commit_at=timezone.now() - timedelta(seconds=5))

    Sweeper().sweep_once()  # a fresh process's first sweep

    assert agents.executed["refund"].count == 1
    assert AuditEntry.objects.get(run_id=run.run_id).outcome == "completed"
    assert not HeldDecision.objects.exists()


def test_the_api_and_a_zero_window_decide_at_once(
    agents: DashboardAgents, reviewer_client: Client, settings: Any
) -> None:
    settings.DECISION_UNDO_SECONDS = 0
    run = agents.start("helpdesk", "refund at once")
    call = run.tool_calls[0]

    done = reviewer_client.post(
        call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX
    )

    assert "Completed" in done.content.decode() and ">Undo</button>" not in done.content.decode()
    assert agents.executed["refund"].count == 1


def test_a_window_with_the_sweep_off_is_warned_of(settings: Any) -> None:
    from approvals.checks import check_undo_window

    settings.EXPIRY_SWEEP = "off"
    assert [m.id for m in check_undo_window()] == ["countersign.W001"]
    settings.DECISION_UNDO_SECONDS = 0
    assert check_undo_window() == []
    settings.DECISION_UNDO_SECONDS, settings.EXPIRY_SWEEP = 5, "server"
    assert check_undo_window() == []


def test_a_held_decision_taken_at_the_end_of_its_window_records_when_its_card_was_shown(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    """As a decision taken at once does (the card's signed ``shown`` stamp)."""
    run = agents.start("helpdesk", "refund shown")
    call = run.tool_calls[0]
    page = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    fields = dict(re.findall(r'name="(seen|shown)" value="([^"]+)"', page))
    before = timezone.now().replace(microsecond=0)

    reviewer_client.post(
        call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk", **fields}, **HX
    )
    assert commit_due() == 1

    entry = AuditEntry.objects.get(run_id=run.run_id, action="approve")
    assert entry.outcome == "completed"
    assert entry.shown_at is not None and before <= entry.shown_at <= timezone.now()


def test_an_undo_posted_for_another_agent_undoes_nothing_and_says_so(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    """The held decision is the helpdesk's: posted for boss, it stays held (and is taken when its
    window ends), rather than being undone on a record that names no call."""
    run = agents.start("helpdesk", "refund other agent")
    call = run.tool_calls[0]
    reviewer_client.post(call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX)

    answer = reviewer_client.post(call_url(run.run_id, call.tool_call_id, "undo"), {"agent": "boss"}, **HX)

    assert "Nothing was undone" in answer.content.decode()
    assert HeldDecision.objects.count() == 1
    assert not AuditEntry.objects.filter(run_id=run.run_id, outcome="undone").exists()
    assert commit_due() == 1 and agents.executed["refund"].count == 1
