"""The record in a real browser: a run decided to the end and opened from its audit row, the audit
log's filters and presets, and times in the viewer's time zone.

Screenshots of the finished run's record and of the audit log, at 1400 px and 390 px wide, are saved
under ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import ADMIN, Pages, RunRequest, Server, screenshot, unique
from tests.support.card_rows import APPROVE, DECLINE, declining

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
WIDTHS = (1400, 390)
#: Vendored axe-core, injected as an init script (the browser's, so the page's CSP does not apply).
AXE = Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"
SERIOUS = """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
  .filter((v) => v.impact === "serious" || v.impact === "critical")
  .map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`)"""


def shoot(page: Page, name: str) -> None:
    """Full-page screenshots at each width (no horizontal scroll, no serious axe-core violation at
    either), then back to the test's own viewport."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), (name, width)
        if AXE.exists():
            assert page.evaluate(SERIOUS) == [], (name, width)
        screenshot(page, SCREENSHOTS / f"{name}-{width}.png")
    if size:
        page.set_viewport_size(size)


def query(page: Page) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


def test_a_run_decided_to_the_end_is_opened_from_its_audit_row_as_a_permanent_record(
    pages: Pages, server: Server
) -> None:
    thread = unique("record")
    (run_id,) = server.start_runs(
        RunRequest("support", "Please refund $92.00 on order A-1042, it broke.", thread, "dana")
    )
    page = pages.open()
    page.context.add_init_script(path=AXE)
    page.goto(f"/runs/{run_id}/", wait_until="networkidle")
    page.locator(f"#run-{run_id}").get_by_role("button", name=APPROVE).click()
    expect(page.locator(f"#run-{run_id} .outcome")).to_contain_text("Completed")

    page.goto(f"/audit/?q={run_id}", wait_until="networkidle")
    rows = page.locator(".audit-row")
    expect(rows).to_have_count(1)
    row = rows.first
    expect(row.locator(".c-outcome")).to_be_visible()  # the outcome, without opening the row
    expect(row.locator(".c-outcome")).to_have_text("Completed")
    # The call as its card read it (the tool's title of the arguments), not the tool's bare name.
    expect(row.locator(".c-tool")).to_have_text(re.compile(r"^Refund \$\d+\.\d\d · A-1042$"))
    expect(row.get_by_role("link", name="Open the run's record")).to_be_hidden()
    row.locator("summary").click()
    expect(row.locator(".audit-details")).to_contain_text(thread)
    row.get_by_role("link", name="Open the run's record").click()

    expect(page).to_have_url(server.url(f"/runs/{run_id}/"))
    record = page.locator(f"#run-{run_id}.run-record")
    expect(record.get_by_role("heading", name="Run record")).to_contain_text("Completed")
    crumbs = page.get_by_role("navigation", name="Breadcrumb")
    expect(crumbs.get_by_role("link", name="Support")).to_have_attribute("href", "/agents/support/")
    transcript = record.locator(".transcript")
    expect(transcript.locator(".msg-user")).to_contain_text("Please refund $92.00 on order A-1042")
    refund_call = transcript.locator(".msg-tool-call", has_text="issue_refund")
    expect(refund_call).to_contain_text('"amount_cents": 9200')
    decision = refund_call.locator(".decision")
    expect(decision).to_contain_text(f"{ADMIN.username} approved issue_refund")
    expect(decision).to_contain_text("Completed")
    expect(transcript.locator(".msg-tool-result", has_text="Refunded $92.00")).to_have_count(1)
    expect(record.locator(".final-text")).to_contain_text("Refunded $92.00 on A-1042")
    shoot(page, "run-record")


def test_audit_filters_are_choices_and_dates_have_presets(pages: Pages, server: Server) -> None:
    thread = unique("audit-filters")
    refund_id, deploy_id = server.start_runs(
        RunRequest("support", "Please refund $82.00 on order A-1042.", thread, "lee"),
        RunRequest("ops", "Please deploy billing to staging.", thread, "lee"),
    )
    page = pages.open()
    page.context.add_init_script(path=AXE)
    for run_id in (refund_id, deploy_id):
        page.goto(f"/runs/{run_id}/", wait_until="networkidle")
        declining(page.locator(f"#run-{run_id}")).get_by_role("button", name=DECLINE).click()
        expect(page.locator(f"#run-{run_id} .outcome")).to_be_visible()

    page.goto("/audit/", wait_until="networkidle")
    page.evaluate("window.e2eSamePage = true")
    expect(page.get_by_label("Agent")).to_have_js_property("tagName", "SELECT")
    page.get_by_label("Tool").select_option("issue_refund")
    page.get_by_label("Run, thread or resource").fill(thread)
    page.get_by_role("button", name="Filter").click()

    expect(page).to_have_url(re.compile(r"[?&]tool=issue_refund(&|$)"))
    expect(page.locator(".audit-row")).to_have_count(1)
    expect(page.locator(".audit-row .c-tool")).to_have_text(re.compile(r"^Refund \$\d+\.\d\d · A-1042$"))
    assert page.evaluate("window.e2eSamePage") is True  # swapped in place
    export = page.get_by_role("link", name="Export CSV").get_attribute("href") or ""
    assert "tool=issue_refund" in export and f"q={thread}" in export

    page.get_by_role("link", name="Last 7 days").click()
    expect(page.get_by_role("link", name="Last 7 days")).to_have_attribute("aria-current", "true")
    dates = query(page)
    assert dates["from"][0] < dates["to"][0] and dates["tool"] == ["issue_refund"]
    expect(page.get_by_label("From")).to_have_value(dates["from"][0])
    expect(page.locator(".audit-row")).to_have_count(1)
    page.get_by_role("link", name="Today").click()
    expect(page.locator(".audit-row")).to_have_count(1)

    page.goto(f"/audit/?q={thread}", wait_until="networkidle")
    expect(page.locator(".audit-row")).to_have_count(2)
    shoot(page, "audit-log")


def test_times_show_in_the_browsers_zone_with_utc_on_hover_and_the_profile_menu_changes_it(
    pages: Pages, server: Server
) -> None:
    tz_run = RunRequest("support", "Please refund $95.00 on order A-1042.", unique("tz"), "tz")
    (run_id,) = server.start_runs(tz_run)
    page = pages.open(timezone_id="America/New_York")
    page.clock.install()  # time flows as usual until the test moves it on
    page.goto("/", wait_until="networkidle")  # the first page tells the server the browser's zone
    page.goto(f"/runs/{run_id}/", wait_until="networkidle")

    expect(page.locator("body")).to_have_attribute("data-time-zone", "America/New_York")  # told by time.js
    # The call's "waiting" time: relative, its title the local time and zone, then UTC.
    waiting = page.locator(f"#run-{run_id} .call-meta time[data-relative]")
    expect(waiting).to_have_text(re.compile(r"^(just now|\d+ min)$"))
    stamp = re.compile(r"^(\d{4}-\d\d-\d\d (\d\d):\d\d:\d\d) (\w+) · UTC \d{4}-\d\d-\d\d (\d\d):\d\d:\d\d$")
    expect(waiting).to_have_attribute("title", stamp)
    local = stamp.match(waiting.get_attribute("title") or "")
    assert local is not None and local.group(3) in ("EST", "EDT")
    assert (int(local.group(2)) - int(local.group(4))) % 24 in (19, 20)  # UTC-5 (EST) or UTC-4 (EDT)
    utc = (waiting.get_attribute("title") or "").split(" · ")[1]

    page.locator(".profile-menu summary").click()
    page.get_by_label("Time zone").select_option("Asia/Tokyo")
    page.get_by_role("button", name="Save").click()

    expect(page).to_have_url(server.url(f"/runs/{run_id}/"))
    expect(page.locator(".profile-menu summary")).to_have_text("Times: Tokyo")
    expect(waiting).to_have_attribute("title", re.compile(rf" JST · {re.escape(utc)}$"))  # the same moment

    # Relative times tick without a reload.
    page.wait_for_load_state("networkidle")
    expect(waiting).to_have_text(re.compile(r"^(just now|1 min)$"))
    page.clock.fast_forward("03:00")
    expect(waiting).to_have_text(re.compile(r"^[34] min$"))
