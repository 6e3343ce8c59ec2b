"""Deadlines in the browser: the countdown ticks from the server's seconds, and an expiry reaches an
open page live (the server's sweep expires it; nobody reloads)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import Pages, RunRequest, Server, unique
from tests.e2e.test_reviewer_safety import card, visit
from tests.support.card_rows import APPROVE

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

SECONDS_LEFT = re.compile(r"^(\d+) min (\d+) s left$")


def _seconds(text: str) -> int:
    found = SECONDS_LEFT.match(text.strip())
    assert found, text
    return int(found.group(1)) * 60 + int(found.group(2))


def test_the_card_counts_down_to_its_deadline(pages: Pages, server: Server) -> None:
    thread = unique("countdown")
    (run_id,) = server.start_runs(
        RunRequest("support", "Refund $85.00 on A-1042, it broke.", thread, expires_after=240)
    )
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}")
    chip = page.locator(f"#run-{run_id} .chip-deadline .countdown")
    expect(chip).to_have_text(SECONDS_LEFT)
    first = _seconds(chip.inner_text())
    assert 180 < first <= 240
    # Due within five minutes: it stands out.
    expect(page.locator(f"#run-{run_id} .chip-deadline")).to_have_class(re.compile(r"\bis-due-soon\b"))

    page.wait_for_timeout(2500)

    assert first - 4 <= _seconds(chip.inner_text()) <= first - 2


def test_an_expiry_reaches_an_open_page_live(pages: Pages, server: Server) -> None:
    thread = unique("expiry-live")
    (run_id,) = server.start_runs(
        RunRequest("support", "Refund $85.00 on A-1042, it broke.", thread, expires_after=600)
    )
    page = pages.open()
    visit(page, f"/runs/{run_id}/")
    expect(card(page, run_id).get_by_role("button", name=APPROVE)).to_be_enabled()
    server.pass_deadline(run_id)

    # No reload: the server's sweep expires the call and the page hears of it.
    expect(page.get_by_text(re.compile(r"Expired"))).not_to_have_count(0)
    expect(page.get_by_role("button", name=APPROVE)).to_have_count(0)
    expect(page.get_by_text("No reviewer answered within 10 minutes").first).to_be_visible()
