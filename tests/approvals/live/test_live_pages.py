"""Pages wired for live updates: the markup live.js relies on, the partials it refetches, and the
events that make it refetch (through the real consumer, channel layer and outbox relay)."""

from __future__ import annotations

import asyncio
import html
import re
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from approvals.models import AuditEntry
from config.asgi import application
from tests.support.inbox_rows import inbox
from tests.support.markup import card_ids
from tests.support.runtime_fixtures import DashboardAgents

pytestmark = pytest.mark.django_db(transaction=True)

HX = {"HTTP_HX_REQUEST": "true"}


def hx(target: str) -> dict[str, str]:
    """Headers of a live refetch: htmx names the element it swaps."""
    return {**HX, "HTTP_HX_TARGET": target, "HTTP_HX_TRIGGER_NAME": "", "HTTP_HX_TRIGGER": target}


def section(page: str, element_id: str) -> str:
    """The opening tag of the element with ``element_id``."""
    match = re.search(rf'<[a-z]+ id="{re.escape(element_id)}"[^>]*>', page)
    assert match, f"no element #{element_id}"
    return html.unescape(match.group(0))


def approve_url(run: Any) -> str:
    return f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/approve"


# --- Markup -----------------------------------------------------------------------------------------


def test_logged_in_pages_open_the_live_socket_and_show_the_badge(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    page = reviewer_client.get("/").content.decode()

    body = re.search(r"<body[^>]*>", page)
    assert body and 'data-live-url="/ws/live/"' in body.group(0)
    badge = section(page, "live-status")
    assert 'role="status"' in badge and "hidden" in badge
    # The socket first, then the scripts that act on what it hears (they wait for window.csLive).
    scripts = re.findall(r'<script src="/static/countersign/(live[^"]*)" defer></script>', page)
    assert scripts == ["live.js", "live-refetch.js", "live-notes.js", "live-output.js", "live-presence.js"]
    # Strict CSP: no inline script or style anywhere on the page.
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page)
    assert " style=" not in page


def test_login_page_opens_no_socket(agents: DashboardAgents) -> None:
    page = Client().get("/accounts/login/").content.decode()

    assert "data-live-url" not in page
    assert "live-status" not in page
    assert "countersign/live" not in page


def test_overview_table_refetches_itself_on_any_event(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    for response in (reviewer_client.get("/agents/"), reviewer_client.get("/agents/", **hx("agent-table"))):
        table = section(response.content.decode(), "agent-table")
        assert 'hx-get="/agents/"' in table
        assert 'hx-trigger="cs:refresh"' in table
        assert 'hx-swap="outerHTML"' in table
        assert 'data-live="all"' in table


def test_inbox_list_refetches_with_its_own_filters_and_page(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    query = "/agents/helpdesk/?thread=t-1&kind=approval&per_page=5&page=2"
    for response in (reviewer_client.get(query), reviewer_client.get(query, **hx("run-list"))):
        run_list = section(response.content.decode(), "run-list")
        assert f'hx-get="{query}"' in run_list
        assert 'hx-trigger="cs:refresh"' in run_list
        assert 'hx-swap="outerHTML"' in run_list
        assert 'data-live-agent="helpdesk"' in run_list
        # A refetch replaces the list only: it must not push a history entry.
        assert "hx-push-url" not in run_list


def test_run_page_refetches_its_card_and_decisions_and_has_an_output_list(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund broken parcel")

    page = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()

    for element_id in ("run-state", "run-decisions"):
        live = section(page, element_id)
        assert f'hx-get="/runs/{run.run_id}/"' in live
        assert 'hx-trigger="cs:refresh"' in live
        assert f'data-live-run="{run.run_id}"' in live
    assert f'data-live-output="{run.run_id}"' in page
    assert re.search(r'<section class="card live-output"[^>]*\bhidden\b', page)


def test_decision_forms_in_a_refetched_list_keep_their_own_target(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund broken parcel")

    partial = inbox(reviewer_client, "/agents/helpdesk/", **hx("run-list"))

    # Inside the list (a row's body fetched when it opens), each form swaps its own card (never the
    # list it inherits from).
    form = re.search(rf'<form method="post" action="{re.escape(approve_url(run))}"[^>]*>', partial)
    assert form and f'hx-target="#run-{run.run_id}"' in form.group(0)
    assert 'hx-swap="outerHTML"' in form.group(0)


# --- Refetched partials after changes made elsewhere ------------------------------------------------


def test_refetched_inbox_drops_a_run_decided_elsewhere_and_shows_a_new_one(
    agents: DashboardAgents, reviewer_client: Client, client_for: Any, admin_member: User
) -> None:
    decided = agents.start("helpdesk", "refund broken parcel")
    kept = agents.start("helpdesk", "refund late delivery")

    before = reviewer_client.get("/agents/helpdesk/", **hx("run-list")).content.decode()
    client_for(admin_member).post(approve_url(decided), {"agent": "helpdesk"}, **HX)
    new = agents.start("helpdesk", "refund scratched table")
    after = reviewer_client.get("/agents/helpdesk/", **hx("run-list")).content.decode()

    assert set(card_ids(before)) == {decided.run_id, kept.run_id}
    assert set(card_ids(after)) == {kept.run_id, new.run_id}
    assert 'data-total="2"' in after


def test_refetched_overview_counts_follow_decisions(
    agents: DashboardAgents, reviewer_client: Client, client_for: Any, admin_member: User
) -> None:
    run = agents.start("helpdesk", "refund broken parcel")

    def pending() -> str:
        table = reviewer_client.get("/agents/", **hx("agent-table")).content.decode()
        match = re.search(r'id="agent-helpdesk".*?data-pending="(\d+)"', table, re.S)
        assert match
        return match.group(1)

    assert pending() == "1"
    client_for(admin_member).post(approve_url(run), {"agent": "helpdesk"}, **HX)
    assert pending() == "0"


def test_refetched_run_page_shows_how_a_decision_made_elsewhere_ended(
    agents: DashboardAgents, reviewer_client: Client, client_for: Any, admin_member: User
) -> None:
    run = agents.start("helpdesk", "refund broken parcel")
    state = reviewer_client.get(f"/runs/{run.run_id}/", **hx("run-state")).content.decode()
    assert state.lstrip().startswith('<div id="run-state"')
    assert card_ids(state) == [run.run_id]

    client_for(admin_member).post(approve_url(run), {"agent": "helpdesk"}, **HX)

    state = reviewer_client.get(f"/runs/{run.run_id}/", **hx("run-state"))
    decisions = reviewer_client.get(f"/runs/{run.run_id}/", **hx("run-decisions"))
    assert state.status_code == decisions.status_code == 200
    text = state.content.decode()
    assert text.lstrip().startswith('<div id="run-state"')
    assert "This run is no longer waiting" in text
    assert "<strong>ada</strong> approved" in text
    assert "outcome-completed" in text
    assert "Approve" not in text  # no buttons left for a run that ended
    assert decisions.content.decode().lstrip().startswith('<section id="run-decisions"')
    assert "<td>ada</td>" in decisions.content.decode()


def test_a_run_decided_outside_the_dashboard_shows_how_it_ended_and_who_decided(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund broken parcel")
    stream = agents.agent("helpdesk").approve_tool_call(
        run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id, actor="api-client"
    )
    assert sync_result(stream).status == "success"

    # Whichever front end decides, the decision is on record: the open page learns how it ended.
    refetch = reviewer_client.get(f"/runs/{run.run_id}/", **hx("run-state"))
    assert refetch.status_code == 200
    text = refetch.content.decode()
    assert "<strong>api-client</strong> approved" in text
    assert "Completed: refund: refunded 500 on A-1" in text
    assert reviewer_client.get(f"/runs/{run.run_id}/").status_code == 200


def test_refetch_of_a_run_that_vanished_without_any_decision_is_not_an_error(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    # htmx would not swap a 404: the open page must learn that the run is gone.
    refetch = reviewer_client.get("/runs/0123456789abcdef/", **hx("run-state"))
    assert refetch.status_code == 200
    assert "No decision on it is on record here" in refetch.content.decode()
    assert reviewer_client.get("/runs/0123456789abcdef/").status_code == 404


def sync_result(stream_coroutine: Any) -> Any:
    from asgiref.sync import async_to_sync

    async def run() -> Any:
        stream = await stream_coroutine
        return await stream.result()

    return async_to_sync(run)()


def test_run_page_while_a_worker_continues_and_after_it_finished(
    agents: DashboardAgents,
    reviewer_client: Client,
    client_for: Any,
    admin_member: User,
    settings: Any,
) -> None:
    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    run = agents.start("helpdesk", "refund broken parcel")

    decided = client_for(admin_member).post(approve_url(run), {"agent": "helpdesk"}, **HX)
    assert "Continuing" in decided.content.decode()

    # Claimed, queued, not run yet: the page says who decided and that it goes on.
    waiting = reviewer_client.get(f"/runs/{run.run_id}/")
    assert waiting.status_code == 200
    text = waiting.content.decode()
    assert "Decided: the run is continuing" in text
    assert "<strong>ada</strong> approved <code>refund</code>" in text
    assert agents.executed["refund"].count == 0

    call_command("db_worker", "--batch", "--no-startup-delay", "--no-reload", verbosity=0)

    assert agents.executed["refund"].count == 1
    ended = reviewer_client.get(f"/runs/{run.run_id}/", **hx("run-state")).content.decode()
    assert "This run is no longer waiting" in ended
    assert "outcome-completed" in ended
    assert "refunded 500 on A-1" in ended
    # The worker's step that ended the run settled the decision's record.
    entry = AuditEntry.objects.get(run_id=run.run_id)
    assert (entry.username, entry.outcome) == ("ada", "completed")
    assert entry.outcome_detail == "Completed: refund: refunded 500 on A-1"


# --- Events that make pages refetch -------------------------------------------------------------------


def _session_headers(user: User) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    session = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    return [
        (b"origin", b"http://127.0.0.1"),
        (b"host", b"127.0.0.1"),
        (b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={session}".encode()),
    ]


async def _events_until(communicator: WebsocketCommunicator, last: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not events or events[-1]["type"] != last:
        message = await communicator.receive_json_from(timeout=max(deadline - loop.time(), 0.01))
        if message["type"] == "event":
            events.append(message["event"])
    return events


async def test_a_decision_taken_in_the_dashboard_is_announced_by_its_runs_events_or_its_own_record(
    agents: DashboardAgents, reviewer: User, admin_member: User
) -> None:
    run = await agents.agent("helpdesk").generate("refund broken parcel")
    communicator = WebsocketCommunicator(
        application, "/ws/live/", headers=await sync_to_async(_session_headers)(reviewer)
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected

    def decide_elsewhere() -> None:
        client = Client()
        client.force_login(admin_member)
        assert client.post(approve_url(run), {"agent": "helpdesk"}, **HX).status_code == 200

    await sync_to_async(decide_elsewhere)()
    events = await _events_until(communicator, "run-completed")

    # The run's own events: the store wrote the audit row with the decision and settled its outcome
    # as the run ended, so a page that refetches on them shows both.
    assert [e["type"] for e in events] == ["call-decided", "run-resumed", "run-completed"]
    assert {(e["agent_id"], e["run_id"]) for e in events} == {("helpdesk", run.run_id)}
    assert (events[0]["actor"], events[0]["action"]) == ("ada", "approve")
    entry = await AuditEntry.objects.aget(run_id=run.run_id, username="ada")
    assert entry.outcome == "completed"

    # An attempt that changed nothing (too late) has no run event: its record is announced itself.
    await sync_to_async(decide_elsewhere)()
    (late,) = await _events_until(communicator, "decision-recorded")
    assert (late["run_id"], late["actor"], late["action"]) == (run.run_id, "ada", "approve")
    assert await AuditEntry.objects.filter(run_id=run.run_id, outcome="lost_race").aexists()
    await communicator.disconnect()
