"""Two reviewers in two browsers: a two-person approval, separation of duties, claims and presence."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import ADMIN, REVIEWER, Pages, RunRequest, Server, docs_screenshot, unique
from tests.e2e.test_reviewer_safety import card, visit
from tests.support.card_rows import APPROVE

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]


def start_payment(server: Server, *, as_user: str | None = None) -> str:
    args = ["run_agent", "finance", "pay INV-4410 to Globex Corp, $1,250.00", "--thread", unique("pay")]
    if as_user is not None:
        args += ["--as", as_user]
    printed = dict(line.split(": ", 1) for line in server.manage(*args).splitlines() if ": " in line)
    assert printed["status"] == "suspended", printed
    return printed["run_id"]


def test_two_reviewers_complete_a_two_person_approval_seeing_each_other_live(
    pages: Pages, server: Server
) -> None:
    run_id = start_payment(server)
    first = pages.open(ADMIN)
    visit(first, f"/runs/{run_id}/")
    second = pages.open(REVIEWER)
    visit(second, f"/runs/{run_id}/")
    # Presence: each page says who else has the card open.
    expect(card(first, run_id).locator(".presence")).to_have_text(f"Also open here: {REVIEWER.username}")
    expect(card(second, run_id).locator(".presence")).to_have_text(f"Also open here: {ADMIN.username}")
    expect(card(second, run_id).locator(".approval-votes")).to_contain_text("0 of 2 approvals")

    card(first, run_id).get_by_role("button", name=APPROVE).click()

    expect(card(first, run_id).locator(".outcome")).to_contain_text("1 of 2 approvals")
    expect(card(first, run_id).locator(".approval-blocked")).to_contain_text("You approved this call")
    expect(card(first, run_id).get_by_role("button", name=APPROVE)).to_have_count(0)
    # The other reviewer's page shows the vote without a reload, and still offers Approve.
    votes = card(second, run_id).locator(".approval-votes")
    expect(votes).to_contain_text(f"1 of 2 approvals: {ADMIN.username}")

    card(second, run_id).get_by_role("button", name=APPROVE).click()

    expect(card(second, run_id).locator(".outcome")).to_contain_text("Completed")
    expect(card(second, run_id).locator(".outcome")).to_contain_text("Paid $1250.00 to Globex Corp")
    second.close()
    expect(first.locator(".presence:visible")).to_have_count(0)


def test_the_reviewer_who_started_a_payment_is_told_they_cannot_approve_it(
    pages: Pages, server: Server
) -> None:
    run_id = start_payment(server, as_user=REVIEWER.username)
    page = pages.open(REVIEWER)

    visit(page, f"/runs/{run_id}/")

    mine = card(page, run_id)
    expect(mine.locator(".approval-blocked")).to_contain_text("You started this run")
    expect(mine.get_by_role("button", name=APPROVE)).to_have_count(0)
    expect(mine.locator("details.decline > summary")).to_be_visible()


def test_deciding_a_call_someone_else_claimed_warns_first(pages: Pages, server: Server) -> None:
    thread = unique("claimed")
    (run_id,) = server.start_runs(RunRequest("support", "Refund $77.00 on A-1042, it broke.", thread))
    holder = pages.open(ADMIN)
    visit(holder, f"/runs/{run_id}/")
    other = pages.open(REVIEWER)
    visit(other, f"/runs/{run_id}/")

    card(holder, run_id).get_by_role("button", name=re.compile("^I'm on it")).click()

    expect(card(holder, run_id).locator(".claim")).to_contain_text("You are on this call")
    # Live on the other page: who holds it.
    expect(card(other, run_id).locator(".claim")).to_contain_text(f"{ADMIN.username} is on this call")
    card(other, run_id).get_by_role("button", name=APPROVE).click()
    warning = card(other, run_id).locator(".notice")
    expect(warning).to_contain_text(f"{ADMIN.username} is on this call (claimed it). Nothing was decided")
    decide_anyway = card(other, run_id).locator(".decide > form input[name=confirm_claimed]")
    expect(decide_anyway.locator("xpath=..")).to_contain_text(f"Decide anyway ({ADMIN.username} is on it)")
    decide_anyway.check()
    card(other, run_id).get_by_role("button", name=APPROVE).click()

    expect(card(other, run_id).locator(".outcome")).to_contain_text("Completed")


def test_a_claim_reaches_the_open_card_under_the_pointer_at_once_and_it_stops_offering_im_on_it(
    pages: Pages, server: Server
) -> None:
    thread = unique("claim-live")
    (run_id,) = server.start_runs(RunRequest("support", "Refund $61.00 on A-1042, it broke.", thread))
    other = pages.open(REVIEWER)
    visit(other, f"/runs/{run_id}/")
    # The reviewer is reading the card: its refetch waits for the pointer to leave, the claim does not.
    card(other, run_id).get_by_role("button", name=APPROVE).hover()
    holder = pages.open(ADMIN)
    visit(holder, f"/runs/{run_id}/")

    card(holder, run_id).get_by_role("button", name=re.compile("^I'm on it")).click()
    expect(card(holder, run_id).locator(".claim")).to_contain_text("You are on this call")

    mine = other.locator(f"#run-{run_id}")
    expect(mine.locator(".claim")).to_contain_text(f"{ADMIN.username} is on this call", timeout=3_000)
    expect(mine.get_by_role("button", name=re.compile("^I'm on it"))).to_have_count(0)
    expect(mine.locator(".live-note")).to_contain_text(f"{ADMIN.username} is on this call")


def test_a_claim_shows_on_a_folded_inbox_row_live_and_after_a_reload(pages: Pages, server: Server) -> None:
    thread = unique("claim-row")
    (run_id,) = server.start_runs(RunRequest("support", "Refund $62.00 on A-1042, it broke.", thread))
    page = pages.open(REVIEWER)
    visit(page, f"/agents/support/?thread={thread}")
    row = page.locator(f"#run-{run_id} .call")
    expect(row.locator("details.call-row")).not_to_have_attribute("open", "")
    holder = pages.open(ADMIN)
    visit(holder, f"/runs/{run_id}/")

    card(holder, run_id).get_by_role("button", name=re.compile("^I'm on it")).click()

    expect(row.locator(".live-note")).to_contain_text(f"{ADMIN.username} is on this call", timeout=3_000)
    expect(row.locator(".call-summary .chip-claim")).to_have_text(f"{ADMIN.username} is on this call")
    visit(page, f"/agents/support/?thread={thread}")
    expect(row.locator(".call-summary .chip-claim")).to_have_text(f"{ADMIN.username} is on this call")


def test_the_bulk_preview_says_what_approving_each_payment_would_do_with_their_total(
    pages: Pages, server: Server
) -> None:
    voted = [start_payment(server, as_user=REVIEWER.username) for _ in range(2)]
    mine = start_payment(server, as_user=ADMIN.username)
    claimed = start_payment(server, as_user=REVIEWER.username)
    other = pages.open(REVIEWER)
    visit(other, f"/runs/{claimed}/")
    card(other, claimed).get_by_role("button", name=re.compile("^I'm on it")).click()
    expect(card(other, claimed).locator(".claim")).to_contain_text("You are on this call")

    page = pages.open(ADMIN, width=1400, height=900)
    visit(page, "/agents/finance/?sort=newest")
    for run_id in [*voted, mine, claimed]:
        page.locator(f"#run-{run_id} input.bulk-select").check()
    page.get_by_role("button", name="Review selected…").click()
    expect(page).to_have_url(re.compile(r"/batches/\d+/$"))

    rules = page.locator(".batch-rules li")
    expect(rules).to_have_text(
        [
            "2 will get your vote, 1 of 2: nothing runs yet · $2,500.00",
            f"1 claimed by {REVIEWER.username}: not decided in bulk · $1,250.00",
            "1 you started: separation of duties, cannot approve · $1,250.00",
        ]
    )
    expect(page.locator(".batch-total")).to_have_text("In all: $5,000.00")
    docs_screenshot(page, "bulk-preview.png")
