"""A card decided by someone else while it is open says so at once, and nothing typed is lost."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import REVIEWER, Pages, RunRequest, Server, unique
from tests.e2e.test_reviewer_safety import card, visit

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_call_decided_elsewhere_says_who_and_disables_its_buttons_keeping_the_typed_reason(
    pages: Pages, server: Server
) -> None:
    thread = unique("decided-elsewhere")
    (run_id,) = server.start_runs(RunRequest("support", "Refund $85.00 on A-1042, it broke.", thread))
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}")
    mine = card(page, run_id)
    reason = mine.get_by_label("Reason")
    if not reason.is_visible():
        mine.get_by_role("button", name="Decline…").click()
    reason.fill("Half-written: the order total does not match")

    other = pages.open(REVIEWER)
    visit(other, f"/runs/{run_id}/")
    card(other, run_id).get_by_role("button", name="Approve", exact=True).click()
    expect(card(other, run_id).locator(".outcome")).to_be_visible()

    note = mine.locator(".decided-note")
    expect(note).to_contain_text(f"Approved by {REVIEWER.username}")
    expect(mine.get_by_role("button", name="Approve", exact=True)).to_be_disabled()
    expect(mine.get_by_role("button", name="Decline", exact=True)).to_be_disabled()
    expect(reason).to_have_value("Half-written: the order total does not match")
