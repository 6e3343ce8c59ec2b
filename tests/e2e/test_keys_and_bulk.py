"""The reviewer's keyboard, bulk decisions and signals, in a real browser.

- Five calls cleared with the keyboard alone (skip link, j/k, a, d with a reason, e, x, ?), keys
  never typed into nor taken from a field.
- A bulk decision: ticked calls, the preview (screenshots at 1400 and 390 px), Decline all with one
  reason, the batch's progress page finishing live.
- Signals: the tab title's count, a new card highlighted, a notification for a followed agent.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import ARTIFACTS
from tests.e2e.conftest import Pages, RunRequest, Server, screenshot, unique

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

SCREENSHOTS = ARTIFACTS / "screenshots"


def refund(n: int) -> str:
    return f"Refund ${60 + n}.00 on A-{1042 + n}, it arrived broken."


def visit(page: Page, path: str) -> None:
    page.goto(path, wait_until="networkidle")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


def current_call(page: Page) -> str:
    """The id of the call the keys act on (its ring), once there is exactly one."""
    ring = page.locator(".call.is-current")
    expect(ring).to_have_count(1)
    expect(ring).to_be_in_viewport()
    return str(ring.get_attribute("id"))


# Nothing in the page is on its way (htmx marks a request, a swap, a settle: a decision, a row's body,
# a live refetch of the list), and no answer came in the last 300 ms: the live refetches that follow
# a decision (one per event, a burst) are over.
QUIET = """() => {
  if (document.querySelector(".htmx-request, .htmx-swapping, .htmx-settling, .htmx-added")) return false;
  const ends = performance.getEntriesByType("resource").map((entry) => entry.responseEnd);
  return performance.now() - Math.max(0, ...ends) > 300;
}"""


def wait_until_shown(page: Page, call_id: str) -> None:
    """Until the call's row shows its Approve button in view, its body in, and the page is quiet: a
    and x do nothing sooner (they never wait for a body, nor act while a live refetch replaces the
    list)."""
    call = page.locator(f"#{call_id}")
    expect(call.locator("button.approve")).to_be_in_viewport()
    expect(call.locator(".call-body-lazy")).to_have_count(0)
    page.wait_for_function(QUIET)


def test_five_calls_cleared_with_the_keyboard_alone(pages: Pages, server: Server) -> None:
    thread = unique("keys")
    runs = server.start_runs(*(RunRequest("support", refund(n), thread) for n in range(5)))
    page = pages.open()
    page.set_viewport_size({"width": 1280, "height": 700})  # not every card fits: j scrolls
    visit(page, f"/agents/support/?thread={thread}&sort=oldest")
    expect(page).to_have_title("(5) Customer support · Countersign")
    order = [str(page.locator(".run-card").nth(i).get_attribute("data-run-id")) for i in range(5)]
    assert sorted(order) == sorted(runs)

    # ? lists the keys; Esc closes the list.
    page.keyboard.press("?")
    dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Approve the current call")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    # The skip link (first in the page's content) goes to the first call.
    page.locator(".skip-link").focus()
    expect(page.get_by_role("link", name="Skip to the first call")).to_be_focused()
    page.keyboard.press("Enter")
    first = current_call(page)
    assert first.startswith(f"call-{order[0]}-")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    screenshot(page, SCREENSHOTS / "inbox-keyboard-ring-1280.png")

    # 1: a approves, once the row shows what it approves (a pressed sooner does nothing: test_keys_race).
    wait_until_shown(page, first)
    page.keyboard.press("a")
    expect(page.locator(f"#run-{order[0]} .outcome")).to_contain_text("approved")

    # 2: j moves on; d opens the decline with the reason focused; keys typed there are text.
    page.keyboard.press("j")
    assert current_call(page).startswith(f"call-{order[1]}-")
    page.keyboard.press("d")
    reason = page.locator(f"#run-{order[1]} .decline-form [name='reason']")
    expect(reason).to_be_focused()
    page.keyboard.type("Not a duplicate? Ask jake, then decide.")  # a, d, e, j, k, x and ? as text
    expect(reason).to_have_value("Not a duplicate? Ask jake, then decide.")
    expect(page.locator(".outcome")).to_have_count(1)  # nothing else was decided meanwhile
    page.keyboard.press("Tab")  # to Decline
    page.keyboard.press("Enter")
    expect(page.locator(f"#run-{order[1]} .outcome")).to_contain_text("declined")

    # 3: k goes back up past the decided cards to nothing (they have no calls), j comes down again.
    page.keyboard.press("j")
    third = current_call(page)
    assert third.startswith(f"call-{order[2]}-")
    page.keyboard.press("k")
    assert current_call(page) == third  # no waiting call above it any more
    wait_until_shown(page, third)
    page.keyboard.press("x")  # ticked for a bulk decision...
    expect(page.locator(f"#{third} input.bulk-select")).to_be_checked()
    expect(page.locator("#bulk-form .bulk-count")).to_have_text("1 selected")
    page.keyboard.press("x")  # ...and not
    expect(page.locator(f"#{third} input.bulk-select")).not_to_be_checked()
    page.keyboard.press("a")
    expect(page.locator(f"#run-{order[2]} .outcome")).to_contain_text("approved")

    # 4: e opens the argument editor with its field focused; Shift+Tab leaves it, a approves.
    page.keyboard.press("j")
    fourth = current_call(page)
    page.keyboard.press("e")
    editor = page.locator(f"#{fourth} details.edit-args")
    expect(editor).to_have_attribute("open", "")
    fields = editor.locator("form.edit-args-fields :is(input, textarea, select):not([type=hidden])")
    first_field = fields.first
    expect(first_field).to_be_focused()  # the parameters' form, fetched as the row's editor opened
    page.keyboard.press("Shift+Tab")
    expect(page.locator("form.edit-args-fields :focus")).to_have_count(0)
    wait_until_shown(page, fourth)
    page.keyboard.press("a")
    expect(page.locator(f"#run-{order[3]} .outcome")).to_contain_text("approved")

    # 5: modifier keys are the browser's: Ctrl+a does not approve.
    page.keyboard.press("j")
    fifth = current_call(page)
    assert fifth.startswith(f"call-{order[4]}-")
    wait_until_shown(page, fifth)  # (so that a alone would approve)
    page.keyboard.press("Control+a")
    page.wait_for_load_state("networkidle")
    expect(page.locator(f"#run-{order[4]} .outcome")).to_have_count(0)
    page.keyboard.press("a")
    expect(page.locator(f"#run-{order[4]} .outcome")).to_contain_text("approved")

    expect(page.locator(".call")).to_have_count(0)  # cleared
    expect(page).to_have_title("Customer support · Countersign")  # the count follows the list


def test_bulk_decline_previews_then_decides_each_call_and_reports_progress(
    pages: Pages, server: Server
) -> None:
    thread = unique("bulk")
    runs = server.start_runs(*(RunRequest("support", refund(n), thread) for n in range(3)))
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}")
    for run_id in runs[:2]:
        page.locator(f"#run-{run_id} input.bulk-select").check()
    expect(page.locator("#bulk-form .bulk-count")).to_have_text("2 selected")

    page.get_by_role("button", name="Review selected…").click()
    expect(page).to_have_url(re.compile(r"/batches/\d+/$"))
    preview = page.locator("#batch-progress")
    expect(preview).to_contain_text("2 calls of Customer support selected")
    expect(preview.locator(".batch-tool h2").first).to_contain_text("issue_refund")
    # The order ids and amounts differ call by call: their columns show each.
    expect(preview.locator("th", has_text="amount_cents")).to_be_visible()
    expect(preview.locator("th", has_text="order_id")).to_be_visible()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    screenshot(page, SCREENSHOTS / "bulk-preview-1400.png")
    page.set_viewport_size({"width": 390, "height": 844})
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"the preview scrolls sideways at 390 px by {overflow} px"
    screenshot(page, SCREENSHOTS / "bulk-preview-390.png")
    page.set_viewport_size({"width": 1280, "height": 1000})

    page.get_by_label("Reason").fill("Refunds wait for the new policy")
    page.get_by_role("button", name="Decline all 2").click()

    status = page.locator(".batch-status")
    expect(status).to_contain_text("Finished")
    expect(status).to_contain_text("2 done")
    expect(page.locator(".badge.item-decided")).to_have_count(2)
    # The third call was not in the batch: it still waits.
    inbox = pages.open()
    visit(inbox, f"/agents/support/?thread={thread}")
    expect(inbox.locator(".call")).to_have_count(1)
    expect(inbox.locator(f"#run-{runs[2]} .call")).to_have_count(1)


# The browser's Notification API, recorded (the one double: headless Chromium shows none). The
# permission outlives a page load, as the browser's does.
NOTIFICATION_RECORDER = """
window.__notes = [];
window.Notification = class {
  static get permission() { return sessionStorage.getItem("notify") || "default"; }
  static async requestPermission() { sessionStorage.setItem("notify", "granted"); return "granted"; }
  constructor(title, options) { window.__notes.push({ title, body: options.body }); }
  addEventListener() {}
};
"""


def test_title_count_new_card_highlight_and_notifications_for_followed_agents(
    pages: Pages, server: Server
) -> None:
    thread = unique("signals")
    (first,) = server.start_runs(RunRequest("ops", "deploy ledger to staging", thread))
    page = pages.open()
    page.context.add_init_script(script=NOTIFICATION_RECORDER)
    visit(page, f"/agents/ops/?thread={thread}")
    expect(page).to_have_title("(1) Release engineer · Countersign")

    # A new call arrives while the reviewer is elsewhere on the page: highlighted, counted.
    page.mouse.move(5, 5)
    (second,) = server.start_runs(RunRequest("ops", "deploy billing to staging", thread))
    expect(page.locator(f"#run-{second}.is-new")).to_be_visible()
    expect(page).to_have_title("(2) Release engineer · Countersign")
    expect(page.locator(f"#run-{first}.is-new")).to_have_count(0)

    # Follow the agent, turn notifications on, go elsewhere: a new call there notifies.
    page.get_by_role("button", name="Follow").click()
    expect(page.get_by_role("button", name="Following")).to_have_attribute("aria-pressed", "true")
    page.get_by_role("button", name="Enable notifications").click()
    expect(page.get_by_role("button", name="Enable notifications")).to_be_hidden()
    visit(page, "/")
    (third,) = server.start_runs(RunRequest("ops", "deploy search to staging", thread))
    page.wait_for_function("() => window.__notes.length > 0")
    notes = page.evaluate("() => window.__notes")
    assert any(third in note["body"] and "ops" in note["body"] for note in notes), notes
