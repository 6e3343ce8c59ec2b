"""Undo in a real browser: a call approved from the queue with the keyboard folds to "Approved by
you · Undo" with its seconds counting down; Undo brings the card back undecided (nothing ran), and a
decision left alone is taken by the server when its window ends. The screenshot
docs/screenshots/undo.png shows the held line."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import Pages, RunRequest, Server, docs_screenshot, serving, unique
from tests.e2e.test_keys_and_bulk import QUIET, current_call, visit

# The module's tests share its server: one worker runs them all, so it is started once, not once per
# worker.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("test_undo"), pytest.mark.own_sqlite]

#: Long enough for a browser to click Undo on a busy machine, short enough to wait out once.
UNDO_SECONDS = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of this module's own: decisions held for Undo (the suite's take them at once)."""
    with serving(tmp_path_factory, DECISION_UNDO_SECONDS=str(UNDO_SECONDS)) as served:
        yield served


def approve_with_the_keyboard(page: Page, run_id: str) -> None:
    call = current_call(page)
    expect(page.locator(f"#{call} .call-body-lazy")).to_have_count(0)
    expect(page.locator(f"#{call} button.approve")).to_be_in_viewport()
    page.wait_for_function(QUIET)
    page.keyboard.press("a")
    line = page.locator(f'.run-card[data-run-id="{run_id}"] .outcome-line')
    expect(line).to_contain_text("Approved by you", timeout=5000)


def test_approve_with_the_keyboard_then_undo_brings_the_card_back(pages: Pages, server: Server) -> None:
    prefix = unique("undo")
    first, second = server.start_runs(
        RunRequest("support", "Refund $89.00 on A-2044, broken.", f"{prefix}-1"),
        RunRequest("support", "Refund $75.00 on A-2045, broken.", f"{prefix}-2"),
    )
    page = pages.open(width=1400, height=900)
    visit(page, f"/queue/?thread={prefix}")
    page.locator(".skip-link").focus()
    page.keyboard.press("Enter")
    ordered = [str(page.locator(".run-card").nth(i).get_attribute("data-run-id")) for i in range(2)]
    assert sorted(ordered) == sorted([first, second])

    approve_with_the_keyboard(page, ordered[0])

    held = page.locator(f'.run-card[data-run-id="{ordered[0]}"] .outcome-line')
    undo = held.get_by_role("button", name="Undo")
    expect(undo).to_be_visible()
    expect(held.locator(".undo-left")).to_have_text(re.compile(rf"^[1-{UNDO_SECONDS}] s$"))
    docs_screenshot(page, "undo.png")

    undo.click()

    card = page.locator(f'.run-card[data-run-id="{ordered[0]}"]')
    expect(card.get_by_role("button", name="Approve", exact=False).first).to_be_visible()
    expect(card.locator(".outcome-line")).to_have_count(0)
    # Nothing was decided: after the window the call still waits, on a fresh page too.
    page.wait_for_timeout((UNDO_SECONDS + 2) * 1000)
    visit(page, f"/queue/?thread={prefix}")
    expect(page.locator(".run-card .call")).to_have_count(2)
    expect(page.locator(".outcome-line")).to_have_count(0)


def test_a_decision_left_alone_is_taken_when_its_window_ends(pages: Pages, server: Server) -> None:
    prefix = unique("undo-kept")
    (run_id,) = server.start_runs(RunRequest("support", "Refund $65.00 on A-3001, broken.", prefix))
    page = pages.open(width=1400, height=900)
    visit(page, f"/queue/?thread={prefix}")
    page.locator(".skip-link").focus()
    page.keyboard.press("Enter")

    approve_with_the_keyboard(page, run_id)

    line = page.locator(f'.run-card[data-run-id="{run_id}"] .outcome-line')
    expect(line.get_by_role("button", name="Undo")).to_have_count(0, timeout=(UNDO_SECONDS + 3) * 1000)
    expect(line).to_contain_text("Approved by you")
    # Taken by the server (its sweep), whatever the page does: the queue has nothing left for it.
    page.wait_for_timeout(2000)
    visit(page, f"/queue/?thread={prefix}")
    expect(page.locator("#run-list")).to_contain_text("Nothing waits for you here")
    visit(page, f"/runs/{run_id}/")
    expect(page.locator("body")).to_contain_text("Refunded $65.00 on A-3001")
