"""The queue in a real browser: a dense row per call that expands in place to the card, its title,
why it waits and its risky chips; declining through "Decline…" with the reason the agent receives.

Saves the screenshots of the inbox and of an expanded card at 1400 px and 390 px under
``test-artifacts/screenshots/``.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import ARTIFACTS
from tests.e2e.conftest import Pages, RunRequest, Server, screenshot, unique
from tests.support.card_rows import APPROVE

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

SCREENSHOTS = ARTIFACTS / "screenshots"


def visit(page: Page, path: str) -> None:
    page.goto(path, wait_until="networkidle")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


def no_horizontal_scroll(page: Page) -> bool:
    return bool(page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth"))


def test_a_row_expands_to_the_card_with_its_title_why_and_chips_and_declines_with_a_reason(
    pages: Pages, server: Server
) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    thread = unique("rows")
    refund, _, deploy = server.start_runs(
        RunRequest("support", "Please refund $890.00 on A-1044, it never arrived", thread, "sam"),
        RunRequest("support", "Write to the customer of A-1042 that the parcel is late", thread, "dana"),
        RunRequest("ops", "deploy search to production", thread, "team-1"),
    )
    page = pages.open()
    page.set_viewport_size({"width": 1400, "height": 1000})

    # Answer the change window first: its follow-up is the production deploy, a risky call.
    visit(page, f"/agents/ops/?thread={thread}")
    window = page.locator(f"#run-{deploy}")
    row = window.locator("summary.call-summary")
    expect(row.get_by_role("heading")).to_have_text("When may we deploy search to production?")
    row.click()
    start = window.get_by_label("Start time")
    expect(start).to_have_attribute("type", "datetime-local")
    expect(window.locator(".tz-note")).to_contain_text("Time zone:")
    start.fill("2026-12-01T22:00")
    window.get_by_label("Risk").select_option("low")
    window.get_by_role("button", name=re.compile(r"^Resume")).click()
    deploy_card = page.locator(f"#run-{deploy}")
    expect(deploy_card.locator(".call-title")).to_have_text("Deploy search v2.4.1 to production")
    expect(deploy_card.locator("summary .chip-risky")).to_have_text("Environment: production")
    expect(deploy_card.locator(".why-answer")).to_contain_text("Answered before: When may we deploy search")
    # Approving it needs "I checked this" (the browser asks first; the server checks too).
    expect(deploy_card.get_by_label("I checked this").first).to_be_visible()
    screenshot(page, SCREENSHOTS / "card-risky-follow-up-1400.png")

    visit(page, f"/agents/support/?thread={thread}")
    refund_card = page.locator(f"#run-{refund}")
    title = refund_card.locator(".call-title")
    expect(title).to_have_text("Refund $890.00 · A-1044")
    expect(refund_card.locator(".call-meta")).to_contain_text(refund)  # the run id is in the meta line
    approve = refund_card.get_by_role("button", name=APPROVE)
    expect(approve).to_be_hidden()  # a dense row until it is opened
    assert no_horizontal_scroll(page)
    screenshot(page, SCREENSHOTS / "inbox-1400.png")

    refund_card.locator("summary.call-summary").click()
    expect(approve).to_be_visible()
    expect(approve).to_have_accessible_name("Approve Refund $890.00 · A-1044")
    why = refund_card.locator(".why")
    expect(why).to_contain_text("Refunds over $50.00 need a human's approval")
    expect(why).to_contain_text("Please refund $890.00 on A-1044, it never arrived")
    expect(why).to_contain_text("Let me look up A-1044 and refund it.")
    expect(why).to_contain_text("Status: shipped")
    expect(why).to_contain_text("Total cents: $890.00")
    expect(refund_card.locator(".arg-money dd")).to_have_text("$890.00")
    screenshot(page, SCREENSHOTS / "card-expanded-1400.png")

    page.set_viewport_size({"width": 390, "height": 900})
    page.wait_for_timeout(100)
    assert no_horizontal_scroll(page)
    screenshot(page, SCREENSHOTS / "card-expanded-390.png")
    refund_card.locator("summary.call-summary").click()  # closes it again
    expect(approve).to_be_hidden()
    screenshot(page, SCREENSHOTS / "inbox-390.png")
    page.set_viewport_size({"width": 1400, "height": 1000})

    # Decline is its own step: "Decline…" reveals the reason the agent receives.
    refund_card.locator("summary.call-summary").click()
    reason = refund_card.get_by_label("Reason for declining (sent to the agent)")
    expect(reason).to_be_hidden()
    refund_card.get_by_text("Decline…", exact=True).click()
    reason.fill("Wait for the carrier's answer")
    refund_card.get_by_role("button", name="Decline Refund $890.00 · A-1044").click()

    outcome = page.locator(f"#run-{refund} .outcome")
    expect(outcome.locator(".verdict")).to_have_text("Declined")
    expect(outcome.locator(".run-next")).to_contain_text("Completed")
    expect(outcome).to_be_focused()


def test_a_rows_body_loads_once_when_opened_and_stays_through_live_refetches(
    pages: Pages, server: Server
) -> None:
    thread = unique("lazy")
    (first,) = server.start_runs(RunRequest("support", "Please refund $890.00 on A-1044", thread, "sam"))
    page = pages.open()
    bodies: list[str] = []
    page.on("request", lambda r: bodies.append(r.url) if f"/runs/{first}/calls/" in r.url else None)
    visit(page, f"/agents/support/?thread={thread}")
    card = page.locator(f"#run-{first}")

    # Folded, the row has no body yet; opening it fetches the body: why it waits, the buttons.
    expect(card.locator(".call-body-lazy")).to_have_count(1)
    card.locator("summary.call-summary").click()
    expect(card.locator(".why")).to_contain_text("The user asked")
    expect(card.get_by_role("button", name=APPROVE)).to_be_enabled()
    card.locator(".call-body").evaluate("(body) => { body.dataset.seen = 'yes'; }")
    # The reviewer looks away (pointer and focus off the list): nothing holds the card as it was.
    page.mouse.move(5, 5)
    page.evaluate("() => document.activeElement.blur()")

    # Another run parks: the list refetches, and the open row keeps the very body it showed.
    with page.expect_response(lambda r: f"/agents/support/?thread={thread}" in r.url):
        server.start_runs(RunRequest("support", "Please refund $89.00 on A-1042", thread, "dana"))
    page.wait_for_load_state("networkidle")
    expect(card.locator("details.call-row")).to_have_attribute("open", "")
    expect(card.locator(".call-body")).to_have_attribute("data-seen", "yes")
    assert len(bodies) == 1, bodies
