"""Live updates in a real browser: Daphne in a subprocess, runs started and decided elsewhere.

The server uses the embedded set-up (SQLite, in-process channel layer): a run started by
``manage.py run_agent`` in another process reaches the open pages through the outbox relay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.live.conftest import log_in
from tests.support import server
from tests.support.card_rows import declining, expanded

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

WAIT = 15_000  # ms: generous for a loaded 2-core CI machine; the happy path takes well under a second
REFUND = "Refund $300 on A-1042"


@dataclass
class Site:
    env: dict[str, str]
    daphne: server.Daphne
    artifacts: Path

    def start_run(self, prompt: str = REFUND, *, thread: str = "T") -> str:
        return server.start_run(self.env, "support", prompt, thread=thread)


@pytest.fixture
def site(tmp_path: Path, artifacts_dir: Path) -> Iterator[Site]:
    env = server.env_for(f"sqlite:///{tmp_path / 'countersign.sqlite3'}")
    server.prepare_database(env)
    daphne = server.Daphne(env, artifacts_dir / "daphne.log")
    daphne.start()
    try:
        yield Site(env, daphne, artifacts_dir)
    finally:
        daphne.stop()


def card(page: Any, run_id: str) -> Any:
    return expanded(page.locator(f"#run-{run_id}"))


def wait_until(condition: Callable[[], bool], page: Any, timeout_ms: int = WAIT) -> None:
    for _ in range(timeout_ms // 100):
        if condition():
            return
        page.wait_for_timeout(100)
    raise AssertionError("condition not met in time")


def expect_live(page: Any) -> None:
    badge = page.get_by_role("status").filter(has_text="Live")
    expect(badge).to_have_attribute("data-state", "live", timeout=WAIT)
    expect(page.locator("#live-status")).to_have_text("Live")


def test_run_started_in_another_process_appears_and_says_who_decided_it_elsewhere(
    site: Site, browser: Any
) -> None:
    inbox = log_in(browser, site.daphne.url, server.USERNAME, server.PASSWORD, next_path="/agents/support/")
    overview = inbox.context.new_page()
    overview.goto("/agents/")
    expect_live(inbox)
    expect_live(overview)
    expect(overview.locator("#agent-support [data-pending]")).to_have_text("0")
    # Set on the page's window: a reload would lose it.
    inbox.evaluate("window.notReloaded = true")

    run_id = site.start_run()

    expect(card(inbox, run_id)).to_be_visible(timeout=WAIT)
    expect(card(inbox, run_id)).to_contain_text("issue_refund")
    expect(overview.locator("#agent-support [data-pending]")).to_have_text("1", timeout=WAIT)
    assert inbox.evaluate("window.notReloaded") is True
    expect(inbox.locator("#live-status")).to_have_text("Live")
    inbox.screenshot(path=str(site.artifacts / "inbox-live.png"), full_page=True)

    other = log_in(
        browser, site.daphne.url, server.OTHER_USERNAME, server.OTHER_PASSWORD, next_path=f"/runs/{run_id}/"
    )
    # Once the page is live and its first refetch is in: a click on a card being swapped is lost.
    expect_live(other)
    other.wait_for_load_state("networkidle")
    card(other, run_id).get_by_role("button", name="Approve").click()
    expect(card(other, run_id).locator(".outcome")).to_contain_text("Completed", timeout=WAIT)

    # The card says who decided it and stays where it was (nothing vanishes under the reviewer)...
    note = card(inbox, run_id).locator(".decided-note")
    expect(note).to_contain_text(f"Approved by {server.OTHER_USERNAME}", timeout=WAIT)
    expect(card(inbox, run_id).get_by_role("button", name="Approve")).to_be_disabled()
    expect(overview.locator("#agent-support [data-pending]")).to_have_text("0", timeout=WAIT)
    assert inbox.evaluate("window.notReloaded") is True
    # ...until they move on.
    inbox.reload()
    expect(card(inbox, run_id)).to_have_count(0)
    expect(inbox.locator("#run-list")).to_contain_text("Nothing is waiting here")


def test_run_page_streams_the_continuation_and_shows_how_a_decision_elsewhere_ended(
    site: Site, browser: Any
) -> None:
    run_id = site.start_run()
    run_page = log_in(
        browser, site.daphne.url, server.USERNAME, server.PASSWORD, next_path=f"/runs/{run_id}/"
    )
    expect_live(run_page)
    expect(run_page.locator("#run-decisions")).to_contain_text("No decisions yet")

    other = log_in(
        browser, site.daphne.url, server.OTHER_USERNAME, server.OTHER_PASSWORD, next_path="/agents/support/"
    )
    expect_live(other)
    refetches: list[str] = []
    other.on(
        "request", lambda r: refetches.append(r.url) if r.headers.get("hx-target") == "run-list" else None
    )
    # The page refetches its list as its socket connects and as the reviewer's presence on the run
    # comes in. Once, on a loaded CI machine, a click among those refetches posted nothing (cause not
    # found: the card kept its place and its Approve button): click once they are over.
    expect(card(other, run_id)).to_contain_text(f"Also open here: {server.USERNAME}", timeout=WAIT)
    other.wait_for_load_state("networkidle")
    card(other, run_id).get_by_role("button", name="Approve").click()
    outcome = card(other, run_id).locator(".outcome")
    expect(outcome).to_contain_text("Completed", timeout=WAIT)

    # The run page: the continuation's output as it ran, then how it ended and who decided.
    output = run_page.locator(f"[data-live-output='{run_id}']")
    expect(output).to_be_visible(timeout=WAIT)
    expect(output).to_contain_text("issue_refund", timeout=WAIT)
    expect(output).to_contain_text("Run success.", timeout=WAIT)
    state = run_page.locator("#run-state")
    expect(state).to_contain_text("This run is no longer waiting", timeout=WAIT)
    expect(state).to_contain_text(server.OTHER_USERNAME)
    expect(state).to_contain_text("Completed")
    expect(run_page.locator("#run-decisions")).to_contain_text(server.OTHER_USERNAME, timeout=WAIT)
    run_page.screenshot(path=str(site.artifacts / "run-page-live.png"), full_page=True)

    # The deciding page refetched its list after the decision's events, and kept its own outcome
    # (with the focus the decision put on it).
    wait_until(lambda: len(refetches) > 0, other)
    other.wait_for_load_state("networkidle")
    expect(outcome).to_contain_text("Completed")
    expect(outcome).to_contain_text(server.OTHER_USERNAME)
    expect(outcome).to_be_focused()


def test_refetch_keeps_what_the_reviewer_is_typing_and_waits_while_a_field_has_focus(
    site: Site, browser: Any
) -> None:
    first = site.start_run(thread="first")
    inbox = log_in(browser, site.daphne.url, server.USERNAME, server.PASSWORD, next_path="/agents/support/")
    expect_live(inbox)
    reason = declining(card(inbox, first)).get_by_label("Reason for declining")
    reason.fill("Checking with finance first")
    inbox.locator("h1").click()  # focus leaves the field; the text stays typed, not sent

    second = site.start_run(thread="second")
    expect(card(inbox, second)).to_be_visible(timeout=WAIT)
    expect(card(inbox, first).get_by_label("Reason for declining")).to_have_value(
        "Checking with finance first"
    )

    # The reviewer is in the field when someone else decides that call: nothing moves under them...
    card(inbox, first).get_by_label("Reason for declining").focus()
    other = log_in(
        browser, site.daphne.url, server.OTHER_USERNAME, server.OTHER_PASSWORD, next_path=f"/runs/{first}/"
    )
    card(other, first).get_by_role("button", name="Approve").click()
    expect(card(other, first).locator(".outcome")).to_contain_text("Completed", timeout=WAIT)
    expect(inbox.locator("#run-list[data-stale]")).to_have_count(1, timeout=WAIT)
    expect(card(inbox, first)).to_be_visible()
    # ...and once they leave it, the decided card says who decided it, in its place, its reason
    # still typed; the other card is live as before.
    inbox.locator("h1").click()
    expect(card(inbox, first).locator(".decided-note")).to_contain_text(
        f"Approved by {server.OTHER_USERNAME}", timeout=WAIT
    )
    expect(card(inbox, first).get_by_role("button", name="Approve")).to_be_disabled()
    expect(card(inbox, second)).to_be_visible()

    # The buttons of a refetched list decide like any other.
    card(inbox, second).get_by_role("button", name="Approve").click()
    expect(card(inbox, second).locator(".outcome")).to_contain_text("Completed", timeout=WAIT)


def test_badge_shows_reconnecting_while_the_server_is_down_and_the_page_catches_up(
    site: Site, browser: Any
) -> None:
    inbox = log_in(browser, site.daphne.url, server.USERNAME, server.PASSWORD, next_path="/agents/support/")
    expect_live(inbox)
    inbox.evaluate("window.notReloaded = true")

    site.daphne.kill()
    badge = inbox.locator("#live-status")
    expect(badge).to_have_attribute("data-state", "offline", timeout=WAIT)
    expect(badge).to_have_text("Reconnecting…")
    expect(badge).to_have_attribute("role", "status")

    # Changed while nobody could have told the page: only the refetch on reconnect can show it.
    while_down = site.start_run(thread="while-down")

    site.daphne.start()
    expect(badge).to_have_text("Live", timeout=30_000)
    expect(card(inbox, while_down)).to_be_visible(timeout=WAIT)
    assert inbox.evaluate("window.notReloaded") is True

    # And the new socket carries events again.
    after = site.start_run(thread="after-restart")
    expect(card(inbox, after)).to_be_visible(timeout=WAIT)


def test_outcome_that_parks_the_run_again_says_when_the_run_was_decided_elsewhere(
    site: Site, browser: Any
) -> None:
    run_id = server.start_run(site.env, "ops", "deploy ledger to production", thread="again")
    inbox = log_in(browser, site.daphne.url, server.USERNAME, server.PASSWORD, next_path="/agents/ops/")
    expect_live(inbox)
    refetches: list[str] = []
    inbox.on(
        "request", lambda r: refetches.append(r.url) if r.headers.get("hx-target") == "run-list" else None
    )

    form = card(inbox, run_id)
    form.get_by_label("Start time").fill("2026-12-01T22:00")
    form.get_by_label("Risk").select_option("low")
    refetches.clear()
    form.get_by_role("button", name="Resume").click()
    outcome = card(inbox, run_id).locator(".outcome")
    expect(outcome).to_contain_text("Waiting again", timeout=WAIT)

    # The decision's own events refetch the list; the run waits on the very call the outcome shows.
    wait_until(lambda: len(refetches) > 0, inbox)
    inbox.wait_for_load_state("networkidle")
    expect(outcome).to_contain_text("waiting on: deploy_service")

    # Someone else approves the deploy: this page's outcome is stale; the card says so and who.
    other = log_in(
        browser, site.daphne.url, server.OTHER_USERNAME, server.OTHER_PASSWORD, next_path=f"/runs/{run_id}/"
    )
    card(other, run_id).get_by_label("I checked this").first.check()  # a production deploy is risky
    card(other, run_id).get_by_role("button", name="Approve").click()
    expect(card(other, run_id).locator(".outcome")).to_contain_text("Completed", timeout=WAIT)
    expect(card(inbox, run_id).locator(".decided-note")).to_contain_text(
        f"Approved by {server.OTHER_USERNAME}", timeout=WAIT
    )
    inbox.reload()
    expect(card(inbox, run_id)).to_have_count(0)


@pytest.fixture
def worker_site(tmp_path: Path, artifacts_dir: Path) -> Iterator[Site]:
    """The embedded set-up with continuations queued for a ``db_worker`` process (no Redis)."""
    env = server.env_for(f"sqlite:///{tmp_path / 'countersign.sqlite3'}", tasks_backend="database")
    server.prepare_database(env)
    daphne = server.Daphne(env, artifacts_dir / "daphne.log")
    worker = server.db_worker(env, artifacts_dir / "worker.log", "browser-test-worker")
    with server.running(daphne, worker):
        yield Site(env, daphne, artifacts_dir)


def test_run_page_streams_the_output_of_a_continuation_a_worker_runs(worker_site: Site, browser: Any) -> None:
    run_id = worker_site.start_run()
    run_page = log_in(
        browser, worker_site.daphne.url, server.USERNAME, server.PASSWORD, next_path=f"/runs/{run_id}/"
    )
    expect_live(run_page)
    other = log_in(
        browser,
        worker_site.daphne.url,
        server.OTHER_USERNAME,
        server.OTHER_PASSWORD,
        next_path="/agents/support/",
    )
    card(other, run_id).get_by_role("button", name="Approve").click()
    expect(card(other, run_id).locator(".outcome")).to_contain_text("Continuing", timeout=WAIT)

    # The worker process ran it; its output came through the outbox to this server's page.
    output = run_page.locator(f"[data-live-output='{run_id}']")
    expect(output).to_contain_text("issue_refund", timeout=WAIT)
    expect(output.locator("li[data-kind='text']")).to_contain_text("Refunded $300.00 on A-1042", timeout=WAIT)
    expect(output).to_contain_text("Run success.", timeout=WAIT)
    expect(output.locator("li[data-kind='finish']")).to_have_count(1)
    state = run_page.locator("#run-state")
    expect(state).to_contain_text("Completed", timeout=WAIT)
    run_page.screenshot(path=str(worker_site.artifacts / "run-page-worker-output.png"), full_page=True)


def test_logging_out_on_another_server_signs_the_page_out_without_reconnecting(
    site: Site, browser: Any
) -> None:
    # A second server on the same database, no Redis: the logout reaches the first through the outbox.
    other_server = server.Daphne(site.env, site.artifacts / "daphne-2.log")
    with server.running(other_server):
        inbox = log_in(
            browser, site.daphne.url, server.USERNAME, server.PASSWORD, next_path="/agents/support/"
        )
        expect_live(inbox)
        sockets: list[Any] = []
        inbox.on("websocket", lambda socket: sockets.append(socket))
        # Same browser (cookies do not care about the port), another tab, another server.
        elsewhere = inbox.context.new_page()
        elsewhere.goto(f"{other_server.url}/")
        elsewhere.get_by_role("button", name="Log out").click()
        elsewhere.wait_for_url("**/accounts/login/")

        badge = inbox.locator("#live-status")
        expect(badge).to_have_attribute("data-state", "signed-out", timeout=WAIT)
        expect(badge).to_have_text("Signed out")
        sign_in = inbox.get_by_role("link", name="Sign in again")
        expect(sign_in).to_be_visible()
        inbox.screenshot(path=str(site.artifacts / "signed-out.png"))
        inbox.wait_for_timeout(3_000)  # longer than the first reconnect delays
        # No reconnecting once signed out. Daphne's WebSocket server (autobahn) resets the TCP
        # connection as soon as the close handshake ends, or within a second without the page's
        # answer; on a loaded machine the reset can overtake the 4401 close frame itself, and the
        # page, seeing a connection lost (1006), tries once more, which the server turns away with
        # 4401: at most that one attempt, closed, and the page stays signed out.
        assert len(sockets) <= 1 and all(socket.is_closed() for socket in sockets), sockets
        expect(badge).to_have_text("Signed out")

        sign_in.click()
        inbox.wait_for_url("**/accounts/login/?next=/agents/support/")
        inbox.fill("#id_username", server.USERNAME)
        inbox.fill("#id_password", server.PASSWORD)
        inbox.click("main button[type=submit]")
        inbox.wait_for_url("**/agents/support/")
        expect_live(inbox)


def test_page_whose_session_ended_while_the_server_was_down_shows_signed_out(
    site: Site, browser: Any
) -> None:
    inbox = log_in(browser, site.daphne.url, server.USERNAME, server.PASSWORD, next_path="/agents/support/")
    expect_live(inbox)
    site.daphne.kill()
    badge = inbox.locator("#live-status")
    expect(badge).to_have_attribute("data-state", "offline", timeout=WAIT)
    # Sessions cleared meanwhile (an admin, an expiry): the page's next socket has none.
    clear_sessions = "from django.contrib.sessions.models import Session\nSession.objects.all().delete()"
    server.manage(site.env, "shell", "-c", clear_sessions)

    site.daphne.start()
    expect(badge).to_have_attribute("data-state", "signed-out", timeout=30_000)
    expect(inbox.get_by_role("link", name="Sign in again")).to_be_visible()
