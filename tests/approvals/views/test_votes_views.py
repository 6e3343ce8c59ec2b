"""Two-person approval and separation of duties in the dashboard: the card's "1 of 2 approvals",
who is not offered Approve and why, refusals that change nothing, and who started a run."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from approvals.models import AuditEntry, RunRecord
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import make_user

HX = {"HTTP_HX_REQUEST": "true"}


def approve_url(run_id: str, tool_call_id: str) -> str:
    return f"/runs/{run_id}/calls/{tool_call_id}/approve"


def test_two_reviewers_complete_a_two_person_approval(
    agents: DashboardAgents, reviewer_client: Client, client_for: ..., admin_member: User
) -> None:
    run = agents.start("helpdesk", "payout", started_by="someone-else")
    call = run.tool_calls[0]
    page = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    assert "0 of 2 approvals" in page and ">Approve</button>" in page

    first = reviewer_client.post(approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk"}, **HX)

    html = first.content.decode()
    assert first.status_code == 200
    assert "Vote recorded" in html and "1 of 2 approvals" in html and "rita" in html
    assert agents.executed["payout"].count == 0
    # Rita sees that she voted instead of Approve; a second reviewer is offered Approve.
    mine = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    assert "You approved this call" in mine and ">Approve</button>" not in mine
    admin = client_for(admin_member)
    theirs = admin.get(f"/runs/{run.run_id}/").content.decode()
    assert "1 of 2 approvals</strong>: rita" in theirs and ">Approve</button>" in theirs

    second = admin.post(approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk"}, **HX)

    assert "Completed" in second.content.decode()
    assert agents.executed["payout"].calls == [{"vendor": "Acme", "amount_cents": 90000}]
    rows = list(AuditEntry.objects.order_by("id").values_list("username", "outcome", "outcome_detail"))
    assert rows[0][:2] == ("rita", "vote_recorded") and "Approval 1 of 2 (rita)" in rows[0][2]
    assert rows[1][:2] == ("ada", "completed")


def test_a_second_vote_by_the_same_reviewer_is_refused_without_javascript(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "payout")
    call = run.tool_calls[0]
    reviewer_client.post(approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk"})

    again = reviewer_client.post(approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk"})

    assert again.status_code == 403
    assert "rita already approved this call" in again.content.decode()
    assert agents.executed["payout"].count == 0
    assert list(AuditEntry.objects.order_by("id").values_list("outcome", flat=True)) == [
        "vote_recorded",
        "refused",
    ]
    assert agents.suspended("helpdesk")[0].tool_calls[0].approved_by == ("rita",)


def test_an_admin_who_started_the_run_cannot_approve_it(
    agents: DashboardAgents, admin_member: User, client_for: ...
) -> None:
    admin = client_for(admin_member)
    started = admin.post("/runs/new/", {"agent": "helpdesk", "prompt": "payout"})
    assert started.status_code == 302
    record = RunRecord.objects.get()
    assert record.started_by == "ada"
    run = agents.suspended("helpdesk")[0]
    call = run.tool_calls[0]
    page = admin.get(f"/runs/{run.run_id}/").content.decode()
    assert "You started this run" in page and ">Approve</button>" not in page
    assert "Decline</button>" in page

    # Posted anyway (a stale page, a crafted form): the store's decide step refuses it.
    refused = admin.post(approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk"}, **HX)

    assert "ada started run" in refused.content.decode()
    assert agents.executed["payout"].count == 0
    assert agents.suspended("helpdesk")[0].tool_calls[0].approved_by == ()
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.outcome) == ("ada", "refused")


@pytest.mark.django_db(transaction=True)
def test_run_agent_as_a_user_records_who_started_the_run(agents: DashboardAgents) -> None:
    make_user("sam", "Reviewers")

    call_command("run_agent", "helpdesk", "payout", "--as", "sam")

    assert RunRecord.objects.get().started_by == "sam"
    with pytest.raises(CommandError, match="Unknown user 'nobody-here'"):
        call_command("run_agent", "helpdesk", "payout", "--as", "nobody-here")
