"""Deadlines in the app: the sweep expires calls with no page open, and the audit log tells them apart."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from asgiref.sync import async_to_sync

from agents_runtime.deadlines import Deadline
from approvals.expiry import Sweeper
from approvals.models import AuditEntry
from tests.approvals.runtime_fixtures import DashboardAgents


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
    assert (entry.action, entry.outcome, entry.username) == ("expire", "expired", "")
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
