"""A call whose tool started in a continuation that died: offered again, marked, and run again only
on purpose (hardening issue §5). The process death is simulated at the store: the run is claimed,
the tool's start is recorded, and the claim's lease runs out without the run ending."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import DataError
from django.test import Client
from django.utils import timezone

from agents_runtime import Agent, Call, Reply, RerunNotConfirmed, RunAlreadyDecided, Runtime, tool
from agents_runtime.store import Decision
from approvals.models import AuditEntry, RunRecord
from approvals.store import DjangoRunStore
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.runtime_helpers import ModelSpy

HX = {"HTTP_HX_REQUEST": "true"}


def _approved_and_claimed(run_id: str, tool_call_id: str) -> tuple[DjangoRunStore, int]:
    """rita's approval, recorded the way a deciding process records it (the run is claimed), and
    its continuation started (the claim's lease taken)."""
    store = DjangoRunStore()
    decision = Decision(action="approve", decided_at=timezone.now(), actor="rita")
    receipt = store.record_decision(
        agent_id="helpdesk", run_id=run_id, tool_call_id=tool_call_id, decision=decision
    )
    assert receipt.claimed_version is not None
    assert store.start_continuation(run_id, version=receipt.claimed_version)
    return store, receipt.claimed_version


def _lease_runs_out(run_id: str) -> None:
    RunRecord.objects.filter(run_id=run_id).update(lease_expires_at=timezone.now() - timedelta(minutes=1))


def _die_after_approval(run_id: str, tool_call_id: str, *, tool_started: bool) -> None:
    """A process approves, claims the run, maybe starts the tool, and dies (its lease runs out)."""
    store, version = _approved_and_claimed(run_id, tool_call_id)
    if tool_started:
        assert store.mark_tool_started(run_id, tool_call_id, version=version)
    _lease_runs_out(run_id)


def _refund_run(agents: DashboardAgents, *, tool_started: bool) -> tuple[str, str]:
    run = agents.start("helpdesk", "refund parcel")
    call_id = run.tool_calls[0].tool_call_id
    _die_after_approval(run.run_id, call_id, tool_started=tool_started)
    return run.run_id, call_id


def test_the_call_comes_back_marked_in_the_runtime_and_the_audit_log(agents: DashboardAgents) -> None:
    run_id, _ = _refund_run(agents, tool_started=True)

    (run,) = agents.suspended("helpdesk")
    (call,) = run.tool_calls
    entry = AuditEntry.objects.get(run_id=run_id)

    assert run.run_id == run_id and run.interrupted
    assert call.interrupted_after_start and call.tool_started_at is not None
    assert (entry.outcome, entry.username) == ("interrupted", "rita")
    assert entry.outcome_detail.startswith("Interrupted after the tool started — it may have run.")


def test_a_call_interrupted_before_its_tool_started_is_a_plain_pending_call(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run_id, call_id = _refund_run(agents, tool_started=False)

    (run,) = agents.suspended("helpdesk")
    page = reviewer_client.get(f"/runs/{run_id}/").content.decode()
    approved = reviewer_client.post(f"/runs/{run_id}/calls/{call_id}/approve", {"agent": "helpdesk"}, **HX)

    assert not run.tool_calls[0].interrupted_after_start
    assert "it may have run" not in page and 'name="confirm_rerun"' not in page
    assert AuditEntry.objects.get(run_id=run_id, outcome="interrupted").outcome_detail.startswith(
        "The run's continuation stopped"
    )
    assert "Completed" in approved.content.decode()
    assert agents.executed["refund"].count == 1


def test_the_card_warns_and_a_plain_approve_decides_nothing(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run_id, call_id = _refund_run(agents, tool_started=True)

    page = reviewer_client.get(f"/runs/{run_id}/").content.decode()
    refused = reviewer_client.post(f"/runs/{run_id}/calls/{call_id}/approve", {"agent": "helpdesk"}, **HX)

    assert "Interrupted after the tool started — it may have run." in page
    # Approve, and Approve with these arguments (the parameters' form and the JSON one).
    assert page.count('name="confirm_rerun"') == 3
    body = refused.content.decode()
    assert refused.status_code == 200
    assert "Nothing was decided" in body and 'name="confirm_rerun"' in body
    assert agents.executed["refund"].count == 0
    assert list(AuditEntry.objects.filter(run_id=run_id).values_list("outcome", flat=True)) == ["interrupted"]
    assert agents.suspended("helpdesk")[0].tool_calls[0].tool_call_id == call_id


def test_a_confirmed_rerun_runs_the_tool_with_the_same_call_id(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run_id, call_id = _refund_run(agents, tool_started=True)

    done = reviewer_client.post(
        f"/runs/{run_id}/calls/{call_id}/approve", {"agent": "helpdesk", "confirm_rerun": "yes"}, **HX
    )

    assert "Completed" in done.content.decode()
    assert agents.executed["refund"].count == 1
    outcomes = list(AuditEntry.objects.filter(run_id=run_id).order_by("id").values_list("outcome", flat=True))
    assert outcomes == ["interrupted", "completed"]


def test_the_runtime_refuses_an_unconfirmed_rerun_whoever_decides(agents: DashboardAgents) -> None:
    run_id, call_id = _refund_run(agents, tool_started=True)
    agent = agents.agent("helpdesk")

    with pytest.raises(RerunNotConfirmed):
        async_to_sync(agent.approve_tool_call)(run_id=run_id, tool_call_id=call_id, actor="bot")

    @async_to_sync
    async def decline() -> Any:
        # Declining never runs the tool: no confirmation needed.
        stream = await agent.decline_tool_call(run_id=run_id, tool_call_id=call_id, actor="bot", reason="no")
        return await stream.result()

    assert decline().status == "success"
    assert agents.executed["refund"].count == 0


def test_a_racing_decision_while_the_tool_runs_loses_the_race(agents: DashboardAgents) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call_id = run.tool_calls[0].tool_call_id
    store, version = _approved_and_claimed(run.run_id, call_id)
    # The winner's continuation is running the tool right now (its lease is current).
    assert store.mark_tool_started(run.run_id, call_id, version=version)

    with pytest.raises(RunAlreadyDecided) as lost:
        async_to_sync(agents.agent("helpdesk").approve_tool_call)(
            run_id=run.run_id, tool_call_id=call_id, actor="bob"
        )

    assert lost.value.decided_by == "rita"


def test_a_continuation_whose_claim_is_gone_does_not_start_the_tool(agents: DashboardAgents) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call_id = run.tool_calls[0].tool_call_id
    store, version = _approved_and_claimed(run.run_id, call_id)
    _lease_runs_out(run.run_id)

    assert store.mark_tool_started(run.run_id, call_id, version=version) is False


class _FinishBreaks(DjangoRunStore):
    """A store that cannot write how a run completed (e.g. the database refuses the final answer)."""

    def finish(self, run_id: str, *, version: int, thread_messages: Any = (), ending: Any = None) -> bool:
        if ending is not None and ending.status == "completed":
            raise DataError("invalid byte sequence for encoding UTF8: 0x00")
        return super().finish(run_id, version=version, thread_messages=thread_messages, ending=ending)


def test_a_continuation_that_cannot_store_its_end_ends_the_run_as_failed(transactional_db: None) -> None:
    done: list[str] = []

    @tool(requires_approval=True)
    def pay(amount: int) -> str:
        """Pay out money."""
        done.append("paid")
        return "paid"

    agent = Agent("payments", model=ModelSpy(Call("pay", {"amount": 5}), Reply("done")).model, tools=[pay])
    Runtime(agents=[agent], storage=_FinishBreaks())
    run = async_to_sync(agent.generate)("pay")

    @async_to_sync
    async def approve() -> Any:
        stream = await agent.approve_tool_call(
            run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id, actor="alice"
        )
        return await stream.result()

    result = approve()

    assert result.status == "failed" and "DataError" in (result.error or "")
    # Never left "running" to be offered again after its lease: the run ended, its record says why.
    assert not RunRecord.objects.filter(run_id=run.run_id).exists()
    entry = AuditEntry.objects.get(run_id=run.run_id)
    assert entry.outcome == "failed" and "0x00" in entry.outcome_detail
    assert done == ["paid"]
