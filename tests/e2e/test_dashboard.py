"""The dashboard in a real browser: log in, filter, approve, decline, resume, race, and stay clean.

Every test starts the runs it decides (``manage.py run_agent``, demo agents with the scripted model)
on threads of its own. What the scripted model answers once its script is done is a summary of the
last tool results, ``"<tool>: <result>"``: that is how the final answers below show what the tools
did, and that a declined call's reason reached the model.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.conftest import (
    ADMIN,
    REVIEWER,
    Login,
    Pages,
    RunRequest,
    Server,
    log_in,
    screenshot,
    unique,
)
from tests.support.card_rows import APPROVE, DECLINE, declining, expanded

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]


def card(page: Page, run_id: str) -> Locator:
    return expanded(page.locator(f"#run-{run_id}"))


def cards(page: Page) -> Locator:
    return page.locator("#run-list article.run-card")


def query(page: Page) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


def visit(page: Page, path: str) -> None:
    """Load a page and wait until it is quiet: its live socket open and the refetch that follows done.

    A reviewer reads a page before deciding; a click in the first few milliseconds would race the
    live refetch every page makes when its socket opens (not what these tests are about).
    """
    page.goto(path, wait_until="networkidle")


def test_login_form_leads_to_the_queue_and_its_link_to_the_overview(pages: Pages, server: Server) -> None:
    page = pages.open(login=None)
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))

    log_in(page, Login(ADMIN.username, "not-the-password"))
    expect(page.get_by_role("alert")).to_contain_text("enter a correct username and password")
    log_in(page, ADMIN)

    expect(page).to_have_url(server.url("/"))
    expect(page.locator(".who")).to_have_text(ADMIN.username)
    expect(page.get_by_role("heading", level=1)).to_contain_text("My queue")
    page.get_by_role("link", name="Agents overview").click()
    expect(page).to_have_url(server.url("/agents/"))
    for inbox in ("support", "ops", "coordinator"):
        expect(page.locator(f'a[href="/agents/{inbox}/"]')).not_to_have_count(0)


def test_inbox_filters_by_thread_in_place_and_in_the_query_string(
    pages: Pages, server: Server, artifacts_dir: Path
) -> None:
    wanted, other = unique("filter-wanted"), unique("filter-other")
    wanted_id, other_id = server.start_runs(
        RunRequest("support", "Refund $75.00 on A-1042, wrong size.", wanted, "e2e-filter"),
        RunRequest("support", "Refund $80.00 on A-1043, arrived late.", other, "e2e-filter"),
    )
    page = pages.open()
    visit(page, "/agents/support/")
    expect(card(page, wanted_id)).to_be_visible()
    expect(card(page, other_id)).to_be_visible()
    screenshot(page, artifacts_dir / "inbox.png")
    # Survives only if the list is swapped in place (htmx), not if the page reloads.
    page.evaluate("window.e2eSamePage = true")

    page.get_by_label("Thread").fill(wanted)
    page.get_by_role("button", name="Filter").click()

    expect(page).to_have_url(re.compile(rf"[?&]thread={wanted}(&|$)"))
    assert query(page)["thread"] == [wanted]
    expect(cards(page)).to_have_count(1)
    expect(card(page, wanted_id)).to_be_visible()
    expect(page.locator("#run-list .count")).to_contain_text("of 1 waiting run")
    assert page.evaluate("window.e2eSamePage") is True

    # The link is shareable: loading it cold shows the same list.
    shared = pages.open(REVIEWER)
    shared.goto(page.url)
    expect(cards(shared)).to_have_count(1)
    expect(card(shared, wanted_id)).to_be_visible()

    page.go_back()
    expect(page).to_have_url(server.url("/agents/support/"))
    expect(card(page, other_id)).to_be_visible()


def test_back_shows_the_inbox_as_it_is_now_and_keeps_no_copy_of_it_in_the_tab(
    pages: Pages, server: Server
) -> None:
    """Back, after filtering in place, loads the inbox again: a call decided meanwhile is gone, not
    shown waiting from a snapshot; and no snapshot of a signed-in page stays in the tab's storage
    (``no-store`` says the same to the browser's own cache)."""
    wanted, other = unique("back-wanted"), unique("back-other")
    wanted_id, other_id = server.start_runs(
        RunRequest("support", "Refund $61.00 on A-1042, wrong size.", wanted, "e2e-back"),
        RunRequest("support", "Refund $62.00 on A-1043, arrived late.", other, "e2e-back"),
    )
    page = pages.open()
    visit(page, "/agents/support/?resource=e2e-back")
    expect(card(page, other_id)).to_be_visible()
    page.get_by_label("Thread").fill(wanted)
    page.get_by_role("button", name="Filter").click()
    expect(cards(page)).to_have_count(1)
    elsewhere = pages.open(REVIEWER)
    visit(elsewhere, f"/agents/support/?thread={other}")
    card(elsewhere, other_id).get_by_role("button", name=APPROVE).click()
    expect(card(elsewhere, other_id).locator(".outcome")).to_contain_text("Completed")

    page.go_back()

    expect(page).to_have_url(server.url("/agents/support/?resource=e2e-back"))
    expect(card(page, wanted_id)).to_be_visible()
    expect(page.locator(f"#run-{other_id}")).to_have_count(0)
    assert page.evaluate("sessionStorage.getItem('htmx-history-cache')") is None


def test_approve_replaces_the_card_with_the_completed_run(
    pages: Pages, server: Server, artifacts_dir: Path
) -> None:
    thread = unique("approve")
    (run_id,) = server.start_runs(
        RunRequest("support", "Please refund $99.00 on order A-1042, it broke.", thread, "dana")
    )
    page = pages.open()
    page.goto(f"/runs/{run_id}/")
    expect(page.get_by_role("heading", name="How it got here")).to_be_visible()
    expect(card(page, run_id)).to_contain_text('"amount_cents": 9900')
    screenshot(page, artifacts_dir / "run-page.png")

    visit(page, f"/agents/support/?thread={thread}")
    card(page, run_id).get_by_role("button", name=APPROVE).click()

    outcome = card(page, run_id).locator(".outcome")
    expect(outcome).to_contain_text("Completed")
    expect(outcome).to_contain_text(f"{ADMIN.username} approved issue_refund")
    expect(outcome.locator(".final-text")).to_contain_text("issue_refund: Refunded $99.00 on A-1042")
    expect(card(page, run_id).get_by_role("button", name="Approve")).to_have_count(0)

    page.reload()
    expect(card(page, run_id)).to_have_count(0)
    page.goto(f"/runs/{run_id}/")
    expect(page.get_by_role("heading", name="Run record")).to_be_visible()
    row = page.locator("table tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("Approve")
    expect(row).to_contain_text("Completed")


def test_decline_sends_the_reason_to_the_model(pages: Pages, server: Server) -> None:
    thread = unique("decline")
    (run_id,) = server.start_runs(
        RunRequest("support", "Write an email to the customer about order A-1044 being delayed.", thread)
    )
    reason = f"Too vague: give the customer a delivery date ({thread})"
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}")
    decided = card(page, run_id)
    expect(decided).to_contain_text("send_customer_email")

    declining(decided).get_by_label("Reason").fill(reason)
    decided.get_by_role("button", name=DECLINE).click()

    outcome = card(page, run_id).locator(".outcome")
    expect(outcome).to_contain_text("Completed")
    expect(outcome).to_contain_text(f"{ADMIN.username} declined send_customer_email")
    # The scripted model's final answer is the declined tool's result: the reviewer's reason.
    expect(outcome.locator(".final-text")).to_have_text(f"send_customer_email: {reason}")


def test_resume_form_refuses_an_invalid_value_then_resumes_the_run(pages: Pages, server: Server) -> None:
    thread = unique("resume")
    (run_id,) = server.start_runs(RunRequest("ops", "deploy ledger to production", thread, "platform-team"))
    page = pages.open()
    visit(page, f"/agents/ops/?thread={thread}")
    form = card(page, run_id)
    expect(form).to_contain_text("When may we deploy ledger to production?")
    expect(form.get_by_label("Risk")).to_have_value("")  # an enum is a select, nothing chosen yet
    expect(form.get_by_label("Notify on-call")).to_be_checked()  # the schema's default

    form.get_by_label("Start time").fill("2026-12-01T22:00")
    form.get_by_label("Duration (minutes)").fill("3")  # the schema says at least 5
    form.get_by_label("Risk").select_option("medium")
    form.get_by_label("Version to deploy").fill("v3.0.0")
    form.get_by_role("button", name="Resume").click()

    duration = form.get_by_label("Duration (minutes)")
    error = form.locator(".field", has=page.get_by_label("Duration (minutes)")).locator(".field-errors")
    expect(error).to_contain_text("greater than or equal to 5")
    expect(duration).to_have_attribute("aria-invalid", "true")
    expect(form.locator(".outcome")).to_have_count(0)
    # What was typed is kept, so only the wrong field needs fixing.
    expect(form.get_by_label("Start time")).to_have_value("2026-12-01T22:00")
    expect(form.get_by_label("Risk")).to_have_value("medium")

    # The run is untouched: still listed, still waiting for the same answer.
    page.reload(wait_until="networkidle")
    expect(cards(page)).to_have_count(1)
    expect(card(page, run_id).get_by_role("button", name="Resume")).to_be_visible()

    form.get_by_label("Start time").fill("2026-12-01T22:00")
    form.get_by_label("Duration (minutes)").fill("45")
    form.get_by_label("Risk").select_option("medium")
    form.get_by_label("Version to deploy").fill("v3.0.0")
    form.get_by_role("button", name="Resume").click()

    # The model read the answer and asked for the production deploy, which needs an approval.
    outcome = card(page, run_id).locator(".outcome")
    expect(outcome).to_contain_text("Waiting again")
    expect(outcome).to_contain_text(f"{ADMIN.username} answered request_change_window")
    expect(outcome).to_contain_text("waiting on: deploy_service")
    deploy = card(page, run_id).locator("section.call")
    expect(deploy).to_have_count(1)
    expect(deploy).to_contain_text("deploy_service")
    expect(deploy).to_contain_text('"environment": "production"')
    expect(deploy).to_contain_text('"version": "v3.0.0"')

    # A production deploy is marked risky: approving it needs "I checked this" ticked.
    deploy.get_by_label("I checked this").first.check()
    deploy.get_by_role("button", name=APPROVE).click()
    final = card(page, run_id).locator(".outcome")
    expect(final).to_contain_text("Completed")
    expect(final.locator(".final-text")).to_have_text("deploy_service: ledger v3.0.0 is live on production")


def test_resume_form_error_is_the_fields_accessible_description(pages: Pages, server: Server) -> None:
    thread = unique("resume-a11y")
    (run_id,) = server.start_runs(RunRequest("ops", "deploy ledger to production", thread))
    page = pages.open()
    visit(page, f"/agents/ops/?thread={thread}")
    form = card(page, run_id)
    form.get_by_label("Start time").fill("2026-12-01T22:00")
    form.get_by_label("Duration (minutes)").fill("3")
    form.get_by_label("Risk").select_option("low")
    form.get_by_role("button", name="Resume").click()

    duration = form.get_by_label("Duration (minutes)")
    expect(duration).to_have_attribute("aria-invalid", "true")
    # A screen reader on the field must hear what is wrong with it.
    expect(duration).to_have_accessible_description(re.compile("greater than or equal to 5"), timeout=2_000)


# htmx "settles" a swapped-in element that has the same id as the one it replaces: for
# htmx.config.defaultSettleDelay (20 ms) the new element carries the OLD element's class attribute.
# A page that told an outcome card by its class dropped it when the list refetched within those 20 ms
# (it did, about one decision in ten); a longer delay turns that race into a certainty.
SLOW_SETTLE = """
document.addEventListener("DOMContentLoaded", () => { window.htmx.config.defaultSettleDelay = 400; });
"""


def test_outcome_stays_when_the_list_refetches_right_after_the_decision(pages: Pages, server: Server) -> None:
    thread = unique("settle")
    (run_id,) = server.start_runs(RunRequest("support", "Refund $65.00 on A-1042, wrong colour.", thread))
    page = pages.open()
    page.add_init_script(script=SLOW_SETTLE)
    visit(page, f"/agents/support/?thread={thread}")
    with page.expect_response(lambda r: r.url.endswith(f"/agents/support/?thread={thread}")):
        # The decision's own events arrive while it is in flight: the list refetches once it is done.
        card(page, run_id).get_by_role("button", name=APPROVE).click()
    page.wait_for_timeout(600)  # past the settle delay

    expect(card(page, run_id).locator(".outcome")).to_contain_text("Completed", timeout=1_000)


def test_validation_errors_survive_a_live_refetch(pages: Pages, server: Server) -> None:
    thread = unique("errors-live")
    (run_id,) = server.start_runs(RunRequest("ops", "deploy ledger to production", thread))
    page = pages.open()
    visit(page, f"/agents/ops/?thread={thread}")
    form = card(page, run_id)
    form.get_by_label("Start time").fill("2026-12-01T22:00")
    form.get_by_label("Duration (minutes)").fill("3")
    form.get_by_label("Risk").select_option("high")
    form.get_by_role("button", name="Resume").click()
    error = form.locator(".field-errors")
    expect(error).to_contain_text("greater than or equal to 5")
    expect(form.get_by_label("Duration (minutes)")).to_be_focused()  # the first invalid field
    page.locator("h1").click()  # focus leaves the form: refetches are no longer held for typing

    # Another run of the same agent suspends elsewhere: the (filtered) list refetches itself.
    with page.expect_response(lambda r: r.url.endswith(f"/agents/ops/?thread={thread}")):
        server.start_runs(RunRequest("ops", "deploy ledger to production", unique("elsewhere")))
    page.wait_for_timeout(300)

    expect(error).to_contain_text("greater than or equal to 5", timeout=1_000)
    expect(form.get_by_label("Start time")).to_have_value("2026-12-01T22:00", timeout=1_000)


def test_focus_moves_to_the_outcome_after_a_decision(pages: Pages, server: Server) -> None:
    thread = unique("focus")
    (run_id,) = server.start_runs(RunRequest("support", "Refund $70.00 on A-1043, lost parcel.", thread))
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}")
    card(page, run_id).get_by_role("button", name=APPROVE).click()

    outcome = card(page, run_id).locator(".outcome")
    expect(outcome).to_contain_text("Completed")
    # Keyboard and screen reader users land on what happened, not on <body>.
    expect(outcome).to_be_focused(timeout=2_000)


def test_two_reviewers_race_on_one_call_and_exactly_one_wins(pages: Pages, server: Server) -> None:
    thread = unique("race")
    (run_id,) = server.start_runs(RunRequest("support", "Refund $250.00 on A-1044, cancelled.", thread))
    racers: dict[str, Page] = {}
    for login in (ADMIN, REVIEWER):
        page = pages.open(login)
        visit(page, f"/agents/support/?thread={thread}")
        expect(card(page, run_id).get_by_role("button", name=APPROVE)).to_be_enabled()
        racers[login.username] = page

    # Both clicks leave within a few milliseconds: each is one script call, no actionability waits.
    buttons = [card(p, run_id).get_by_role("button", name=APPROVE) for p in racers.values()]
    handles = [b.element_handle() for b in buttons]
    for handle in handles:
        handle.evaluate("button => button.click()")

    for page in racers.values():
        # (Longer than the default: on a loaded machine the loser waits for the winner's write.)
        expect(card(page, run_id).locator(".outcome")).to_be_visible(timeout=30_000)
    texts = {user: card(page, run_id).locator(".outcome").inner_text() for user, page in racers.items()}
    winners = [user for user, text in texts.items() if "Completed" in text]
    losers = [user for user, text in texts.items() if "Already decided" in text]
    assert len(winners) == 1 and len(losers) == 1, texts
    (winner,), (loser,) = winners, losers
    assert f"already decided by {winner} at " in texts[loser], texts[loser]
    assert "Nothing ran twice" in texts[loser]
    assert texts[winner].count("Refunded $250.00") == 1, texts[winner]

    # The record agrees: one decision took effect, the other lost the race.
    audit = pages.open(ADMIN)
    audit.goto(f"/runs/{run_id}/")
    rows = audit.locator("table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.filter(has_text="Completed")).to_have_count(1)
    expect(rows.filter(has_text="Completed")).to_contain_text(winner)
    expect(rows.filter(has_text="Lost a race")).to_have_count(1)
    expect(rows.filter(has_text="Lost a race")).to_contain_text(loser)


def test_approve_works_without_javascript(pages: Pages, server: Server) -> None:
    thread = unique("nojs")
    (run_id,) = server.start_runs(RunRequest("support", "Refund $60.00 on A-1042, damaged box.", thread))
    page = pages.open(javascript=False)
    page.goto(f"/agents/support/?thread={thread}")

    # The row opens without a script; its body (fetched by one when there is) is on the run page.
    page.locator(f"#run-{run_id} details.call-row > summary").click()
    page.locator(f"#run-{run_id} a.run-link").click()
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}/\?next="))
    page.locator(f"#run-{run_id}").get_by_role("button", name=APPROVE).click()

    # A plain form post, then a redirect back to the same filtered inbox with a message.
    expect(page).to_have_url(server.url(f"/agents/support/?thread={thread}"))
    expect(page.locator("ul.messages")).to_contain_text("issue_refund: Completed")
    expect(page.locator("ul.messages")).to_contain_text("Refunded $60.00 on A-1042")
    expect(card(page, run_id)).to_have_count(0)


def test_model_output_is_shown_as_text_and_never_runs(pages: Pages, server: Server) -> None:
    thread = unique("xss")
    payload = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    (run_id,) = server.start_runs(RunRequest("support", f"Write an email about A-1042: {payload}", thread))
    page = pages.open()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    for path in (f"/agents/support/?thread={thread}", f"/runs/{run_id}/"):
        page.goto(path)
        expect(card(page, run_id).locator("pre.json").first).to_contain_text(payload)
        expect(card(page, run_id).locator("script, img")).to_have_count(0)
    visit(page, f"/agents/support/?thread={thread}")
    card(page, run_id).get_by_role("button", name=APPROVE).click()
    expect(card(page, run_id).locator(".outcome")).to_contain_text("Completed")

    assert dialogs == []
    assert not [url for url in requested if urlsplit(url).path.endswith("/x")], requested


def test_pages_have_no_console_errors_or_csp_violations(
    pages: Pages, server: Server, artifacts_dir: Path
) -> None:
    anonymous = pages.open(login=None)
    anonymous.goto("/accounts/login/")
    expect(anonymous.get_by_role("button", name="Log in")).to_be_visible()

    page = pages.open()
    page.goto("/")
    run_links = []
    for agent_id in ("support", "ops", "coordinator"):
        page.goto(f"/agents/{agent_id}/")
        expect(page.locator("#run-list")).to_be_visible()
        run_links.append(page.locator("#run-list .run-link").first.get_attribute("href"))
    for href in run_links:
        assert href is not None
        page.goto(href)
        expect(page.get_by_role("heading", name="How it got here")).to_be_visible()
    for path in ("/audit/", "/audit/?action=approve", "/runs/new/", "/agents/ops/?kind=input&sort=oldest"):
        response = page.goto(path)
        assert response is not None and response.status == 200, path
    page.goto("/audit/")
    screenshot(page, artifacts_dir / "audit.png")

    reviewer = pages.open(REVIEWER)
    response = reviewer.goto("/audit/")
    assert response is not None and response.status == 403  # reviewers decide; only admins audit
    pages.problems[:] = [p for p in pages.problems if "403 (Forbidden)" not in p]
    assert pages.problems == []


def test_the_watcher_catches_a_csp_violation(pages: Pages) -> None:
    """Guards the check above: an inline style without the nonce must be reported."""
    page = pages.open()
    page.goto("/")
    page.evaluate(
        """() => {
        const style = document.createElement("style");
        style.textContent = "body { outline: 1px solid red; }";
        document.head.appendChild(style);
    }"""
    )
    page.wait_for_timeout(200)
    reported = [p for p in pages.problems if "CSP violation: style-src" in p]
    assert reported, pages.problems
    pages.problems.clear()
