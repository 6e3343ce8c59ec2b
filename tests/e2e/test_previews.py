"""A demo refund's preview on its card (the store's balance before and after), and an approval refused
because the call's arguments changed after the card was shown: the fresh card comes back in place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import Pages, RunRequest, Server, screenshot, unique
from tests.e2e.test_reviewer_safety import card, visit
from tests.support.card_rows import APPROVE

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

#: Changes the parked call's arguments behind the card's back (as another process editing the call).
CHANGE_ARGS = """
from approvals.models import ParkedCallRecord
call = ParkedCallRecord.objects.get(run__run_id={run_id}, tool_name="issue_refund")
call.args = {{**call.args, "amount_cents": 95000}}
call.save(update_fields=["args"])
"""


def test_a_refunds_preview_is_on_its_card_and_a_stale_card_decides_nothing(
    pages: Pages, server: Server, artifacts_dir: Path
) -> None:
    thread = unique("preview")
    (run_id,) = server.start_runs(RunRequest("support", "Please refund $890.00 on order A-1044.", thread))
    page = pages.open()
    visit(page, f"/runs/{run_id}/")
    shown = card(page, run_id)

    preview = shown.locator("section.preview")
    expect(preview.locator(".preview-sentence")).to_have_text(
        "$890.00 goes back to sam@example.com for order A-1044."
    )
    balance = preview.locator("tbody tr").first
    expect(balance.locator("th")).to_have_text("Store balance")
    expect(balance.locator(".preview-before")).to_have_text("$12,500.00")
    expect(balance.locator(".preview-after")).to_have_text("$11,610.00")
    screenshot(page, artifacts_dir / "preview-card.png")

    server.manage("shell", "-c", CHANGE_ARGS.format(run_id=json.dumps(run_id)))
    shown.get_by_role("button", name=APPROVE).click()

    fresh = page.locator(f"#run-{run_id}")
    expect(fresh.locator(".notice")).to_contain_text("The call changed since you saw it")
    expect(fresh.locator(".preview-sentence")).to_have_text(
        "$890.00 goes back to sam@example.com for order A-1044."
    )
    expect(fresh.locator(".arg-money dd")).to_have_text("$950.00")
    expect(fresh.locator(".outcome")).to_have_count(0)
    screenshot(page, artifacts_dir / "preview-stale.png")
