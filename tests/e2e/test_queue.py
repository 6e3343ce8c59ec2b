"""My queue in a real browser: twenty calls of two agents cleared from it with the keyboard alone,
page after page (j past the last call brings the next page), each decided call folded to one line
in place; axe-core at a desk's and a phone's width; the screenshot docs/screenshots/queue.png.
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import Pages, RunRequest, Server, docs_screenshot, unique
from tests.e2e.test_keys_and_bulk import QUIET, current_call, visit
from tests.e2e.test_layout_and_accessibility import check_page

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

#: Calls per page: twenty take three pages.
PER_PAGE = 8


def approve_current(page: Page) -> int:
    """``a`` on the current call until it is decided (a key pressed while a live refetch replaces the
    list does nothing, by design: pressed again, as a reviewer would); how many keys that took."""
    call = current_call(page)
    run_card = page.locator(f"#{call}").locator("xpath=ancestor::article[contains(@class, 'run-card')]")
    run_id = run_card.get_attribute("data-run-id")
    # As a reviewer reads it: the call's body in, its Approve button in sight.
    expect(page.locator(f"#{call} .call-body-lazy")).to_have_count(0)
    expect(page.locator(f"#{call} button.approve")).to_be_in_viewport()
    page.wait_for_function(QUIET)
    for presses in range(1, 6):
        page.keyboard.press("a")
        try:
            expect(page.locator(f'.run-card[data-run-id="{run_id}"] .outcome-line')).to_contain_text(
                "Approved by you", timeout=1000
            )
            return presses
        except AssertionError:
            page.wait_for_function(QUIET)
    raise AssertionError(f"{call} was not approved after 5 presses of a")


def test_twenty_calls_of_two_agents_cleared_from_the_queue_with_the_keyboard(
    pages: Pages, server: Server
) -> None:
    prefix = unique("queue")
    runs = server.start_runs(
        *(
            RunRequest("support", f"Refund ${60 + n}.00 on A-{1042 + n}, broken.", f"{prefix}-s")
            for n in range(10)
        ),
        *(RunRequest("ops", "deploy billing to staging", f"{prefix}-o") for _ in range(10)),
    )
    # The landing page, narrowed to this test's calls by part of their threads' names.
    path = f"/?thread={prefix}&per_page={PER_PAGE}"
    page = pages.open(width=1400, height=900)
    visit(page, path)
    expect(page.get_by_role("heading", level=1)).to_contain_text("My queue")
    expect(page.locator(".run-card")).to_have_count(PER_PAGE)
    docs_screenshot(page, "queue.png")
    problems = check_page(page, "queue", 1400)
    phone = pages.open(width=390, height=800)
    visit(phone, path)
    problems += check_page(phone, "queue", 390)
    assert not problems, "\n".join(problems)

    agents_seen: set[str] = set()
    decided: list[str] = []
    keys = 0
    started = time.perf_counter()
    page.locator(".skip-link").focus()
    page.keyboard.press("Enter")
    keys += 1
    for n in range(len(runs)):
        call = current_call(page)
        card = page.locator(f"#{call}").locator("xpath=ancestor::article[contains(@class, 'run-card')]")
        agents_seen.add(str(card.get_attribute("data-agent-id")))
        decided.append(str(card.get_attribute("data-run-id")))
        keys += approve_current(page)
        if n < len(runs) - 1:
            page.keyboard.press("j")  # past the last call of a page: the next page, its first call
            keys += 1
    elapsed = time.perf_counter() - started
    print(f"\n20 calls of 2 agents cleared from the queue with the keyboard in {elapsed:.1f} s, {keys} keys")

    assert sorted(decided) == sorted(runs) and agents_seen == {"support", "ops"}
    expect(page.locator("#run-list .call")).to_have_count(0)
    expect(page.locator("#run-list .outcome-line")).not_to_have_count(0)
    expect(page.locator("#run-list a[rel='next']")).to_have_count(0)
    # What is left of the queue for these threads: nothing, and the folded lines pass axe too.
    assert not check_page(page, "queue-cleared", 1400)
    visit(page, path)
    expect(page.locator("#run-list")).to_contain_text("Nothing waits for you here")
