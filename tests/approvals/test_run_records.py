"""The permanent record of an ended run: what the store keeps, the record page, and pruning."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from approvals.models import AuditEntry, EndedRun, RunRecord, ThreadMessage
from tests.approvals.runtime_fixtures import XSS, DashboardAgents


def approve_first_call(agents: DashboardAgents, run_id: str, *, actor: str = "rita", **kwargs: object) -> None:
    run = async_to_sync(agents.agent("helpdesk").get_suspended_run)(run_id)
    stream = async_to_sync(agents.agent("helpdesk").approve_tool_call)(
        run_id=run_id, tool_call_id=run.tool_calls[0].tool_call_id, actor=actor, **kwargs
    )
    async_to_sync(stream.result)()


def test_an_ended_run_keeps_its_transcript_and_not_its_snapshot(agents: DashboardAgents) -> None:
    started = agents.start("helpdesk", "refund wrong size", thread="t-1", resource="cust-9")

    approve_first_call(agents, started.run_id)

    assert not RunRecord.objects.filter(run_id=started.run_id).exists()  # the snapshot went with it
    record = EndedRun.objects.get(run_id=started.run_id)
    assert (record.agent_id, record.thread_id, record.resource_id) == ("helpdesk", "t-1", "cust-9")
    assert record.status == "completed" and "refunded 500 on A-1" in record.detail
    kinds = [(m["role"], m["kind"], m["tool_name"]) for m in record.transcript]
    assert kinds == [
        ("user", "text", None),
        ("assistant", "tool-call", "refund"),
        ("tool", "tool-result", "refund"),
        ("assistant", "text", None),
    ]
    call, result = record.transcript[1], record.transcript[2]
    assert call["args"] == {"order_id": "A-1", "amount_cents": 500, "note": "wrong size"}
    assert result["result"] == "refunded 500 on A-1" and result["tool_call_id"] == call["tool_call_id"]
    # The plain form only: none of pydantic-ai's usage, model or provider details.
    stored = json.dumps(record.transcript)
    for detail in ("usage", "model_name", "provider", "parts"):
        assert detail not in stored
    # The thread's memory is still pydantic-ai's own messages (the next run of the thread needs them).
    assert ThreadMessage.objects.filter(thread_id="t-1").count() == 1


def test_a_run_without_a_thread_keeps_a_record_too(agents: DashboardAgents) -> None:
    started = agents.start("helpdesk", "refund no thread")

    approve_first_call(agents, started.run_id)

    record = EndedRun.objects.get(run_id=started.run_id)
    assert record.thread_id is None and len(record.transcript) == 4
