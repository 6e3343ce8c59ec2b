"""Deciding from the dashboard: approve, decline with a reason, resume forms, races, several calls."""

from __future__ import annotations

import re

from asgiref.sync import async_to_sync
from django.contrib.messages import get_messages
from django.test import Client

from approvals.models import AuditEntry
from tests.support.inbox_rows import inbox
from tests.support.queries import count_queries
from tests.support.runtime_fixtures import DashboardAgents

HX = {"HTTP_HX_REQUEST": "true"}


def url(run_id: str, tool_call_id: str, action: str) -> str:
    return f"/runs/{run_id}/calls/{tool_call_id}/{action}"


def messages_of(response: object) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]  # type: ignore[attr-defined]


def test_approve_without_javascript_redirects_back_with_a_message(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund broken parcel", thread="t-1", resource="dana")
    call = run.tool_calls[0]

    response = reviewer_client.post(
        url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk", "next": "/agents/helpdesk/"}
    )

    assert response.status_code == 302
    assert response["Location"] == "/agents/helpdesk/"
    assert any("Completed: refund: refunded 500 on A-1" in m for m in messages_of(response))
    assert agents.executed["refund"].count == 1
    assert agents.suspended("helpdesk") == []
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.action, entry.outcome) == ("rita", "approve", "completed")
    assert (entry.agent_id, entry.run_id, entry.thread_id, entry.resource_id) == (
        "helpdesk",
        run.run_id,
        "t-1",
        "dana",
    )
    assert (entry.tool_call_id, entry.tool_name) == (call.tool_call_id, "refund")
    assert entry.args == {"order_id": "A-1", "amount_cents": 500, "note": "broken parcel"}
    assert "refunded 500 on A-1" in entry.outcome_detail


def test_approve_with_htmx_replaces_the_card_with_the_outcome(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call = run.tool_calls[0]

    response = reviewer_client.post(
        url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX
    )

    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith(f'<article id="run-{run.run_id}"')
    assert "<html" not in html
    assert "Completed" in html and "<strong>rita</strong> approved <code>refund</code>" in html
    assert "refund: refunded 500 on A-1" in html  # the final answer
    assert ">Approve</button>" not in html


def test_next_must_stay_on_this_site(agents: DashboardAgents, reviewer_client: Client) -> None:
    run = agents.start("helpdesk", "refund parcel")

    response = reviewer_client.post(
        url(run.run_id, run.tool_calls[0].tool_call_id, "approve"),
        {"agent": "helpdesk", "next": "https://evil.example/"},
    )

    assert response["Location"] == f"/runs/{run.run_id}/"


def test_decline_sends_reason_to_model(agents: DashboardAgents, reviewer_client: Client) -> None:
    run = agents.start("helpdesk", "refund duplicate")
    call = run.tool_calls[0]

    response = reviewer_client.post(
        url(run.run_id, call.tool_call_id, "decline"),
        {"agent": "helpdesk", "reason": "Already refunded last week"},
        **HX,
    )

    assert agents.helpdesk_model.tool_results() == {call.tool_call_id: "Already refunded last week"}
    assert agents.executed["refund"].count == 0
    html = response.content.decode()
    assert "<strong>rita</strong> declined <code>refund</code>" in html
    assert "refund: Already refunded last week" in html
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.reason, entry.outcome) == (
        "decline",
        "Already refunded last week",
        "completed",
    )


def test_a_decline_reason_over_2000_characters_is_a_form_error_and_nothing_is_decided(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund duplicate")
    call = run.tool_calls[0]

    response = reviewer_client.post(
        url(run.run_id, call.tool_call_id, "decline"), {"agent": "helpdesk", "reason": "x" * 2001}, **HX
    )

    html = response.content.decode()
    assert response.status_code == 200 and 'aria-invalid="true"' in html
    assert "at most 2000 characters" in html
    assert agents.helpdesk_model.tool_results() == {}
    assert [r.run_id for r in agents.suspended("helpdesk")] == [run.run_id]
    # (The attempt is on record as invalid; the reason is not kept.)
    assert not AuditEntry.objects.exclude(outcome="invalid").exists()
    assert all(len(e.reason) <= 2000 for e in AuditEntry.objects.all())


def test_resume_form_is_built_from_the_resume_schema(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "schedule")

    html = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()

    form = html[html.index('class="resume-form"') : html.index(">Resume</button>")]
    assert "Start time" in form and 'abbr class="required"' in form  # title as label, required mark
    assert 'type="number"' in form and 'value="30"' in form and 'min="5"' in form  # integer with default
    assert 'type="checkbox"' in form and "Notify on-call" in form  # boolean
    assert "<select" in form and '<option value="medium">medium</option>' in form  # enum
    assert "Your estimate" in form  # description
    assert "novalidate" in html  # the server validates
    assert "&quot;question&quot;: &quot;When may we take db-1 down?&quot;" in html  # the suspend payload


def test_invalid_resume_data_shows_field_errors_and_leaves_the_run_waiting(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "schedule")
    call = run.tool_calls[0]
    bad = {"agent": "helpdesk", "resume-start": "", "resume-duration_minutes": "2", "resume-risk": "extreme"}

    partial = reviewer_client.post(url(run.run_id, call.tool_call_id, "resume"), bad, **HX)
    page = reviewer_client.post(url(run.run_id, call.tool_call_id, "resume"), bad)

    assert partial.status_code == 200  # htmx swaps 2xx only
    assert page.status_code == 400
    for response in (partial, page):
        errors = re.findall(r'class="field-errors"[^>]*>([^<]*)<', response.content.decode())
        assert "This field is required." in errors
        assert "Ensure this value is greater than or equal to 5." in errors
        assert any("Select a valid choice" in e for e in errors)
    assert "<html" in page.content.decode()  # without JavaScript: the run page with the errors
    assert [r.run_id for r in agents.suspended("helpdesk")] == [run.run_id]
    assert agents.executed["schedule_maintenance"].count == 0
    # Nothing decided; each attempt is on record as invalid (who, which call, the errors).
    assert not AuditEntry.objects.winning().exists()
    attempts = list(AuditEntry.objects.chronological())
    assert [(e.username, e.action, e.outcome, e.tool_call_id) for e in attempts] == [
        ("rita", "resume", "invalid", call.tool_call_id)
    ] * 2
    assert "start: This field is required." in attempts[0].outcome_detail


def test_valid_resume_data_resumes_the_run(agents: DashboardAgents, reviewer_client: Client) -> None:
    run = agents.start("helpdesk", "schedule")
    call = run.tool_calls[0]

    response = reviewer_client.post(
        url(run.run_id, call.tool_call_id, "resume"),
        {
            "agent": "helpdesk",
            "resume-start": "22:00 UTC",
            "resume-duration_minutes": "45",
            "resume-risk": "low",
        },
        **HX,
    )

    html = response.content.decode()
    assert "<strong>rita</strong> answered <code>schedule_maintenance</code>" in html
    assert "db-1 at 22:00 UTC for 45 min, risk low" in html
    assert agents.executed["schedule_maintenance"].calls == [
        {"window": {"start": "22:00 UTC", "duration_minutes": 45, "notify_oncall": False, "risk": "low"}}
    ]
    assert agents.suspended("helpdesk") == []
    entry = AuditEntry.objects.get()
    assert entry.action == "resume" and entry.outcome == "completed"
    assert entry.resume_data == {
        "start": "22:00 UTC",
        "duration_minutes": 45,
        "notify_oncall": False,
        "risk": "low",
    }
    assert entry.suspend_payload == {"system": "db-1", "question": "When may we take db-1 down?"}


def test_a_decision_from_the_card_reads_the_waiting_run_only_for_its_form(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    # A plain approval reads nothing before the door: the store's decision step reads the run once,
    # and the record ("as shown") comes from that read. An answer reads the run for its form too.
    refund, schedule = agents.start("helpdesk", "refund parcel"), agents.start("helpdesk", "schedule")
    answer = {
        "agent": "helpdesk",
        "resume-start": "22:00 UTC",
        "resume-duration_minutes": "45",
        "resume-risk": "low",
    }

    with count_queries() as approving:
        approved = reviewer_client.post(
            url(refund.run_id, refund.tool_calls[0].tool_call_id, "approve"), {"agent": "helpdesk"}, **HX
        )
    with count_queries() as answering:
        answered = reviewer_client.post(
            url(schedule.run_id, schedule.tool_calls[0].tool_call_id, "resume"), answer, **HX
        )

    assert (approving.run_reads(), answering.run_reads()) == (1, 2)
    assert "Completed" in approved.content.decode() and "Completed" in answered.content.decode()
    entries = {e.run_id: e for e in AuditEntry.objects.all()}
    assert entries[refund.run_id].args == {"order_id": "A-1", "amount_cents": 500, "note": "parcel"}
    assert entries[schedule.run_id].suspend_payload == {
        "system": "db-1",
        "question": "When may we take db-1 down?",
    }


def test_nested_resume_schema_falls_back_to_json(agents: DashboardAgents, reviewer_client: Client) -> None:
    run = agents.start("helpdesk", "report")
    call = run.tool_calls[0]
    html = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    assert 'class="json"' in html and "Enter JSON." in html

    bad = reviewer_client.post(
        url(run.run_id, call.tool_call_id, "resume"),
        {"agent": "helpdesk", "resume-summary": "db died", "resume-steps": '[{"title": "restart"}]'},
        **HX,
    )
    assert "[0]: &#x27;owner&#x27; is a required property" in bad.content.decode()
    assert len(agents.suspended("helpdesk")) == 1

    good = reviewer_client.post(
        url(run.run_id, call.tool_call_id, "resume"),
        {
            "agent": "helpdesk",
            "resume-summary": "db died",
            "resume-steps": '[{"title": "restart", "owner": "ops"}]',
        },
        **HX,
    )
    assert "INC-7: db died (1 steps)" in good.content.decode()


def test_second_decision_on_the_same_call_says_who_already_decided(
    agents: DashboardAgents, reviewer_client: Client, admin_member_client: Client
) -> None:
    run = agents.start("helpdesk", "refund once")
    call = run.tool_calls[0]
    target = url(run.run_id, call.tool_call_id, "approve")

    first = reviewer_client.post(target, {"agent": "helpdesk"}, **HX)
    second = admin_member_client.post(target, {"agent": "helpdesk"}, **HX)
    second_declines = admin_member_client.post(
        url(run.run_id, call.tool_call_id, "decline"), {"agent": "helpdesk"}
    )

    assert "Completed" in first.content.decode()
    assert "already decided by rita at " in second.content.decode()
    assert any("already decided by rita at " in m for m in messages_of(second_declines))
    assert agents.executed["refund"].count == 1
    outcomes = list(AuditEntry.objects.chronological().values_list("username", "action", "outcome"))
    assert outcomes == [
        ("rita", "approve", "completed"),
        ("ada", "approve", "lost_race"),
        ("ada", "decline", "lost_race"),
    ]


def test_several_parked_calls_are_decided_one_by_one(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "both")
    refund = next(c for c in run.tool_calls if c.tool_name == "refund")
    schedule = next(c for c in run.tool_calls if c.tool_name == "schedule_maintenance")
    inbox = reviewer_client.get("/agents/helpdesk/").content.decode()
    assert inbox.count('<section class="call call-') == 2

    first = reviewer_client.post(url(run.run_id, refund.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX)

    html = first.content.decode()
    assert "still waits on 1 other call(s): schedule_maintenance" in html
    assert "<code>schedule_maintenance</code>" in html and ">Resume</button>" in html  # the card goes on
    assert agents.executed["refund"].count == 0  # runs when the last call is decided

    second = reviewer_client.post(
        url(run.run_id, schedule.tool_call_id, "resume"),
        {"agent": "helpdesk", "resume-start": "now", "resume-risk": "high", "resume-duration_minutes": "30"},
        **HX,
    )
    assert "Completed" in second.content.decode()
    assert agents.executed["refund"].count == 1
    assert [e.outcome for e in AuditEntry.objects.chronological()] == ["suspended_again", "completed"]


def test_conditional_approval_only_parks_large_amounts(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    small = agents.start("helpdesk", "transfer 50")
    large = agents.start("helpdesk", "transfer 500")

    assert small.status == "success"
    html = inbox(reviewer_client, "/agents/helpdesk/")
    assert f'id="run-{large.run_id}"' in html and "&quot;amount&quot;: 500" in html


def test_sub_agent_calls_with_colons_in_their_ids_are_decided_on_the_supervisor(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("boss", "wipe two disks")
    ids = [c.tool_call_id for c in agents.suspended("boss")[0].tool_calls]
    assert len(ids) == 2 and all(":" in i for i in ids)

    html = inbox(reviewer_client, "/agents/boss/")
    for tool_call_id in ids:
        assert f'action="{url(run.run_id, tool_call_id, "approve")}"' in html
    assert f'hx-target="#run-{run.run_id}"' in html

    reviewer_client.post(url(run.run_id, ids[0], "approve"), {"agent": "boss"}, **HX)
    done = reviewer_client.post(
        url(run.run_id, ids[1], "decline"), {"agent": "boss", "reason": "keep sdb"}, **HX
    )

    assert "Completed" in done.content.decode()
    assert agents.executed["wipe_disk"].calls == [{"disk": "sda"}]
    assert "keep sdb" in str(agents.worker_model.tool_results())


def test_inner_run_is_shown_on_the_sub_agent_but_decided_through_the_supervisor(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    outer = agents.start("boss", "wipe a disk")
    inner = agents.suspended("worker")[0]

    html = reviewer_client.get("/agents/worker/").content.decode()

    assert f'id="run-{inner.run_id}"' in html
    assert f'href="/runs/{outer.run_id}/"' in html and "decided through its supervisor" in html
    assert ">Approve</button>" not in html


def test_approve_on_an_input_call_is_refused_and_changes_nothing(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "schedule")
    call = run.tool_calls[0]

    response = reviewer_client.post(
        url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX
    )

    assert "Refused" in response.content.decode()
    assert [r.run_id for r in agents.suspended("helpdesk")] == [run.run_id]
    assert AuditEntry.objects.get().outcome == "invalid"


def test_decision_on_an_unknown_call_changes_nothing_and_records_nothing(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund x")

    response = reviewer_client.post(url(run.run_id, "call_nope", "approve"), {"agent": "helpdesk"}, **HX)
    gone = reviewer_client.post(url("no-such-run", "call_nope", "approve"), {"agent": "helpdesk"})

    assert "No longer waiting" in response.content.decode()
    assert "Expired" not in response.content.decode()  # (no deadline decided it)
    assert "not suspended" in response.content.decode()
    assert gone.status_code == 302
    assert any("not waiting for a decision any more" in m for m in messages_of(gone))
    assert len(agents.suspended("helpdesk")) == 1
    assert not AuditEntry.objects.exists()


def test_losing_a_race_to_a_run_that_already_ended_still_names_the_winner(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    # The winner decided outside this dashboard's request cycle (another instance still finishing
    # the run, or the API): no audit entry yet, and the run is already gone from the run store.
    run = agents.start("helpdesk", "refund raced")
    call = run.tool_calls[0]
    stream = async_to_sync(agents.agent("helpdesk").approve_tool_call)(
        run_id=run.run_id, tool_call_id=call.tool_call_id, actor="quick-quentin"
    )
    assert async_to_sync(stream.result)().status == "success"

    late = reviewer_client.post(url(run.run_id, call.tool_call_id, "approve"), {"agent": "helpdesk"}, **HX)

    assert "already decided by quick-quentin at " in late.content.decode()
    assert agents.executed["refund"].count == 1
