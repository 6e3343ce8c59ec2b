"""Deadlines in the app: the sweep expires calls with no page open, and the audit log tells them apart."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from agents_runtime.store import Deadline
from approvals.models import AuditEntry
from approvals.tasks import Sweeper
from tests.support.inbox_rows import inbox, opened
from tests.support.runtime_fixtures import SLOW_REFUND_SECONDS, DashboardAgents
from tests.support.users import ensure_groups


def wait_for(condition: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_sweep_expires_a_due_call_with_no_page_open_and_records_it_as_expired(
    agents: DashboardAgents,
) -> None:
    helpdesk = agents.agent("helpdesk")
    run = async_to_sync(helpdesk.generate)("refund late", deadline=timedelta(seconds=1))
    sweeper = Sweeper(interval=0.05)
    sweeper.start()
    try:
        wait_for(lambda: AuditEntry.objects.filter(run_id=run.run_id, action="expire").exists())
    finally:
        sweeper.stop()
    assert not sweeper.running

    entry = AuditEntry.objects.get(run_id=run.run_id)
    assert (entry.action, entry.outcome, entry.username, entry.channel) == (
        "expire",
        "expired",
        "",
        "deadline",
    )
    assert entry.reason == "No reviewer answered within 1 second"
    assert "declined" in entry.outcome_detail
    assert agents.executed["refund"].calls == []
    assert agents.suspended("helpdesk") == []
    assert "No reviewer answered within 1 second" in agents.helpdesk_model.tool_results()[entry.tool_call_id]


def test_a_sweep_after_a_restart_expires_what_fell_due_meanwhile(agents: DashboardAgents) -> None:
    helpdesk = agents.agent("helpdesk")
    run = async_to_sync(helpdesk.generate)(
        "refund overnight", deadline=Deadline(timedelta(milliseconds=100), on_expiry="approve")
    )
    time.sleep(0.2)  # nothing swept meanwhile: the server was down

    assert Sweeper().sweep_once() == 1

    entry = AuditEntry.objects.get(run_id=run.run_id)
    assert (entry.action, entry.outcome) == ("expire", "expired")
    assert "approved" in entry.outcome_detail
    assert len(agents.executed["refund"].calls) == 1


def test_a_run_slow_to_go_on_after_its_expiry_does_not_make_the_next_expiry_late(
    agents: DashboardAgents,
) -> None:
    helpdesk = agents.agent("helpdesk")
    # Both approve themselves when nobody answers; the first one's refund then takes its time.
    slow = async_to_sync(helpdesk.generate)(
        "refund slowly", deadline=Deadline(timedelta(milliseconds=300), on_expiry="approve")
    )
    due = async_to_sync(helpdesk.generate)(
        "refund next", deadline=Deadline(timedelta(milliseconds=900), on_expiry="approve")
    )
    [call] = due.tool_calls
    assert call.expires_at is not None
    sweeper = Sweeper(interval=0.05)
    sweeper.start()
    try:
        wait_for(lambda: AuditEntry.objects.filter(run_id=due.run_id, action="expire").exists())
        expired_at = AuditEntry.objects.get(run_id=due.run_id, action="expire").created_at
    finally:
        sweeper.stop()

    # Not after the slow refund (SLOW_REFUND_SECONDS): within a few sweeps of its deadline.
    assert (expired_at - call.expires_at).total_seconds() < SLOW_REFUND_SECONDS / 2
    # Stopping the sweep let both runs go on: both refunds ran, nothing waits.
    assert sorted(c["note"] for c in agents.executed["refund"].calls) == ["next", "slowly"]
    assert agents.suspended("helpdesk") == []
    assert {e.run_id for e in AuditEntry.objects.filter(action="expire")} == {slow.run_id, due.run_id}


def test_escalation_and_extension_are_recorded_and_not_decisions(agents: DashboardAgents) -> None:
    helpdesk = agents.agent("helpdesk")
    deadline = Deadline(
        timedelta(minutes=5), "escalate", escalate_to="leads", escalation_expires_after=timedelta(hours=1)
    )
    run = async_to_sync(helpdesk.generate)("refund big", deadline=deadline)
    [call] = run.tool_calls

    assert async_to_sync(agents.runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6)) == 1
    new = async_to_sync(helpdesk.extend_deadline)(
        run_id=run.run_id,
        tool_call_id=call.tool_call_id,
        by=timedelta(hours=2),
        reason="Lead is away",
        actor="rita",
    )

    escalated, extended = AuditEntry.objects.for_run(run.run_id).chronological()
    assert (escalated.action, escalated.outcome) == ("escalate", "rescheduled")
    assert escalated.outcome_detail.startswith("Escalated to leads; new deadline")
    assert (extended.action, extended.outcome, extended.username, extended.reason) == (
        "extend",
        "rescheduled",
        "rita",
        "Lead is away",
    )
    assert not AuditEntry.objects.for_run(run.run_id).winning().exists()
    [waiting] = agents.suspended("helpdesk")
    assert waiting.tool_calls[0].escalated_to == "leads"
    assert waiting.tool_calls[0].expires_at == new


def _waiting_with_deadline(agents: DashboardAgents, seconds: float) -> tuple[str, str]:
    run = async_to_sync(agents.agent("helpdesk").generate)("refund soon", deadline=timedelta(seconds=seconds))
    return run.run_id, run.tool_calls[0].tool_call_id


def test_the_card_shows_the_deadline_with_the_seconds_left_by_the_servers_clock(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    _waiting_with_deadline(agents, 3600)
    _waiting_with_deadline(agents, 120)

    page = inbox(reviewer_client, reverse("approvals:inbox", args=["helpdesk"]))

    seconds = sorted(int(s) for s in re.findall(r'data-countdown="(\d+)"', page))
    assert len(seconds) == 4  # the chip and the card's line of each call
    assert 100 <= seconds[0] <= 120 and 3500 <= seconds[-1] <= 3600
    assert page.count('class="chip chip-deadline is-due-soon"') == 1
    assert "then it is declined unless someone decides" in page


def test_a_reviewer_extends_a_deadline_with_a_reason(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run_id, call_id = _waiting_with_deadline(agents, 600)
    before = agents.suspended("helpdesk")[0].tool_calls[0].expires_at
    url = reverse("approvals:extend_deadline", args=[run_id, call_id])

    refused = reviewer_client.post(url, {"agent": "helpdesk", "by_minutes": "60", "reason": ""})
    assert "The deadline was not extended" in refused.content.decode()
    assert agents.suspended("helpdesk")[0].tool_calls[0].expires_at == before
    assert not AuditEntry.objects.filter(action="extend").exists()

    done = reviewer_client.post(
        url, {"agent": "helpdesk", "by_minutes": "60", "reason": "Waiting on finance"}
    )

    assert "Deadline extended." in done.content.decode()
    assert agents.suspended("helpdesk")[0].tool_calls[0].expires_at == before + timedelta(hours=1)
    entry = AuditEntry.objects.get(action="extend")
    assert (entry.username, entry.reason, entry.outcome) == ("rita", "Waiting on finance", "rescheduled")


def test_a_viewer_who_may_not_decide_cannot_extend(
    agents: DashboardAgents, viewer: User, client_for: Callable[[User], Client]
) -> None:
    run_id, call_id = _waiting_with_deadline(agents, 600)
    before = agents.suspended("helpdesk")[0].tool_calls[0].expires_at

    response = client_for(viewer).post(
        reverse("approvals:extend_deadline", args=[run_id, call_id]),
        {"agent": "helpdesk", "by_minutes": "60", "reason": "mine"},
    )

    assert response.status_code == 403
    assert agents.suspended("helpdesk")[0].tool_calls[0].expires_at == before


def test_the_inbox_sorts_by_deadline(agents: DashboardAgents, reviewer_client: Client) -> None:
    later, _ = _waiting_with_deadline(agents, 7200)
    sooner, _ = _waiting_with_deadline(agents, 600)

    page = reviewer_client.get(reverse("approvals:inbox", args=["helpdesk"]), {"sort": "deadline"})
    oldest_first = reviewer_client.get(reverse("approvals:inbox", args=["helpdesk"]))

    text = page.content.decode()
    assert text.index(f'data-run-id="{sooner}"') < text.index(f'data-run-id="{later}"')
    assert '<option value="deadline" selected>' in text
    old = oldest_first.content.decode()
    assert old.index(f'data-run-id="{later}"') < old.index(f'data-run-id="{sooner}"')


def _lead(client_for: Callable[[User], Client]) -> Client:
    """A member of "leads" only: may decide (its group holds the permission), sees no agent."""
    ensure_groups()
    leads, _ = Group.objects.get_or_create(name="leads")
    leads.permissions.add(Permission.objects.get(codename="decide_runs"))
    user = User.objects.create_user("leo", password="x")
    user.groups.add(leads)
    return client_for(user)


def test_members_of_the_group_a_call_escalated_to_may_see_and_decide_that_call_only(
    agents: DashboardAgents, client_for: Callable[[User], Client]
) -> None:
    helpdesk = agents.agent("helpdesk")
    deadline = Deadline(timedelta(minutes=5), "escalate", escalate_to="leads")
    escalating = async_to_sync(helpdesk.generate)("refund escalate me", deadline=deadline)
    other = async_to_sync(helpdesk.generate)("refund not escalated", deadline=timedelta(hours=1))
    lead = _lead(client_for)
    inbox = reverse("approvals:inbox", args=["helpdesk"])
    assert lead.get(inbox).status_code == 403  # not escalated yet

    assert async_to_sync(agents.runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6)) == 1

    page = opened(lead, lead.get(inbox).content.decode())
    assert f'data-run-id="{escalating.run_id}"' in page
    assert f'data-run-id="{other.run_id}"' not in page
    assert "Escalated to leads" in page
    other_call = other.tool_calls[0].tool_call_id
    # Nor may they open the body of a call that was not escalated to them.
    body = lead.get(reverse("approvals:call", args=[other.run_id, other_call]), HTTP_HX_REQUEST="true")
    assert "waits no more" in body.content.decode() and "refund not escalated" not in body.content.decode()
    lead.post(reverse("approvals:approve", args=[other.run_id, other_call]), {"agent": "helpdesk"})
    assert agents.executed["refund"].calls == []  # not theirs: nothing decided

    call = escalating.tool_calls[0].tool_call_id
    lead.post(reverse("approvals:approve", args=[escalating.run_id, call]), {"agent": "helpdesk"})

    assert [c["note"] for c in agents.executed["refund"].calls] == ["escalate me"]
    entry = AuditEntry.objects.get(run_id=escalating.run_id, action="approve")
    assert entry.username == "leo"
    assert [r.run_id for r in agents.suspended("helpdesk")] == [other.run_id]


def test_a_background_continuations_result_keeps_a_calls_deadline() -> None:
    import json

    from agents_runtime import AgentRunToolCall, RunResult
    from approvals.tasks import result_from_json, result_to_json

    due = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    call = AgentRunToolCall("c-1", "refund", {"a": 1}, True, expires_at=due, on_expiry="approve")
    result = RunResult(run_id="r-1", status="suspended", tool_calls=[call])

    back = result_from_json(json.loads(json.dumps(result_to_json(result))))

    assert back.tool_calls[0].expires_at == due
    assert back.tool_calls[0].on_expiry == "approve"
