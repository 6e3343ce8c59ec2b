"""Standing grants in a real browser: "approve and allow" on a card lets the next call in the thread
through without anyone; revoking it on the grants page makes the one after wait again."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import ADMIN, Pages, RunRequest, Server, unique
from tests.e2e.test_reviewer_safety import card, visit

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

REFUND = "Refund $77.00 on A-1042, it broke."


def status_of_new_run(server: Server, thread: str) -> str:
    printed = dict(
        line.split(": ", 1)
        for line in server.manage("run_agent", "support", REFUND, "--thread", thread).splitlines()
        if line.startswith(("run_id:", "status:"))
    )
    return printed["status"]


def test_approve_and_allow_then_revoke(pages: Pages, server: Server) -> None:
    thread = unique("grant")
    (run_id,) = server.start_runs(RunRequest("support", REFUND, thread))
    page = pages.open(ADMIN)
    visit(page, f"/runs/{run_id}/")

    terms = card(page, run_id).locator("details.grant-terms")
    terms.locator("summary").click()
    expect(terms.get_by_label("Allow this tool for")).to_have_value("thread")
    terms.get_by_label("At most this many calls").fill("5")
    terms.get_by_role("button", name="and allow similar calls").click()

    outcome = card(page, run_id).locator(".outcome")
    expect(outcome).to_contain_text("Completed")
    expect(outcome.locator(".grant-note")).to_contain_text("issue_refund for this thread, 5 uses")
    # The next refund in that thread is approved as it parks: it never waits.
    assert status_of_new_run(server, thread) == "success"

    visit(page, "/grants/")
    row = page.locator("tr", has_text=thread)
    expect(row).to_contain_text("1 of 5")
    row.get_by_role("button", name="Revoke").click()

    expect(page.locator("ul.messages")).to_contain_text("is revoked")
    assert status_of_new_run(server, thread) == "suspended"
