"""Bulk decisions: a selection (or every call matching the inbox's filters) previewed, then decided
call by call through the normal decision path, exactly once each, with the audit rows tied together."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable

from django.contrib.auth.models import User
from django.test import Client

from approvals import tasks
from approvals.models import AuditEntry, Batch, BatchItem, FollowedAgent, ParkedCallRecord
from approvals.views.audit import AUDIT_CSV_COLUMNS
from tests.support.batches import key, prepare, start
from tests.support.queries import count_queries
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import make_user


def test_the_preview_shows_the_tool_the_arguments_that_differ_and_how_many(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    runs = [agents.start("helpdesk", f"refund parcel {n}") for n in range(3)]

    batch = prepare(reviewer_client, [key(r) for r in runs])
    html = reviewer_client.get(f"/batches/{batch.pk}/").content.decode()

    assert "<strong>3</strong> calls of Help desk" in html
    assert "<code>refund</code>" in html and "\u00d7 3" in html
    # order_id and amount_cents are the same in all three; only the note differs, call by call.
    assert "order_id: &quot;A-1&quot;" in html and "amount_cents: 500" in html
    assert '<th scope="col"><code>note</code></th>' in html
    for n in range(3):
        assert f"&quot;parcel {n}&quot;" in html
    assert ">Approve all 3</button>" in html and ">Decline all 3</button>" in html
    assert agents.executed["refund"].count == 0  # a preview decides nothing
    assert AuditEntry.objects.count() == 0


def test_approve_all_decides_each_call_once_and_ties_the_audit_rows_to_the_batch(
    agents: DashboardAgents, reviewer_client: Client, admin_member_client: Client
) -> None:
    runs = [agents.start("helpdesk", f"refund parcel {n}") for n in range(3)]
    batch = prepare(reviewer_client, [key(r) for r in runs])

    start(reviewer_client, batch, "approve")

    assert batch.state == Batch.State.DONE and batch.action == "approve" and batch.username == "rita"
    assert agents.executed["refund"].count == 3
    assert agents.suspended("helpdesk") == []
    entries = AuditEntry.objects.all()
    assert sorted(e.run_id for e in entries) == sorted(r.run_id for r in runs)
    assert {(e.batch_id, e.username, e.outcome) for e in entries} == {(batch.pk, "rita", "completed")}
    page = reviewer_client.get(f"/batches/{batch.pk}/").content.decode()
    assert '<strong class="batch-decided">3</strong> done' in page
    assert '<strong class="batch-skipped">0</strong> skipped' in page
    assert 'hx-trigger="cs:refresh" hx-swap="outerHTML" data-live-agent="helpdesk"' in page  # live
    # The audit log links each row to its batch; the CSV names it in its batch column.
    audit = admin_member_client.get("/audit/").content.decode()
    assert audit.count(f'href="/batches/{batch.pk}/"') == 3
    csv_head, *csv_rows = (
        b"".join(admin_member_client.get("/audit/export.csv").streaming_content).decode().splitlines()
    )
    assert csv_head.split(",") == AUDIT_CSV_COLUMNS and csv_head.endswith(",batch,grant")
    assert [row.split(",")[-2:] for row in csv_rows] == [[str(batch.pk), ""]] * 3


def test_decline_all_sends_the_one_reason_to_every_model(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    runs = [agents.start("helpdesk", f"refund parcel {n}") for n in range(2)]
    batch = prepare(reviewer_client, [key(r) for r in runs])

    start(reviewer_client, batch, "decline", "Refunds are paused this week")

    assert agents.executed["refund"].count == 0
    entries = list(AuditEntry.objects.all())
    assert len(entries) == 2
    assert {(e.action, e.reason, e.batch_id) for e in entries} == {
        ("decline", "Refunds are paused this week", batch.pk)
    }
    assert all("Refunds are paused this week" in e.outcome_detail for e in entries)


def test_decline_all_with_a_reason_over_2000_characters_is_refused_and_decides_nothing(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    runs = [agents.start("helpdesk", f"refund parcel {n}") for n in range(2)]
    batch = prepare(reviewer_client, [key(r) for r in runs])

    response = reviewer_client.post(f"/batches/{batch.pk}/start", {"action": "decline", "reason": "x" * 2001})

    assert response.status_code == 302
    page = reviewer_client.get(response["Location"]).content.decode()
    assert "at most 2000 characters" in page
    batch.refresh_from_db()
    assert batch.state == Batch.State.DRAFT
    assert len(agents.suspended("helpdesk")) == 2
    assert AuditEntry.objects.count() == 0


def test_forged_input_and_sub_agent_calls_are_skipped_and_reported_never_decided(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    refund = agents.start("helpdesk", "refund parcel")
    question = agents.start("helpdesk", "schedule")  # suspend(): needs an answer, not bulk-decidable
    foreign = agents.start("boss", "wipe")  # another agent's run, its id posted to helpdesk's batch
    calls = [key(refund), key(question), key(foreign), json.dumps(["no-such-run", "c1"]), "not json"]

    batch = prepare(reviewer_client, calls)
    start(reviewer_client, batch, "approve")

    items = {i.run_id: i for i in batch.items.all()}
    assert set(items) == {refund.run_id, question.run_id, foreign.run_id, "no-such-run"}
    assert items[refund.run_id].state == BatchItem.State.DECIDED
    assert "Waits for input" in items[question.run_id].detail
    assert "not this agent's run" in items[foreign.run_id].detail
    assert all(items[r].state == BatchItem.State.SKIPPED for r in (question.run_id, foreign.run_id))
    assert agents.executed["wipe_disk"].count == 0
    assert [r.run_id for r in agents.suspended("boss")] == [foreign.run_id]
    assert AuditEntry.objects.get().run_id == refund.run_id
    page = reviewer_client.get(f"/batches/{batch.pk}/").content.decode()
    assert 'Skipped <span class="muted">(3)</span>' in page


def test_all_matching_takes_every_page_of_the_filtered_inbox(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    picked = [agents.start("helpdesk", f"refund a{n}", thread="t-a") for n in range(3)]
    other = agents.start("helpdesk", "refund b", thread="t-b")

    response = reviewer_client.post(
        "/agents/helpdesk/batches/new?thread=t-a&per_page=1&page=2", {"scope": "matching"}
    )
    batch = Batch.objects.get(pk=int(response["Location"].split("/")[2]))

    assert batch.all_matching and batch.filters == {"thread": "t-a"}
    assert sorted(i.run_id for i in batch.items.all()) == sorted(r.run_id for r in picked)
    start(reviewer_client, batch, "approve")
    assert agents.executed["refund"].count == 3
    assert [r.run_id for r in agents.suspended("helpdesk")] == [other.run_id]


def test_bulk_racing_a_single_reviewer_decides_every_call_exactly_once(
    agents: DashboardAgents, reviewer: User, client_for: Callable[..., Client]
) -> None:
    runs = [agents.start("helpdesk", f"refund race {n}") for n in range(10)]
    bulk, single = client_for(reviewer), client_for(make_user("sam", "Reviewers"))
    batch = prepare(bulk, [key(r) for r in runs])
    go = threading.Barrier(2)
    answers: list[int] = []

    def decide_some_alone() -> None:
        go.wait()
        for run in runs[::-1][:6]:  # from the other end, so that the two meet in the middle
            call = run.tool_calls[0]
            response = single.post(
                f"/runs/{run.run_id}/calls/{call.tool_call_id}/decline", {"agent": "helpdesk"}
            )
            answers.append(response.status_code)

    alone = threading.Thread(target=decide_some_alone)
    alone.start()
    go.wait()
    start(bulk, batch, "approve")
    alone.join(timeout=60)

    assert answers == [302] * 6
    winners = AuditEntry.objects.winning()
    assert sorted(e.run_id for e in winners) == sorted(r.run_id for r in runs)  # once each
    approved = [e for e in winners if e.action == "approve"]
    assert {e.batch_id for e in approved} <= {batch.pk} and agents.executed["refund"].count == len(approved)
    counts = {s: batch.items.filter(state=s).count() for s in BatchItem.State}
    assert counts[BatchItem.State.DECIDED] == len(approved)
    assert counts[BatchItem.State.DECIDED] + counts[BatchItem.State.SKIPPED] == 10
    for item in batch.items.filter(state=BatchItem.State.SKIPPED):
        assert "sam" in item.detail or "not waiting" in item.detail.lower(), item.detail
    assert agents.suspended("helpdesk") == []


def test_a_reviewer_who_lost_the_right_meanwhile_decides_nothing(
    agents: DashboardAgents, reviewer: User, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    batch = prepare(reviewer_client, [key(run)])
    Batch.objects.filter(pk=batch.pk).update(state=Batch.State.RUNNING, action="approve")
    reviewer.groups.clear()

    tasks.decide_batch.enqueue(batch.pk)

    item = batch.items.get()
    assert (item.state, item.detail) == (
        BatchItem.State.SKIPPED,
        "You may no longer decide this agent's calls.",
    )
    assert agents.executed["refund"].count == 0 and AuditEntry.objects.count() == 0


def test_bulk_needs_login_the_decide_permission_csrf_and_the_batch_to_be_ones_own(
    agents: DashboardAgents, reviewer_client: Client, viewer: User, client_for: Callable[..., Client]
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    assert Client().post("/agents/helpdesk/batches/new", {"call": [key(run)]}).status_code == 302  # to login
    assert client_for(viewer).post("/agents/helpdesk/batches/new", {"call": [key(run)]}).status_code == 403
    batch = prepare(reviewer_client, [key(run)])
    other = client_for(make_user("sam", "Reviewers"))
    assert other.get(f"/batches/{batch.pk}/").status_code == 404
    assert other.post(f"/batches/{batch.pk}/start", {"action": "approve"}).status_code == 404
    csrf_client = client_for(User.objects.get(username="rita"), enforce_csrf_checks=True)
    assert csrf_client.post(f"/batches/{batch.pk}/start", {"action": "approve"}).status_code == 403
    batch.refresh_from_db()
    assert batch.state == Batch.State.DRAFT and agents.executed["refund"].count == 0


def test_starting_twice_runs_the_batch_once(agents: DashboardAgents, reviewer_client: Client) -> None:
    run = agents.start("helpdesk", "refund parcel")
    batch = prepare(reviewer_client, [key(run)])

    start(reviewer_client, batch, "approve")
    reviewer_client.post(f"/batches/{batch.pk}/start", {"action": "decline"})

    batch.refresh_from_db()
    assert batch.action == "approve" and AuditEntry.objects.count() == 1


def test_the_inbox_offers_a_checkbox_per_approval_call_only(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    refund = agents.start("helpdesk", "refund parcel")
    agents.start("helpdesk", "schedule")

    html = reviewer_client.get("/agents/helpdesk/").content.decode()

    boxes = re.findall(
        r'<input type="checkbox" class="bulk-select" name="call" value="([^"]*)" form="bulk-form">', html
    )
    assert [json.loads(b.replace("&quot;", '"')) for b in boxes] == [
        [refund.run_id, refund.tool_calls[0].tool_call_id]
    ]
    assert "Select all 2 matching runs…" in html
    assert '<a class="skip-link" href="#run-list">Skip to the first call</a>' in html
    assert "<title>(2) Help desk · Countersign</title>" in html


def test_following_an_agent_is_stored_per_user(
    agents: DashboardAgents, reviewer: User, reviewer_client: Client
) -> None:
    response = reviewer_client.post("/agents/helpdesk/follow", {"follow": "yes"}, HTTP_HX_REQUEST="true")
    assert 'data-following="yes"' in response.content.decode()
    assert list(FollowedAgent.objects.values_list("user__username", "agent_id")) == [("rita", "helpdesk")]
    page = reviewer_client.get("/").content.decode()
    assert 'data-follows="[&quot;helpdesk&quot;]"' in page
    # The inbox's button and the header's list (the page's notifications), from one read.
    with count_queries() as statements:
        inbox = reviewer_client.get("/agents/helpdesk/").content.decode()
    assert 'data-following="yes"' in inbox and 'data-follows="[&quot;helpdesk&quot;]"' in inbox
    assert len([sql for sql in statements.sql if "followedagent" in sql]) == 1, statements.sql
    reviewer_client.post("/agents/helpdesk/follow", {"follow": "no"})
    assert FollowedAgent.objects.count() == 0
    inbox = reviewer_client.get("/agents/helpdesk/").content.decode()
    assert 'data-following="no"' in inbox and 'data-follows="[]"' in inbox


def test_a_call_changed_since_the_preview_is_skipped_not_decided_unseen(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    runs = [agents.start("helpdesk", f"refund parcel {n}") for n in range(2)]
    batch = prepare(reviewer_client, [key(r) for r in runs])
    # After the preview was shown, the second call's effect preview changes (as a re-check or a
    # tool upgrade would): the batch's approval was given on what it said before.
    call = ParkedCallRecord.objects.get(run__run_id=runs[1].run_id)
    call.context = {**(call.context or {}), "preview": {"sentence": "Refunds $5,000.00 instead"}}
    call.save(update_fields=["context"])

    start(reviewer_client, batch, "approve")

    assert agents.executed["refund"].count == 1
    assert [r.run_id for r in agents.suspended("helpdesk")] == [runs[1].run_id]
    stale = batch.items.get(run_id=runs[1].run_id)
    assert stale.state == BatchItem.State.SKIPPED and "changed since you saw it" in stale.detail
    assert batch.items.get(run_id=runs[0].run_id).state == BatchItem.State.DECIDED
