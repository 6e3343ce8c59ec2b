"""A stored run that no longer reads (a row edited by hand, a broken migration, another version's
writer): every page and API that lists or shows runs leaves it out or says so, answers, and still
shows the runs beside it; a decision on it says why it cannot be taken and changes nothing. The
store's listings promise as much (``tests/approvals/store``); this checks every door that reads them."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from agents_runtime import RunResult
from agents_runtime.store import Deadline
from approvals.models import AuditEntry, BatchItem, HeldDecision, ParkedCallRecord, RunRecord
from approvals.services.tokens import create_token
from tests.approvals.conftest import agents  # (the dashboard's test agents)
from tests.hostile.conftest import HX, assert_no_5xx
from tests.support.batches import key, prepare, rules_of, start
from tests.support.live_sockets import connect, next_message
from tests.support.runtime_fixtures import DashboardAgents

__all__ = ["agents"]

pytestmark = pytest.mark.django_db(transaction=True)

#: Each way a stored run can stop reading: the table, the column and what it holds.
UNREADABLE: dict[str, tuple[type[Any], str, Any]] = {
    "arguments a list": (ParkedCallRecord, "args", ["not", "an", "object"]),
    "an unknown kind of call": (ParkedCallRecord, "kind", "teleport"),
    "votes that are not votes": (ParkedCallRecord, "votes", ["not a vote"]),
    "a deadline that is not one": (ParkedCallRecord, "deadline", {"after": "soon"}),
    "a delegation without its run": (ParkedCallRecord, "delegation", {"agent_id": "x"}),
    "a schema that is a list": (ParkedCallRecord, "resume_schema", [1, 2]),
    "a history that is not a list": (RunRecord, "history", {"not": "a list"}),
    "a snapshot that is not an object": (RunRecord, "snapshot", "not an object"),
}


def _break(run: RunResult, model: type[Any], column: str, value: Any) -> None:
    of_run = "run__run_id" if model is ParkedCallRecord else "run_id"
    assert model.objects.filter(**{of_run: run.run_id}).update(**{column: value}) >= 1


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_every_door_answers_and_shows_the_other_runs_beside_an_unreadable_one(
    case: str, agents: DashboardAgents, reviewer: User, reviewer_client: Client
) -> None:
    generate = async_to_sync(agents.agent("helpdesk").generate)
    broken, sound = generate("refund the broken one"), generate("refund the sound one")
    _break(broken, *UNREADABLE[case])
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {create_token(reviewer, name='hostile').plaintext}"}

    pages = {
        (url, bool(extra.get("HTTP_HX_REQUEST"))): assert_no_5xx(reviewer_client, url, **extra)
        for url, extra in (
            ("/agents/helpdesk/", {}),
            ("/agents/helpdesk/", HX),
            ("/queue/", {}),
            ("/queue/", HX),
            ("/agents/", {}),
            ("/", {}),
            ("/health/", {}),
            (f"/runs/{broken.run_id}/?agent=helpdesk", {}),
            (f"/runs/{sound.run_id}/?agent=helpdesk", {}),
            ("/api/agents/helpdesk/suspended-runs", bearer),
            (f"/api/v1/agents/helpdesk/runs/{broken.run_id}", bearer),
            (f"/api/v1/agents/helpdesk/runs/{sound.run_id}", bearer),
        )
    }

    # A run whose snapshot alone is unreadable is still listed (what a listing shows reads), and its
    # page and the API show it, without the conversation that no longer reads; it is only never
    # handed to a continuation (test_store_django).
    listed = case == "a snapshot that is not an object"
    for url in ("/agents/helpdesk/", "/queue/", "/api/agents/helpdesk/suspended-runs"):
        for partial in (False, True) if not url.startswith("/api/") else (False,):
            shown = pages[url, partial].content.decode()
            assert sound.run_id in shown and (broken.run_id in shown) == listed, (url, partial)
    for url in (f"/runs/{broken.run_id}/?agent=helpdesk", f"/api/v1/agents/helpdesk/runs/{broken.run_id}"):
        assert pages[url, False].status_code == (200 if listed else 404), url
    if listed:
        shown_run = pages[f"/api/v1/agents/helpdesk/runs/{broken.run_id}", False].json()
        assert shown_run["runId"] == broken.run_id and shown_run["messages"] == []
    for url in (f"/runs/{sound.run_id}/?agent=helpdesk", f"/api/v1/agents/helpdesk/runs/{sound.run_id}"):
        assert pages[url, False].status_code == 200 and sound.run_id in pages[url, False].content.decode()


@pytest.mark.parametrize("case", ["a snapshot that is not an object", "arguments a list"])
def test_deciding_an_unreadable_run_says_so_through_every_door_and_changes_nothing(
    case: str, agents: DashboardAgents, reviewer: User, reviewer_client: Client
) -> None:
    """It said the run was no longer waiting (or did not exist) while its card stayed in the inbox."""
    run = async_to_sync(agents.agent("helpdesk").generate)("refund the broken one")
    call = run.tool_calls[0].tool_call_id
    _break(run, *UNREADABLE[case])
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {create_token(reviewer, name='hostile').plaintext}"}

    card = reviewer_client.post(
        reverse("approvals:approve", args=[run.run_id, call]), {"agent": "helpdesk"}, **HX
    ).content.decode()
    answers = [
        reviewer_client.post(url, json.dumps(body), content_type="application/json", **bearer)
        for url, body in (
            (f"/api/v1/agents/helpdesk/runs/{run.run_id}/calls/{call}/approve", {}),
            ("/api/agents/helpdesk/approve-tool-call", {"runId": run.run_id, "toolCallId": call}),
            ("/api/agents/helpdesk/decline-tool-call", {"runId": run.run_id, "toolCallId": call}),
        )
    ]

    assert "can no longer be read" in html.unescape(card)
    assert ">Unreadable</span>" in card and "Expired" not in card  # (it did not stop waiting)
    for answer in answers:
        assert answer.status_code == 404 and answer.json()["code"] == "run_unreadable", answer.content
        assert "can no longer be read" in answer.json()["error"]
    assert RunRecord.objects.get(run_id=run.run_id).status == "suspended"
    assert not AuditEntry.objects.filter(run_id=run.run_id).exists()


@pytest.mark.parametrize("case", ["arguments a list", "votes that are not votes"])
def test_the_deadline_sweep_expires_the_other_calls_and_leaves_an_unreadable_run_as_stored(
    case: str, agents: DashboardAgents
) -> None:
    generate = async_to_sync(agents.agent("helpdesk").generate)
    broken = generate("refund the broken one", deadline=Deadline(timedelta(minutes=5), "decline"))
    sound = generate("refund the sound one", deadline=Deadline(timedelta(minutes=6), "decline"))
    _break(broken, *UNREADABLE[case])

    expired = async_to_sync(agents.runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=7))

    assert expired == 1
    assert list(RunRecord.objects.values_list("run_id", "status")) == [(broken.run_id, "suspended")]
    assert AuditEntry.objects.filter(run_id=sound.run_id, action="expire").exists()
    assert not AuditEntry.objects.filter(run_id=broken.run_id).exists()


@pytest.mark.parametrize("case", ["a snapshot that is not an object", "arguments a list"])
def test_a_batch_decides_the_sound_calls_and_skips_an_unreadable_run_saying_why(
    case: str, agents: DashboardAgents, reviewer_client: Client
) -> None:
    broken, sound = agents.start("helpdesk", "refund the broken one"), agents.start("helpdesk", "refund")
    batch = prepare(reviewer_client, [key(broken), key(sound)])
    _break(broken, *UNREADABLE[case])  # (after the preview: the batch meets it when it decides)

    start(reviewer_client, batch, "approve")

    items = {item.run_id: item for item in batch.items.all()}
    assert items[sound.run_id].state == BatchItem.State.DECIDED
    assert items[broken.run_id].state == BatchItem.State.SKIPPED
    assert "can no longer be read" in items[broken.run_id].detail
    assert RunRecord.objects.get(run_id=broken.run_id).status == "suspended"
    assert not AuditEntry.objects.filter(run_id=broken.run_id).exists()
    assert agents.executed["refund"].count == 1
    page = reviewer_client.get(f"/batches/{batch.pk}/")
    assert page.status_code == 200 and "can no longer be read" in html.unescape(page.content.decode())


def test_a_bulk_preview_says_a_run_whose_snapshot_no_longer_reads_will_be_skipped(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    """It said "will be approved" (the preview's rules read the run without its snapshot), and the
    batch then skipped it."""
    broken, sound = agents.start("helpdesk", "refund the broken one"), agents.start("helpdesk", "refund")
    _break(broken, *UNREADABLE["a snapshot that is not an object"])  # (still listed, still selectable)

    batch = prepare(reviewer_client, [key(broken), key(sound)])
    page = reviewer_client.get(f"/batches/{batch.pk}/").content.decode()

    assert rules_of(page) == [
        "1 will be approved: the tool runs",
        "1 stored in a form that can no longer be read: skipped",
    ]


def test_the_undo_window_holds_nothing_on_a_run_whose_snapshot_no_longer_reads(
    agents: DashboardAgents, reviewer_client: Client, settings: Any
) -> None:
    """It held the approval ("Approved by you · Undo"), then could not take it."""
    settings.DECISION_UNDO_SECONDS = 5
    run = agents.start("helpdesk", "refund the broken one")
    _break(run, *UNREADABLE["a snapshot that is not an object"])

    card = reviewer_client.post(
        reverse("approvals:approve", args=[run.run_id, run.tool_calls[0].tool_call_id]),
        {"agent": "helpdesk"},
        **HX,
    ).content.decode()

    assert ">Unreadable</span>" in card and "can no longer be read" in html.unescape(card)
    assert ">Undo</button>" not in card
    assert not HeldDecision.objects.exists() and not AuditEntry.objects.exists()


@pytest.mark.parametrize("case", ["a snapshot that is not an object", "arguments a list"])
async def test_a_page_may_follow_a_listed_run_whose_snapshot_no_longer_reads(
    case: str, agents: DashboardAgents, reviewer: User
) -> None:
    """Its page shows it, so its socket may follow it (a reviewer may fix the row and decide it);
    a run that is not listed is as unknown as any other."""
    run = await agents.agent("helpdesk").generate("refund the broken one")
    await sync_to_async(_break)(run, *UNREADABLE[case])
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")

    await communicator.send_json_to({"subscribe_run": run.run_id})

    if case == "a snapshot that is not an object":
        assert (await next_message(communicator, "subscribed"))["run_id"] == run.run_id
    else:
        assert (await next_message(communicator, "error"))["error"] == "unknown run"
    await communicator.disconnect()
