"""The bulk preview says what approving each call would do, by rule, as the rules answer it; the
results say what happened ("Vote recorded", not "Decided"), and errors are plain words."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client

from agents_runtime import RunResult
from approvals.models import BatchItem
from approvals.services.batches import FAILED
from tests.support.batches import key, prepare, rules_of, start
from tests.support.runtime_fixtures import DashboardAgents

HX = {"HTTP_HX_REQUEST": "true"}


def claim(client: Client, run: RunResult) -> None:
    call = run.tool_calls[0].tool_call_id
    answer = client.post(f"/runs/{run.run_id}/calls/{call}/claim", {"agent": "helpdesk", "op": "claim"}, **HX)
    assert answer.status_code == 200


def test_the_preview_splits_the_calls_by_what_the_rules_say_approving_them_would_do(
    agents: DashboardAgents, reviewer_client: Client, client_for: ..., admin_member: User
) -> None:
    votes = [agents.start("helpdesk", "payout", started_by="someone-else") for _ in range(2)]
    mine = agents.start("helpdesk", "payout", started_by="rita")
    claimed = agents.start("helpdesk", "refund parcel 1")
    plain = agents.start("helpdesk", "refund parcel 2")
    claim(client_for(admin_member), claimed)

    batch = prepare(reviewer_client, [key(r) for r in [*votes, mine, claimed, plain]])
    page = reviewer_client.get(f"/batches/{batch.pk}/").content.decode()

    assert rules_of(page) == [
        "2 will get your vote, 1 of 2: nothing runs yet",
        "1 will be approved: the tool runs",
        "1 you started: separation of duties, cannot approve",
        f"1 claimed by {admin_member.username}: not decided in bulk",
    ]
    assert agents.executed["payout"].count == 0 and agents.executed["refund"].count == 0

    start(reviewer_client, batch, "approve")

    results = dict(BatchItem.objects.filter(batch=batch).values_list("run_id", "detail"))
    assert results[votes[0].run_id] == "Vote recorded: nothing runs yet"
    assert results[plain.run_id] == "Approved"
    done = reviewer_client.get(f"/batches/{batch.pk}/").content.decode()
    assert ">Vote recorded: nothing runs yet</span>" in done and ">Approved</span>" in done
    assert ">Decided</span>" not in done
    assert "separation of duties" in results[mine.run_id]


def test_a_call_the_batch_fails_on_says_so_in_plain_words() -> None:
    assert "Error" not in FAILED and "Exception" not in FAILED
    assert FAILED.startswith("Could not be decided here")
