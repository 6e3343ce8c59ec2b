"""A refund edited in dollars in a real browser: the card's form shows the model's $99.00, the reviewer
types 40, the tool refunds $40.00, and the outcome shows the change struck and marked.

The run comes from the demo ``support`` agent (scripted model), whose ``issue_refund`` holds
``amount_cents`` as money in cents.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import ADMIN, Pages, RunRequest, Server, screenshot, unique
from tests.support.card_rows import expanded

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]


def test_typing_40_in_the_amount_approves_40_dollars_and_shows_the_diff(
    pages: Pages, server: Server, artifacts_dir: Path
) -> None:
    thread = unique("money")
    (run_id,) = server.start_runs(
        RunRequest("support", "Please refund $99.00 on order A-1042, it broke.", thread, "dana")
    )
    page = pages.open()
    page.goto(f"/agents/support/?thread={thread}", wait_until="networkidle")
    card = expanded(page.locator(f"#run-{run_id}"))

    card.get_by_text("Edit arguments", exact=True).click()
    form = card.locator("form.edit-args-fields")
    amount = form.get_by_label("Amount")
    expect(amount).to_have_value("99.00")  # dollars, not 9900 cents
    expect(form.locator(".input-unit .unit")).to_have_text("$")
    expect(amount).to_have_accessible_description("In USD, e.g. 40 or 40.50.")

    amount.fill("40.505")  # a fraction of a cent: refused, nothing decided
    form.get_by_role("button", name="with these arguments").click()
    amount = page.locator(f"#run-{run_id} form.edit-args-fields").get_by_label("Amount")
    expect(amount).to_have_attribute("aria-invalid", "true")
    expect(amount).to_have_accessible_description(
        "In USD, e.g. 40 or 40.50. USD amounts have at most 2 decimals: enter e.g. $40.50."
    )

    amount.fill("40")
    screenshot(page, artifacts_dir / "money-edit.png")
    page.locator(f"#run-{run_id} form.edit-args-fields").get_by_role(
        "button", name="with these arguments"
    ).click()

    outcome = page.locator(f"#run-{run_id} .outcome")
    expect(outcome).to_contain_text(f"{ADMIN.username} approved issue_refund with edited arguments")
    expect(outcome.locator(".final-text")).to_contain_text("Refunded $40.00 on A-1042")
    diff = outcome.locator(".args-diff")
    expect(diff.locator("del.diff-old")).to_have_text("The model's: $99.00")
    expect(diff.locator("ins.diff-new")).to_have_text("Approved: $40.00")
    # Struck and marked by the stylesheet (classes, no inline styles under the strict CSP).
    assert "line-through" in diff.locator("del.diff-old").evaluate(
        "e => getComputedStyle(e).textDecorationLine"
    )
    screenshot(page, artifacts_dir / "money-diff.png")
