"""A card decided by someone else while it is open says so at once, and nothing typed is lost."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import REVIEWER, Pages, RunRequest, Server, unique
from tests.e2e.test_reviewer_safety import card, visit
from tests.support.card_rows import APPROVE, DECLINE, declining

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


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
