"""Every page at a desk's width (1400 px) and a phone's (390 px): no horizontal scroll on the phone,
no serious accessibility violation (axe-core, vendored under tests/e2e/vendor/), a focus ring that
stands out (3:1 against the page), and a screenshot of each under test-artifacts/screenshots/.

axe is evaluated through the DevTools protocol (``page.evaluate``), which the page's strict CSP does
not govern, so the page runs under the same policy as for a reviewer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import ADMIN, Pages, RunRequest, Server, screenshot, unique

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

AXE = Path(__file__).with_name("vendor") / "axe-core" / "axe.min.js"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
WIDTHS = (1400, 390)
#: Impacts that fail a page; "minor" and "moderate" ones are printed, not failed.
FAILING_IMPACTS = {"serious", "critical"}

AXE_RUN = """async () => {
  const results = await axe.run(document, {resultTypes: ["violations"]});
  return results.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ")),
  }));
}"""

#: The contrast of the focus ring of whatever has focus against the page behind it (WCAG 2 ratio).
FOCUS_RING_CONTRAST = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  const rgb = (text) => text.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => {
    const ch = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * ch(r) + 0.7152 * ch(g) + 0.0722 * ch(b);
  };
  let back = [255, 255, 255];
  for (let node = el.parentElement; node; node = node.parentElement) {
    const bg = rgb(getComputedStyle(node).backgroundColor);
    if (bg.length < 4 || bg[3] > 0) { back = bg.slice(0, 3); break; }
  }
  let ring = rgb(style.outlineColor);
  if (ring.length === 4) {  // blend a translucent ring over what is behind it
    ring = ring.slice(0, 3).map((c, i) => c * ring[3] + back[i] * (1 - ring[3]));
  }
  const [a, b] = [lum(ring), lum(back)].sort((x, y) => y - x);
  return {style: style.outlineStyle, width: parseFloat(style.outlineWidth), ratio: (a + 0.05) / (b + 0.05)};
}"""


def check_page(page: Page, name: str, width: int) -> list[str]:
    """What is wrong with the page as it is now; saves its screenshot."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    screenshot(page, SCREENSHOTS / f"page-{name}-{width}.png")
    problems = []
    if width < 500:
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        if overflow > 0:
            problems.append(f"{name} at {width} px scrolls sideways by {overflow} px")
    page.evaluate(AXE.read_text())
    violations: list[dict[str, Any]] = page.evaluate(AXE_RUN)
    for v in violations:
        line = f"{name} at {width} px: axe {v['impact']} {v['id']} ({v['help']}) at {v['nodes']}"
        if v["impact"] in FAILING_IMPACTS:
            problems.append(line)
        else:
            print(line)
    return problems


@pytest.fixture(scope="module")
def waiting_run(server: Server) -> str:
    (run_id,) = server.start_runs(
        RunRequest("support", "Refund $890.00 on A-1044, never arrived.", unique("layout"), "sam")
    )
    return run_id


@pytest.fixture(scope="module")
def decided_run(server: Server) -> str:
    """A run to approve to its end in the first test that needs it (its record is a page too)."""
    (run_id,) = server.start_runs(
        RunRequest("support", "Refund $75.00 on A-1043, wrong size.", unique("layout-done"), "lee")
    )
    return run_id


def finish(page: Page, run_id: str) -> None:
    page.goto(f"/runs/{run_id}/", wait_until="networkidle")
    approve = page.locator(f"#run-{run_id}").get_by_role("button", name="Approve", exact=True)
    if approve.count():
        approve.first.click()
        expect(page.locator(f"#run-{run_id} .outcome")).to_be_visible()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_fits_the_screen_and_passes_axe(
    pages: Pages, server: Server, waiting_run: str, decided_run: str, width: int
) -> None:
    page = pages.open(ADMIN, width=width, height=900)
    finish(page, decided_run)
    # A token listed on its page (a table that must fit a phone too).
    page.goto("/account/api-tokens/", wait_until="networkidle")
    page.locator("form [name=name]").fill(f"layout check at {width} px, a name long enough to wrap")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#new-token")).to_be_visible()
    problems: list[str] = []
    for name, path in (
        ("queue", "/"),
        ("overview", "/agents/"),
        ("inbox", "/agents/support/"),
        ("run-waiting", f"/runs/{waiting_run}/"),
        ("run-finished", f"/runs/{decided_run}/"),
        ("audit", "/audit/"),
        ("new-run", "/runs/new/"),
        ("api-tokens", "/account/api-tokens/"),
    ):
        response = page.goto(path, wait_until="networkidle")
        assert response is not None and response.status < 400, (path, response and response.status)
        problems += check_page(page, name, width)
    login = pages.open(None, width=width, height=900)
    login.goto("/accounts/login/")
    problems += check_page(login, "login", width)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", ["/agents/support/", "/audit/"])
def test_on_a_phone_the_filters_wait_behind_their_button(pages: Pages, path: str) -> None:
    page = pages.open(ADMIN, width=390, height=800)
    page.goto(path, wait_until="networkidle")
    button = page.locator("summary.filter-toggle")
    fields = page.locator("form.filters")
    expect(fields).to_be_hidden()
    button.click()
    expect(fields).to_be_visible()
    wide = pages.open(ADMIN, width=1400)
    wide.goto(path, wait_until="networkidle")
    expect(wide.locator("form.filters")).to_be_visible()
    expect(wide.locator("summary.filter-toggle")).to_be_hidden()


def test_after_an_error_focus_is_on_the_first_invalid_field(pages: Pages, server: Server) -> None:
    (run_id,) = server.start_runs(
        RunRequest("support", "Refund $77.00 on A-1042, it broke.", unique("invalid-focus"), "dana")
    )
    page = pages.open(ADMIN, width=1400)
    page.goto(f"/runs/{run_id}/", wait_until="networkidle")
    card = page.locator(f"#run-{run_id}")
    card.get_by_text("Edit arguments", exact=True).click()
    card.locator("form.edit-args-fields [name='args-order_id']").fill("")  # required
    card.locator("form.edit-args-fields button[type=submit]").click()
    invalid = card.locator("form.edit-args-fields [aria-invalid='true']").first
    expect(invalid).to_be_focused()
    expect(card.locator("form.edit-args-fields .field-errors").first).to_be_visible()


def test_the_focus_ring_stands_out_from_the_page(pages: Pages, waiting_run: str) -> None:
    page = pages.open(ADMIN, width=1400)
    page.goto(f"/runs/{waiting_run}/", wait_until="networkidle")
    approve = page.get_by_role("button", name="Approve").first
    expect(approve).to_be_visible()
    approve.focus()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")  # focus by keyboard, so :focus-visible applies
    ring = page.evaluate(FOCUS_RING_CONTRAST)
    assert ring["style"] != "none" and ring["width"] >= 2, ring
    assert ring["ratio"] >= 3, ring
