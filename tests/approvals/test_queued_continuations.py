"""Decided runs in the task queue (issue 32): they wait there without a lease, however long, and the
sweep queues again only a continuation its queue lost. The multi-process side (a worker falling
behind, a worker killed) is ``tests/live/test_queues_and_faults.py``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.tasks import TaskResultStatus
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from agents_runtime.store import Decision
from approvals.models import AuditEntry, ParkedCallRecord, RunRecord
from approvals.tasks import Sweeper
from tests.support.runtime_fixtures import DashboardAgents

DATABASE_TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}


def _decided_long_ago(run_id: str) -> None:
    """As if its last decision was an hour ago (longer than any lease)."""
    an_hour_ago = timezone.now() - timedelta(hours=1)
    ParkedCallRecord.objects.filter(run__run_id=run_id).update(decided_at=an_hour_ago)


def test_a_continuation_lost_from_its_queue_is_queued_again_and_carried_out(agents: DashboardAgents) -> None:
    helpdesk = agents.agent("helpdesk")
    run = async_to_sync(helpdesk.generate)("refund lost")
    [call] = run.tool_calls
    # The deciding process records rita's approval (claiming the run) and dies before its
    # continuation starts: no queue holds it any more.
    agents.runtime.storage.record_decision(
        agent_id="helpdesk",
        run_id=run.run_id,
        tool_call_id=call.tool_call_id,
        decision=Decision(action="approve", decided_at=timezone.now(), actor="rita"),
    )
    sweeper = Sweeper()
    assert sweeper.requeue_unstarted() == 0  # decided just now: it may still be on its way
    _decided_long_ago(run.run_id)

    queued = sweeper.requeue_unstarted()
    sweeper.continuations.stop(timeout=30)

    assert queued == 1
    assert len(agents.executed["refund"].calls) == 1
    assert not RunRecord.objects.filter(run_id=run.run_id).exists()
    assert list(AuditEntry.objects.filter(run_id=run.run_id).values_list("username", "outcome")) == [
        ("rita", "completed")
    ]
    assert sweeper.requeue_unstarted() == 0


def test_a_decided_run_waiting_in_the_worker_queue_keeps_its_place_and_its_approval(
    agents: DashboardAgents, settings: Any
) -> None:
    settings.TASKS = DATABASE_TASKS
    helpdesk = agents.agent("helpdesk")
    run = async_to_sync(helpdesk.generate)("refund queued")
    [call] = run.tool_calls
    stream = async_to_sync(helpdesk.approve_tool_call)(
        run_id=run.run_id, tool_call_id=call.tool_call_id, actor="rita"
    )
    assert async_to_sync(stream.result)().status == "running"
    _decided_long_ago(run.run_id)  # no worker has come for an hour
    sweeper = Sweeper()

    left_waiting = sweeper.requeue_unstarted()
    listed = async_to_sync(helpdesk.list_suspended_runs)()
    # A worker took it and died before starting it: the queue no longer holds it.
    DBTaskResult.objects.update(status=TaskResultStatus.RUNNING)
    queued_again = sweeper.requeue_unstarted()

    assert (left_waiting, listed.total, queued_again) == (0, 0, 1)
    assert RunRecord.objects.get(run_id=run.run_id).status == "running"
    assert DBTaskResult.objects.filter(status=TaskResultStatus.READY).count() == 1
    assert agents.executed["refund"].calls == []
    assert list(AuditEntry.objects.filter(run_id=run.run_id).values_list("outcome", flat=True)) == [
        "continuing"
    ]
