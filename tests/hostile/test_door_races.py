"""Races between the decision doors (card buttons, bulk, APIs, grants, rules, deadlines, the undo
window): each test forces one interleaving deterministically (the second door called from inside a
step of the first) and checks that nothing runs twice, no decision is lost, the record says what
happened and no page answers 500."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.models import User
from django.db import connection, connections, transaction
from django.test import Client
from django.utils import timezone

from agents_runtime import DecisionRequest, Origin
from agents_runtime._loop import decision_rule
from agents_runtime.store import Deadline, DeadlineChange, DecisionAction
from approvals import services
from approvals.models import AuditEntry, HeldDecision
from approvals.policy import Access
from approvals.services import holds
from approvals.services.deadlines import deadline_extend
from tests.approvals.conftest import agents  # noqa: F401 - the dashboard's test runtime
from tests.support.batches import key, prepare, start
from tests.support.runtime_fixtures import DashboardAgents

HX = {"HTTP_HX_REQUEST": "true"}


def call_url(run_id: str, tool_call_id: str, action: str) -> str:
    return f"/runs/{run_id}/calls/{tool_call_id}/{action}"


def later(seconds: float) -> Any:
    return timezone.now() + timedelta(seconds=seconds)


def decide_as(user: User, agent_id: str, request: DecisionRequest) -> services.DecisionOutcome:
    return services.decide(Access.of(user).for_agent(agent_id), request, hold=False)


# -- the undo window: a decision held on a call another door decided between the check and the hold --


def test_a_hold_on_a_call_decided_meanwhile_does_not_break_the_holders_pages(
    agents: DashboardAgents,  # noqa: F811
    reviewer_client: Client,
    admin_member: User,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """rita's approval passes the rules (the call waits) and is about to be held; in that moment ada
    declines the same call through the API. The run still waits on its other call. rita's receipt
    and every page of hers that lists the run must still render (no 500), and the decline stands."""
    settings.DECISION_UNDO_SECONDS = 30
    run = agents.start("helpdesk", "both")
    refund = next(c for c in run.tool_calls if c.tool_name == "refund")
    real_hold_create = holds.hold_create

    def hold_after_ada_declined(*args: Any, **kwargs: Any) -> Any:
        ada = DecisionRequest(
            run.run_id, refund.tool_call_id, DecisionAction.DECLINE, origin=Origin.API, reason="no"
        )
        assert decide_as(admin_member, "helpdesk", ada).took_effect
        return real_hold_create(*args, **kwargs)

    monkeypatch.setattr(holds, "hold_create", hold_after_ada_declined)
    receipt = reviewer_client.post(
        call_url(run.run_id, refund.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX
    ).content.decode()
    monkeypatch.setattr(holds, "hold_create", real_hold_create)

    # The receipt says ada's decline was first, not that rita's approval waits to be taken.
    assert "unless you undo" not in receipt and "Undo" not in receipt
    assert "already decided" in receipt and "ada" in receipt, receipt
    assert not HeldDecision.objects.filter(run_id=run.run_id).exists()
    for page in ("/", f"/runs/{run.run_id}/", "/queue/"):
        assert reviewer_client.get(page).status_code == 200, page
    assert agents.executed["refund"].count == 0


def test_a_deadline_that_escalates_waits_for_the_decision_held_on_its_call(
    agents: DashboardAgents,  # noqa: F811
    reviewer_client: Client,
    settings: Any,
) -> None:
    """The deadline's default waits for a held decision ("the deadline alone does not decide a held
    call": another sweeper may be taking it right now). Escalating is the deadline's default too:
    it must not move a held call to another group (and tell them) under its holder's feet."""
    settings.DECISION_UNDO_SECONDS = 30
    deadline = Deadline(timedelta(seconds=2), "escalate", escalate_to="leads")
    run = async_to_sync(agents.agent("helpdesk").generate)("refund at the wire", deadline=deadline)
    call = run.tool_calls[0]
    reviewer_client.post(call_url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX)
    assert HeldDecision.objects.filter(run_id=run.run_id).exists()

    # A sweeper whose commit of held decisions ran before this one was held (or another process's,
    # which leaves a row being taken to its taker) goes on to the expiries.
    assert async_to_sync(agents.runtime.expire_due)(later(3)) == 0

    assert not AuditEntry.objects.filter(run_id=run.run_id, action="escalate").exists()
    [waiting] = agents.suspended("helpdesk")
    assert waiting.tool_calls[0].escalated_to is None
    assert async_to_sync(services.commit_held)(later(3)) == 1
    assert agents.executed["refund"].count == 1
    assert list(AuditEntry.objects.filter(run_id=run.run_id).values_list("action", "outcome")) == [
        ("approve", "completed")
    ]


# -- bulk: a reviewer whose rights are taken away while their batch runs --------------------------


def test_a_batch_stops_deciding_once_its_reviewer_may_no_longer_decide(
    agents: DashboardAgents,  # noqa: F811
    reviewer: User,
    reviewer_client: Client,
) -> None:
    """A batch decides call by call in the background ("the door checks the user's right to each
    call when the batch runs"). rita is taken out of Reviewers right after the batch's first call is
    decided: the calls after it are not hers to decide any more, as a held decision of hers would
    not be taken (``commit_held`` checks the holder's rights as they are then)."""
    runs = [agents.start("helpdesk", f"refund parcel {n}") for n in range(3)]
    batch = prepare(reviewer_client, [key(r) for r in runs])

    async def revoke_after_first(event: Any) -> None:
        if event.type == "call-decided":
            await sync_to_async(reviewer.groups.clear)()

    agents.runtime.add_listener(revoke_after_first, types={"call-decided"})
    start(reviewer_client, batch, "approve")
    agents.runtime.remove_listener(revoke_after_first)

    assert agents.executed["refund"].count == 1
    assert len(agents.suspended("helpdesk")) == 2
    assert sorted(batch.items.values_list("state", flat=True)) == ["decided", "skipped", "skipped"]


# -- PostgreSQL: a deadline moved in the very moment another door decides the call --------------------


@pytest.mark.postgres
def test_a_deadline_extended_while_the_call_is_being_decided_is_refused_not_recorded(
    agents: DashboardAgents,  # noqa: F811
    reviewer: User,
    admin_member: User,
) -> None:
    """ada's approval of the refund is in its statement (the run row locked, not yet committed) when
    rita extends the refund's deadline: her step waits on the run row, then reads it again. The
    call was decided by then: the extension must be refused ("not waiting any more"), with no
    "rescheduled" row for a decided call. (The run still waits on its other call, so the run row
    is still "suspended": only the call rows say the refund is decided.)"""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's row locks and its re-read of a locked row")
    deadline = Deadline(timedelta(minutes=5))
    run = async_to_sync(agents.agent("helpdesk").generate)("both", deadline=deadline)
    refund = next(c for c in run.tool_calls if c.tool_name == "refund")
    rita = Access.of(reviewer).for_agent("helpdesk")
    extension: list[Any] = []

    def extend() -> None:
        try:
            extension.append(
                deadline_extend(
                    rita,
                    run_id=run.run_id,
                    tool_call_id=refund.tool_call_id,
                    by=timedelta(hours=1),
                    reason="Lead is away",
                )
            )
        finally:
            connections.close_all()

    helpdesk = agents.agent("helpdesk")
    approval = DecisionRequest(run.run_id, refund.tool_call_id, DecisionAction.APPROVE, actor="ada")
    with transaction.atomic():
        # The run store's own decision step (the one every door ends in), its commit held back.
        receipt = agents.runtime.storage.decide(
            agent_id="helpdesk", run_id=run.run_id, rule=decision_rule(helpdesk._context(), approval)
        )
        assert receipt.call.decision is not None and receipt.claimed_version is None
        extending = threading.Thread(target=extend)
        extending.start()
        _wait_for_a_lock_wait()
    extending.join(30)

    [outcome] = extension
    assert outcome.expires_at is None, outcome.message
    assert not AuditEntry.objects.filter(run_id=run.run_id, action="extend").exists()


def _wait_for_a_lock_wait(seconds: float = 10) -> None:
    """Until another session of this database waits on a row lock (the step forced to wait)."""
    ends = time.monotonic() + seconds
    with connection.cursor() as cursor:
        while time.monotonic() < ends:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.02)
    raise AssertionError("no session waited on the run row's lock")


@pytest.mark.postgres
def test_two_sweepers_escalate_a_due_call_once(agents: DashboardAgents) -> None:  # noqa: F811
    """Several sweepers at once are harmless, the sweep says: "a call expires once whoever sweeps".
    One sweeper's escalation is in its step (the run row locked, not yet committed) when a second
    sweeper finds the same call due and escalates it: once committed, the second must see the call
    escalated already (``NotDue``), not escalate it a second time (a second "rescheduled" row, a
    second "call-escalated" event to the leads)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's row locks and its re-read of a locked row")
    deadline = Deadline(timedelta(seconds=2), "escalate", escalate_to="leads")
    run = async_to_sync(agents.agent("helpdesk").generate)("both", deadline=deadline)
    refund = next(c for c in run.tool_calls if c.tool_name == "refund")
    due = later(3)
    second: list[int] = []

    def sweep() -> None:
        try:
            second.append(async_to_sync(agents.runtime.expire_due)(due))
        finally:
            connections.close_all()

    def escalate(stored: Any) -> DeadlineChange:
        return DeadlineChange(
            tool_call_id=refund.tool_call_id,
            action=DecisionAction.ESCALATE,
            expires_at=None,
            changed_at=timezone.now(),
            escalated_to="leads",
            reason="No reviewer answered in time; escalated to leads",
        )

    with transaction.atomic():
        # The first sweeper's step (the run store's own), its commit held back.
        agents.runtime.storage.change_deadline(agent_id="helpdesk", run_id=run.run_id, rule=escalate)
        sweeping = threading.Thread(target=sweep)
        sweeping.start()
        _wait_for_a_lock_wait()
    sweeping.join(30)

    escalations = AuditEntry.objects.filter(run_id=run.run_id, tool_call_id=refund.tool_call_id)
    assert list(escalations.values_list("action", flat=True)) == ["escalate"]
