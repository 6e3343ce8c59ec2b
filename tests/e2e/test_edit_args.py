"""Approving with edited arguments in a real browser: fix an argument on the card, approve, see it ran.

The run comes from the demo ``support`` agent (scripted model): it asks to refund $99.00, the reviewer
refunds $45.00 instead. The scripted model's final answer repeats the tool's result, which is how the
outcome shows what the tool actually ran with.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import ADMIN, Pages, RunRequest, Server, screenshot, unique
from tests.support.card_rows import APPROVE_JSON, expanded

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]


def visit(page: Page, path: str) -> None:
    """Load a page and wait until its live socket is open and the refetch that follows is done."""
    page.goto(path, wait_until="networkidle")


def test_edit_an_argument_and_approve_runs_the_tool_with_it(
    pages: Pages, server: Server, artifacts_dir: Path
) -> None:
    thread = unique("edit-args")
    (run_id,) = server.start_runs(
        RunRequest("support", "Please refund $99.00 on order A-1042, it broke.", thread, "dana")
    )
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}")
    card = expanded(page.locator(f"#run-{run_id}"))
    field = card.get_by_label("Edited arguments (JSON)")
    expect(field).to_be_hidden()  # folded away until asked for

    card.get_by_text("Edit arguments", exact=True).click()
    expect(card.locator("form.edit-args-fields")).to_be_visible()  # fetched from the run page
    card.get_by_text("Advanced: edit as JSON", exact=True).click()
    expect(field).to_be_visible()
    expect(field).to_have_accessible_description(
        "The tool runs once with these arguments instead of the model's."
    )
    args = json.loads(field.input_value())
    assert args["amount_cents"] == 9900

    # A typo first: refused next to the field, nothing decided, what was typed kept.
    field.fill('{"order_id": "A-1042", amount_cents: 4500}')
    card.get_by_role("button", name=APPROVE_JSON).click()
    field = page.locator(f"#run-{run_id}").get_by_label("Edited arguments (JSON)")
    expect(field).to_have_attribute("aria-invalid", "true")
    expect(field).to_have_accessible_description(
        "The tool runs once with these arguments instead of the model's. "
        "This is not valid JSON: Expecting property name enclosed in double quotes."
    )
    expect(field).to_have_value('{"order_id": "A-1042", amount_cents: 4500}')

    field.fill(json.dumps({**args, "amount_cents": 4500}, indent=2))
    screenshot(page, artifacts_dir / "edit-args.png")
    page.locator(f"#run-{run_id}").get_by_role("button", name=APPROVE_JSON).click()

    outcome = page.locator(f"#run-{run_id} .outcome")
    expect(outcome).to_contain_text("Completed")
    expect(outcome).to_contain_text(f"{ADMIN.username} approved issue_refund with edited arguments")
    expect(outcome).to_contain_text('"amount_cents": 9900')  # the model's, beside
    expect(outcome).to_contain_text('"amount_cents": 4500')  # the reviewer's
    expect(outcome.locator(".final-text")).to_contain_text("issue_refund: Refunded $45.00 on A-1042")
    screenshot(page, artifacts_dir / "edit-args-outcome.png")

    visit(page, f"/runs/{run_id}/")
    row = page.locator("#run-decisions table tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("Approve with edited arguments")
    expect(row).to_contain_text("Completed")
