"""An escalated call as its target sees it: a refund nobody answered in time moves to "Support
leads"; a lead (``manage.py grant --escalation``, no decide permission) lands on the overview that
says so, opens the call from it and approves it. Takes docs/screenshots/escalated.png
(``docs_screenshot``)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import Login, Pages, RunRequest, Server, docs_screenshot, unique
from tests.e2e.test_reviewer_safety import card, visit
from tests.support.card_rows import APPROVE

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

GROUP = "Support leads"
LEAD = Login("lena", "lena-leads-e2e")


def test_an_escalated_call_reaches_its_group_who_decides_it(pages: Pages, server: Server) -> None:
    thread = unique("escalated")
    # One call for everyone (no deadline), one that nobody answers within two seconds.
    (run_id,) = server.start_runs(RunRequest("support", "Please refund $85.00 on A-1042, it broke", thread))
    printed = server.manage(
        "run_agent",
        "support",
        "Please refund $890.00 on A-1044, it never arrived",
        "--thread",
        thread,
        "--expires-after",
        "2",
        "--on-expiry",
        "escalate",
        "--escalate-to",
        GROUP,
    )
    assert "status: suspended" in printed
    escalated_run = _escalated_run(server, thread)
    server.manage(
        "shell",
        "--command",
        "from django.contrib.auth import get_user_model\n"
        f"get_user_model().objects.create_user({LEAD.username!r}, password={LEAD.password!r},"
        " first_name='Lena', last_name='Okafor')\n",
    )
    printed = server.manage("grant", LEAD.username, "--escalation", GROUP)
    assert f"{LEAD.username} added to: {GROUP}" in printed

    page = pages.open(LEAD, width=1400)
    visit(page, "/")
    escalated = page.get_by_role("link", name="Escalated to you (1)")
    expect(escalated).to_be_visible()
    escalated.click()
    page.wait_for_url(re.compile(r"/queue/$"))
    expect(page.locator(f'.run-card[data-run-id="{escalated_run}"]')).to_have_count(1)
    expect(page.locator(f'.run-card[data-run-id="{run_id}"]')).to_have_count(0)  # not theirs

    visit(page, f"/runs/{escalated_run}/")
    shown = card(page, escalated_run)
    expect(shown.locator(".chip-deadline")).to_have_text("escalated to Support leads")
    approve = shown.get_by_role("button", name=APPROVE)
    expect(approve).to_have_accessible_name("Approve Refund $890.00 · A-1044")
    docs_screenshot(page, "escalated.png")

    approve.click()
    expect(page.locator(f"#run-{escalated_run}")).to_contain_text(f"{LEAD.username} approved issue_refund")


def _escalated_run(server: Server, thread: str) -> str:
    """The run of ``thread`` once the server's sweep escalated its call (it sweeps every second)."""
    code = (
        "import time\n"
        "from approvals.models import ParkedCallRecord\n"
        "for _ in range(150):\n"
        f"    calls = ParkedCallRecord.objects.filter(run__thread_id={thread!r}, escalated_to={GROUP!r})\n"
        "    found = calls.values_list('run__run_id', flat=True).first()\n"
        "    if found is not None:\n"
        "        print('escalated:', found)\n"
        "        break\n"
        "    time.sleep(0.2)\n"
    )
    printed = server.manage("shell", "--command", code)
    found = re.search(r"escalated: (\S+)", printed)
    assert found, f"the call was not escalated: {printed}"
    return found.group(1)
