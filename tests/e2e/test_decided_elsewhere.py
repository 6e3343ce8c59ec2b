"""A card decided, extended or expired elsewhere while it is open says so at once in one line and stays
where it is; nothing typed is lost."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import REVIEWER, Pages, RunRequest, Server, unique
from tests.e2e.test_reviewer_safety import card, visit
from tests.support.card_rows import APPROVE, DECLINE, declining

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]


def test_a_call_decided_elsewhere_says_who_and_disables_its_buttons_keeping_the_typed_reason(
    pages: Pages, server: Server
) -> None:
    thread = unique("decided-elsewhere")
    (run_id,) = server.start_runs(RunRequest("support", "Refund $85.00 on A-1042, it broke.", thread))
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}")
    mine = declining(card(page, run_id))
    reason = mine.get_by_label("Reason for declining")
    reason.fill("Half-written: the order total does not match")

    other = pages.open(REVIEWER)
    visit(other, f"/runs/{run_id}/")
    card(other, run_id).get_by_role("button", name=APPROVE).click()
    expect(card(other, run_id).locator(".outcome")).to_be_visible()

    note = mine.locator(".decided-note")
    expect(note).to_contain_text(f"Approved by {REVIEWER.username}")
    expect(mine.get_by_role("button", name=APPROVE)).to_be_disabled()
    expect(mine.get_by_role("button", name=DECLINE)).to_be_disabled()
    expect(reason).to_have_value("Half-written: the order total does not match")


def test_an_open_queue_card_decided_elsewhere_stays_where_it_is_saying_who_and_when(
    pages: Pages, server: Server
) -> None:
    thread = unique("stays-queue")
    (first, second) = server.start_runs(
        RunRequest("support", "Refund $86.00 on A-1042, it broke.", thread),
        RunRequest("support", "Refund $87.00 on A-1043, it broke.", thread),
    )
    page = pages.open()
    visit(page, f"/queue/?thread={thread}")
    opened = card(page, first)
    expect(opened.locator("details.call-row[open]")).to_have_count(1)
    page.mouse.move(5, 5)  # the pointer off the list: nothing holds the card but its being open

    other = pages.open(REVIEWER)
    visit(other, f"/runs/{first}/")
    declining(card(other, first)).get_by_role("button", name=DECLINE).click()
    expect(card(other, first).locator(".outcome")).to_be_visible()

    note = page.locator(f"#run-{first} .decided-note")
    expect(note).to_contain_text(f"Declined by {REVIEWER.username}")
    expect(note.locator("time")).to_have_text(re.compile(r"^\d+ s ago$"))
    # The list refetched (the other card is still there, refreshed); the decided card stayed.
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1500)
    expect(page.locator(f"#run-{first}")).to_be_visible()
    expect(page.locator(f"#run-{first} .decided-note")).to_contain_text(f"Declined by {REVIEWER.username}")
    expect(page.locator(f"#run-{first}").get_by_role("button", name=APPROVE)).to_be_disabled()
    expect(page.locator(f"#run-{second}")).to_be_visible()


def test_an_open_inbox_card_says_its_deadline_was_extended_and_then_that_it_passed(
    pages: Pages, server: Server
) -> None:
    thread = unique("deadline-lines")
    (run_id,) = server.start_runs(
        RunRequest("support", "Refund $88.00 on A-1042, it broke.", thread, expires_after=45)
    )
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}")
    card(page, run_id)
    page.mouse.move(5, 5)

    other = pages.open(REVIEWER)
    visit(other, f"/runs/{run_id}/")
    extend = card(other, run_id).locator("details.extend-deadline")
    extend.locator("summary").click()
    extend.get_by_label("Extend by").select_option("15")
    extend.get_by_label("Reason").fill("Waiting on the warehouse")
    extend.get_by_role("button", name=re.compile("^Extend the deadline")).click()

    note = page.locator(f"#run-{run_id} .live-note")
    expect(note).to_contain_text(f"Deadline extended by {REVIEWER.username}")
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1000)
    expect(note).to_contain_text(f"Deadline extended by {REVIEWER.username}")  # across the refetch


def test_an_open_card_whose_deadline_passes_says_what_the_deadline_did_and_stays(
    pages: Pages, server: Server
) -> None:
    thread = unique("deadline-passed")
    (run_id,) = server.start_runs(
        RunRequest("support", "Refund $89.00 on A-1042, it broke.", thread, expires_after=600)
    )
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}")
    card(page, run_id)
    page.mouse.move(5, 5)
    server.pass_deadline(run_id)

    note = page.locator(f"#run-{run_id} .decided-note")
    expect(note).to_have_text("Deadline passed: declined")
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1000)
    expect(note).to_have_text("Deadline passed: declined")
    expect(page.locator(f"#run-{run_id}").get_by_role("button", name=APPROVE)).to_be_disabled()


def test_the_line_says_what_the_deadline_did_not_what_the_tool_asked_for(
    pages: Pages, server: Server
) -> None:
    """A call whose tool asks to be approved when nobody answers, but that nobody can approve (an answer
    nobody gave: the rules decline it): the line says "declined", as the record does."""
    thread = unique("deadline-overruled")
    (run_id,) = server.start_runs(
        RunRequest("ops", "deploy billing-api to production", thread, expires_after=600, on_expiry="approve")
    )
    page = pages.open()
    visit(page, f"/agents/ops/?thread={thread}")
    card(page, run_id)
    page.mouse.move(5, 5)
    server.pass_deadline(run_id)

    note = page.locator(f"#run-{run_id} .decided-note")
    expect(note).to_have_text("Deadline passed: declined")


def _kept_after_a_colleague_declines(pages: Pages, server: Server, thread: str) -> tuple[Page, str, str]:
    """The reviewer's queue with two calls, the first one's row open (clicked) when a colleague
    declines it: the card stays with its line. The page, and the two runs."""
    (first, second) = server.start_runs(
        RunRequest("support", "Refund $81.00 on A-1042, it broke.", thread),
        RunRequest("support", "Refund $82.00 on A-1043, it broke.", thread),
    )
    page = pages.open()
    visit(page, f"/queue/?thread={thread}")
    page.locator(f"#run-{first} details.call-row > summary").click()
    expect(page.locator(f"#run-{first} details.call-row[open]")).to_have_count(1)
    page.mouse.move(5, 5)

    other = pages.open(REVIEWER)
    visit(other, f"/runs/{first}/")
    declining(card(other, first)).get_by_role("button", name=DECLINE).click()
    expect(card(other, first).locator(".outcome")).to_be_visible()

    expect(page.locator(f"#run-{first} .decided-note")).to_contain_text(f"Declined by {REVIEWER.username}")
    # The list refetched without the run: the card stays, kept.
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1000)
    expect(page.locator(f"#run-{first}[data-kept]")).to_be_visible()
    return page, first, second


def test_a_kept_card_goes_when_the_reviewer_moves_on_past_it_with_j(pages: Pages, server: Server) -> None:
    page, first, second = _kept_after_a_colleague_declines(pages, server, unique("kept-j"))

    page.keyboard.press("j")

    expect(page.locator(f"#run-{first}")).to_have_count(0)
    current = page.locator(".call.is-current")
    expect(current).to_have_count(1)
    expect(current).to_have_attribute("id", re.compile(f"^call-{second}-"))
    # And it stays gone: the next refetch does not bring it back.
    page.wait_for_timeout(1000)
    expect(page.locator(f"#run-{first}")).to_have_count(0)
    expect(page.locator(f"#run-{second}")).to_be_visible()


def test_a_kept_card_goes_when_the_reviewer_closes_its_row(pages: Pages, server: Server) -> None:
    page, first, second = _kept_after_a_colleague_declines(pages, server, unique("kept-close"))

    page.locator(f"#run-{first} details.call-row > summary").click()

    expect(page.locator(f"#run-{first}")).to_have_count(0)
    expect(page.locator(f"#run-{second}")).to_be_visible()
    # The keys go on from where the card was: j brings the next call.
    page.keyboard.press("j")
    expect(page.locator(".call.is-current")).to_have_attribute("id", re.compile(f"^call-{second}-"))
