"""The permanent record of an ended run: what the store keeps, the record page, and pruning."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from io import StringIO

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from agents_runtime import Agent, Call, Reply, Runtime, tool
from agents_runtime.store import Deadline
from approvals.models import AuditEntry, EndedRun, RunRecord, ThreadMessage
from approvals.store import DjangoRunStore
from approvals.tasks import Sweeper
from tests.support.runtime_fixtures import XSS, DashboardAgents
from tests.support.runtime_helpers import ModelSpy


def approve_first_call(
    agents: DashboardAgents, run_id: str, *, actor: str = "rita", **kwargs: object
) -> None:
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


def test_the_record_page_shows_the_transcript_with_each_decision_inline(
    agents: DashboardAgents, reviewer: User, reviewer_client: Client
) -> None:
    started = agents.start("helpdesk", f"refund {XSS}", thread="t-rec", resource="cust-rec")
    approve_first_call(
        agents, started.run_id, edited_args={"order_id": "A-1", "amount_cents": 400, "note": "x"}
    )

    html = reviewer_client.get(f"/runs/{started.run_id}/").content.decode()

    assert 'class="card run-record"' in html and f'id="run-{started.run_id}"' in html
    # The breadcrumb leads back to the agent's inbox; where the run belonged is shown.
    assert '<a href="/agents/helpdesk/">Help desk</a>' in html
    assert "<code>t-rec</code>" in html and "<code>cust-rec</code>" in html
    # The whole transcript: the prompt, the call with its arguments, its result, the final answer.
    transcript = html[html.index('<ol class="conversation transcript">') :]
    prompt_at = transcript.index("refund &lt;script&gt;")
    call_at = transcript.index("<code>refund</code>")
    decision_at = transcript.index('<li class="decision outcome-completed">')
    result_at = transcript.index("refunded 400 on A-1")
    assert prompt_at < call_at < decision_at < result_at
    decision = transcript[decision_at : transcript.index("</li>", decision_at)]
    assert "<strong>rita</strong> approved" in decision and "with edited arguments" in decision
    assert "&quot;amount_cents&quot;: 400" in decision
    assert "<script>" not in html  # model output is escaped


def test_the_record_of_a_declined_run_shows_the_reason_where_it_was_given(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    started = agents.start("helpdesk", "refund nope")
    call_id = started.tool_calls[0].tool_call_id

    reviewer_client.post(f"/runs/{started.run_id}/calls/{call_id}/decline", {"reason": "Not our order"})
    html = reviewer_client.get(f"/runs/{started.run_id}/").content.decode()

    assert "<strong>rita</strong> declined" in html
    assert '<span class="json-label">Reason</span> Not our order' in html
    assert "Not our order" in html[html.index('<li class="msg msg-tool msg-tool-result">') :]


def _record_heading(html: str) -> str:
    heading = html[html.index('<h2 id="run-record-title">') :]
    return heading[: heading.index("</h2>")]


def test_an_ended_run_is_headed_by_what_happened_to_its_call(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    # The model ends each of these runs normally ("completed" for the runtime); the reader's heading
    # says what the call came to.
    approved = agents.start("helpdesk", "refund yes")
    approve_first_call(agents, approved.run_id)
    declined = agents.start("helpdesk", "refund no")
    reviewer_client.post(
        f"/runs/{declined.run_id}/calls/{declined.tool_calls[0].tool_call_id}/decline", {"reason": "No"}
    )
    helpdesk = agents.agent("helpdesk")
    lapsed = async_to_sync(helpdesk.generate)("refund late", deadline=timedelta(milliseconds=50))
    lapsed_yes = async_to_sync(helpdesk.generate)(
        "refund late too", deadline=Deadline(timedelta(milliseconds=50), on_expiry="approve")
    )
    time.sleep(0.1)
    assert Sweeper().sweep_once() == 2

    def page(run_id: str) -> str:
        return reviewer_client.get(f"/runs/{run_id}/").content.decode()

    assert '<span class="badge outcome-completed">Completed</span>' in _record_heading(page(approved.run_id))
    assert '<span class="badge outcome-declined">Declined</span>' in _record_heading(page(declined.run_id))
    lapsed_page = page(lapsed.run_id)
    assert "Deadline passed: declined" in _record_heading(lapsed_page)
    assert "Completed" not in _record_heading(lapsed_page)
    # The transcript says what the deadline did, not who "let it expire".
    assert "<strong>Deadline passed: declined</strong> on <code>refund</code>" in lapsed_page
    assert "let expire" not in lapsed_page and "Someone" not in lapsed_page
    assert "Deadline passed: approved" in _record_heading(page(lapsed_yes.run_id))


def test_only_users_who_may_see_the_agent_see_its_record(
    agents: DashboardAgents, nobody: User, viewer: User, client_for: object
) -> None:
    started = agents.start("boss", "wipe")
    run = async_to_sync(agents.agent("boss").get_suspended_run)(started.run_id)
    stream = async_to_sync(agents.agent("boss").approve_tool_call)(
        run_id=started.run_id, tool_call_id=run.tool_calls[0].tool_call_id, actor="rita"
    )
    async_to_sync(stream.result)()
    assert EndedRun.objects.filter(run_id=started.run_id).exists()

    for user in (nobody, viewer):  # viewer sees helpdesk only
        response = client_for(user).get(f"/runs/{started.run_id}/")  # type: ignore[operator]
        assert response.status_code == 404


def test_a_pruned_record_says_so_and_keeps_the_decisions_from_the_audit_log(
    agents: DashboardAgents, reviewer_client: Client, settings: object
) -> None:
    settings.RUN_RECORD_RETENTION_DAYS = 30  # type: ignore[attr-defined]
    started = agents.start("helpdesk", "refund old")
    approve_first_call(agents, started.run_id)
    EndedRun.objects.filter(run_id=started.run_id).update(ended_at=timezone.now() - timedelta(days=31))

    out = StringIO()
    call_command("prune_run_records", stdout=out)
    html = reviewer_client.get(f"/runs/{started.run_id}/").content.decode()

    assert "Pruned 1 run record" in out.getvalue()
    assert "The record of this run was pruned on" in html and "records are kept 30 days" in html
    assert "<strong>rita</strong> approved" in html
    assert "refund old" not in html  # the transcript is gone
    assert AuditEntry.objects.filter(run_id=started.run_id).count() == 1


def _record(run_id: str, *, days_ago: float) -> EndedRun:
    ended = timezone.now() - timedelta(days=days_ago)
    return EndedRun.objects.create(
        run_id=run_id,
        agent_id="helpdesk",
        created_at=ended,
        ended_at=ended,
        status="completed",
        detail="done",
        transcript=[{"role": "user", "kind": "text", "text": run_id}],
    )


@pytest.mark.django_db
def test_prune_run_records_empties_only_records_past_the_retention(settings: object) -> None:
    _record("old", days_ago=91)
    _record("recent", days_ago=89)
    AuditEntry.objects.create(
        username="rita",
        agent_id="helpdesk",
        run_id="old",
        tool_call_id="c",
        action="approve",
        outcome="completed",
    )

    def prune(*args: str) -> str:
        out = StringIO()
        call_command("prune_run_records", *args, stdout=out)
        return out.getvalue()

    settings.RUN_RECORD_RETENTION_DAYS = None  # type: ignore[attr-defined]
    assert "kept for good" in prune()
    assert "Would prune 1" in prune("--days", "90", "--dry-run")
    assert not EndedRun.objects.exclude(pruned_at=None).exists()

    settings.RUN_RECORD_RETENTION_DAYS = 90  # type: ignore[attr-defined]
    assert "Pruned 1 run record" in prune()
    assert "Pruned 0 run record" in prune()  # already pruned

    old, recent = EndedRun.objects.get(run_id="old"), EndedRun.objects.get(run_id="recent")
    assert (old.transcript, old.detail, old.pruned) == (None, "", True)
    assert recent.transcript and not recent.pruned
    assert AuditEntry.objects.filter(run_id="old").count() == 1  # the audit log is never pruned


@pytest.mark.django_db(transaction=True)
def test_a_failed_run_keeps_what_it_had_said_and_its_error() -> None:
    @tool(requires_approval=True)
    def launch(target: str) -> str:
        """Launch something."""
        raise RuntimeError(f"launch pad {target} is on fire")

    model = ModelSpy(Call("launch", {"target": "pad-7"}), Reply("never")).model
    agent = Agent("launcher", model=model, tools=[launch])
    Runtime(agents=[agent], storage=DjangoRunStore())

    async def run_and_approve() -> tuple[str, str]:
        started = await agent.generate("launch it")
        call_id = started.tool_calls[0].tool_call_id
        stream = await agent.approve_tool_call(run_id=started.run_id, tool_call_id=call_id, actor="rita")
        return started.run_id, (await stream.result()).status

    run_id, status = async_to_sync(run_and_approve)()
    assert status == "failed"

    record = EndedRun.objects.get(run_id=run_id)
    assert record.status == "failed" and "on fire" in record.detail
    assert [(m["kind"], m["tool_name"]) for m in record.transcript] == [
        ("text", None),
        ("tool-call", "launch"),
    ]
    assert not RunRecord.objects.filter(run_id=run_id).exists()
