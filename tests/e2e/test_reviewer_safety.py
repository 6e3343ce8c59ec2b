"""The reviewer's desk never tricks a click: the pointer's target stays, edits show, sign-outs decide nothing.

- A run that parks while the reviewer's pointer (or focus) rests on a card's Approve does not push
  another call's Approve under it: new arrivals wait behind a "N new" pill until asked for.
- The live output of an approval with edited arguments shows the arguments the tool ran with, who
  edited them, and the model's beside them.
- A click after the session ended goes to the login page, says nothing was decided, and decides
  nothing; while the page shows "Signed out" its buttons are disabled.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.conftest import (
    ADMIN,
    REVIEWER,
    Pages,
    RunRequest,
    Server,
    log_in,
    unique,
)
from tests.support.card_rows import APPROVE, APPROVE_JSON, DECLINE, declining, expanded

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

REFUND = "Refund $80.00 on A-1042, it arrived broken."

#: What the pointer (or focus) is on, told by the call it belongs to rather than by element identity.
DESCRIBE = """(el) => el && {
    tag: el.tagName,
    text: (el.textContent || "").trim(),
    call: el.closest(".call") && el.closest(".call").id,
    card: el.closest(".run-card") && el.closest(".run-card").id,
    top: el.getBoundingClientRect().top,
}"""


def card(page: Page, run_id: str) -> Locator:
    return expanded(page.locator(f"#run-{run_id}"))


def visit(page: Page, path: str) -> None:
    """Load a page and wait until its live socket is open and the refetch that follows is done."""
    page.goto(path, wait_until="networkidle")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


def under_pointer(page: Page, x: float, y: float) -> dict[str, Any]:
    described: dict[str, Any] = page.evaluate(
        f"([x, y]) => ({DESCRIBE})(document.elementFromPoint(x, y))", [x, y]
    )
    return described


def focused(page: Page) -> dict[str, Any] | None:
    described: dict[str, Any] | None = page.evaluate(
        f"() => document.activeElement === document.body ? null : ({DESCRIBE})(document.activeElement)"
    )
    return described


def wait_for_arrival(page: Page, run_id: str) -> None:
    """Until the page has heard of the new run: its card is in the page, or the pill counts it."""
    page.wait_for_function(
        """(id) => document.getElementById("run-" + id)
            || [...document.querySelectorAll(".new-pill")].some((pill) => !pill.hidden)""",
        arg=run_id,
    )
    page.wait_for_load_state("networkidle")


def test_a_run_that_parks_does_not_move_another_calls_approve_under_the_pointer(
    pages: Pages, server: Server
) -> None:
    thread = unique("pointer")
    (first,) = server.start_runs(RunRequest("support", REFUND, thread))
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}&sort=newest")
    approve = card(page, first).get_by_role("button", name=APPROVE)
    approve.hover()
    box = approve.bounding_box()
    assert box is not None
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    aimed = under_pointer(page, x, y)
    assert aimed["text"] == "Approve" and aimed["card"] == f"run-{first}", aimed

    # Another process parks a run of the same agent on the same thread: newest first, it belongs
    # above the card under the pointer.
    (second,) = server.start_runs(RunRequest("support", "Refund $120.00 on A-1043, late.", thread))
    wait_for_arrival(page, second)

    assert under_pointer(page, x, y) == aimed  # the same call's Approve, where it was
    pill = page.get_by_role("button", name="1 new call — show")
    expect(pill).to_be_visible()
    expect(card(page, second)).to_have_count(0)

    pill.click()
    expect(card(page, second)).to_be_visible()
    expect(card(page, first)).to_be_visible()
    expect(pill).to_be_hidden()


def test_a_card_decided_elsewhere_above_the_pointer_stays_until_the_pointer_moves_on(
    pages: Pages, server: Server
) -> None:
    thread = unique("gone-above")
    (older,) = server.start_runs(RunRequest("support", REFUND, thread))
    (newer,) = server.start_runs(RunRequest("support", "Refund $140.00 on A-1043, late.", thread))
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}")
    approve = card(page, newer).get_by_role("button", name=APPROVE)  # below the older card (oldest first)
    approve.hover()
    box = approve.bounding_box()
    assert box is not None
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    aimed = under_pointer(page, x, y)
    assert aimed["card"] == f"run-{newer}", aimed

    # Someone else decides the card above: taking it out would slide the newer card (or nothing)
    # under the pointer. It stays, marked, until the pointer moves on.
    other = pages.open(REVIEWER)
    visit(other, f"/runs/{older}/")
    card(other, older).get_by_role("button", name=APPROVE).click()
    expect(card(other, older).locator(".outcome")).to_contain_text("Completed")
    # Looked at as it is: opening its row (the card() helper) would itself move the newer card.
    held = page.locator(f"#run-{older}")
    expect(held).to_have_class(re.compile(r"\bis-gone\b"))
    expect(held.locator(".gone-note")).to_contain_text("Decided or changed elsewhere")
    expect(held.locator(".decided-note")).to_contain_text(f"Approved by {REVIEWER.username}")
    page.wait_for_load_state("networkidle")
    assert under_pointer(page, x, y) == aimed

    page.mouse.move(5, 5)  # off the list
    expect(held).to_have_count(0)
    expect(card(page, newer).get_by_role("button", name=APPROVE)).to_be_visible()


def test_a_run_that_parks_keeps_the_focused_approve_focused_and_in_place(
    pages: Pages, server: Server
) -> None:
    thread = unique("focus-stays")
    (first,) = server.start_runs(RunRequest("support", REFUND, thread))
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}&sort=newest")
    card(page, first).get_by_role("button", name=APPROVE).focus()  # the keyboard's way
    before = focused(page)
    assert before is not None and before["text"] == "Approve" and before["card"] == f"run-{first}", before

    (second,) = server.start_runs(RunRequest("support", "Refund $130.00 on A-1043, late.", thread))
    wait_for_arrival(page, second)

    assert focused(page) == before  # same call's button, focused, not moved
    expect(page.get_by_role("button", name="1 new call — show")).to_be_visible()
    page.keyboard.press("Enter")  # on the focused Approve: it decides the call it showed
    expect(card(page, first).locator(".outcome")).to_contain_text("Completed")
    expect(card(page, first).locator(".outcome")).to_contain_text("Refunded $80.00")


def test_live_output_of_an_approval_with_edited_arguments_shows_what_the_tool_ran_with(
    pages: Pages, server: Server
) -> None:
    thread = unique("edited-output")
    (run_id,) = server.start_runs(
        RunRequest("support", "Please refund $99.00 on order A-1042, it broke.", thread, "dana")
    )
    page = pages.open()
    visit(page, f"/runs/{run_id}/")
    the_card = card(page, run_id)
    the_card.get_by_text("Edit arguments", exact=True).click()
    expect(the_card.locator("form.edit-args-fields")).to_be_visible()  # fetched from the run page
    the_card.get_by_text("Advanced: edit as JSON", exact=True).click()
    field = the_card.get_by_label("Edited arguments (JSON)")
    model_args = json.loads(field.input_value())
    assert model_args["amount_cents"] == 9900
    edited = {**model_args, "amount_cents": 4000}
    field.fill(json.dumps(edited))
    the_card.get_by_role("button", name=APPROVE_JSON).click()

    output = page.locator(f"[data-live-output='{run_id}']")
    expect(output).to_contain_text("Run success.", timeout=15_000)  # (over the socket: a busy machine)
    call = output.locator("li[data-kind='tool-call']")
    expect(call).to_have_count(1)
    expect(call).to_contain_text(f"→ issue_refund {json.dumps(edited, separators=(',', ':'))}")
    expect(call).to_contain_text(f"edited by {ADMIN.username}")
    expect(call).to_contain_text(f"the model's: {json.dumps(model_args, separators=(',', ':'))}")
    expect(output.locator("li[data-kind='tool-result']")).to_contain_text("Refunded $40.00")


def _run_state(server: Server, run_id: str) -> dict[str, Any]:
    script = f"""
import json
from approvals.models import AuditEntry, ParkedCallRecord, RunRecord
run = RunRecord.objects.get(run_id={run_id!r})
print(json.dumps({{
    "status": run.status,
    "decided_calls": ParkedCallRecord.objects.filter(run=run, action__isnull=False).count(),
    "audit_entries": AuditEntry.objects.filter(run_id={run_id!r}).count(),
}}))
"""
    state: dict[str, Any] = json.loads(server.manage("shell", "-c", script).strip().splitlines()[-1])
    return state


def test_a_click_after_the_session_ended_goes_to_the_login_page_and_decides_nothing(
    pages: Pages, server: Server
) -> None:
    thread = unique("session-ended")
    (run_id,) = server.start_runs(RunRequest("support", REFUND, thread))
    page = pages.open(login=None)  # a session of its own: the one this test ends
    page.goto(f"/accounts/login/?next=/agents/support/%3Fthread%3D{thread}")
    log_in(page, ADMIN)
    expect(page).to_have_url(server.url(f"/agents/support/?thread={thread}"))
    page.wait_for_load_state("networkidle")
    approve = card(page, run_id).get_by_role("button", name=APPROVE)  # the row open, its body in
    session_key = next(c["value"] for c in page.context.cookies() if c["name"] == "sessionid")
    # Revoked on the server (an admin, an expiry): the page still looks signed in.
    server.manage(
        "shell",
        "-c",
        "from django.contrib.sessions.models import Session\n"
        f"Session.objects.filter(session_key={session_key!r}).delete()",
    )

    approve.click()

    expect(page).to_have_url(re.compile(r"/accounts/login/\?next="))
    expect(page.locator("ul.messages")).to_contain_text("You were signed out. Nothing was decided.")
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    expect(page.locator(".run-card")).to_have_count(0)
    assert _run_state(server, run_id) == {"status": "suspended", "decided_calls": 0, "audit_entries": 0}

    # Signing in again leads back to the inbox, where the call still waits.
    log_in(page, ADMIN)
    expect(page).to_have_url(server.url(f"/agents/support/?thread={thread}"))
    expect(card(page, run_id).get_by_role("button", name=APPROVE)).to_be_enabled()


def test_buttons_are_disabled_while_the_page_shows_signed_out(pages: Pages, server: Server) -> None:
    thread = unique("signed-out")
    (run_id,) = server.start_runs(RunRequest("support", REFUND, thread))
    page = pages.open(login=None)
    page.goto(f"/accounts/login/?next=/agents/support/%3Fthread%3D{thread}")
    log_in(page, ADMIN)
    expect(page).to_have_url(server.url(f"/agents/support/?thread={thread}"))
    visit(page, f"/agents/support/?thread={thread}")
    approve = card(page, run_id).get_by_role("button", name=APPROVE)
    expect(approve).to_be_enabled()

    # Same browser, another tab: logging out there ends this page's session.
    elsewhere = page.context.new_page()
    elsewhere.goto("/")
    elsewhere.get_by_role("button", name="Log out").click()
    elsewhere.wait_for_url("**/accounts/login/")

    expect(page.locator("#live-status")).to_have_text("Signed out")
    expect(approve).to_be_disabled()
    expect(declining(card(page, run_id)).get_by_role("button", name=DECLINE)).to_be_disabled()
    assert _run_state(server, run_id) == {"status": "suspended", "decided_calls": 0, "audit_entries": 0}


def test_the_new_pill_stays_in_sight_down_the_list_and_counts_only_new_calls(
    pages: Pages, server: Server
) -> None:
    thread = unique("pill-sticky")
    server.start_runs(
        *(RunRequest("support", f"Refund ${90 + n}.00 on A-10{n}, late.", thread) for n in range(5))
    )
    page = pages.open(height=420)
    visit(page, f"/agents/support/?thread={thread}&sort=newest")
    last = page.locator(".run-card").last
    last.scroll_into_view_if_needed()
    last.locator(".call-summary").first.hover()  # far down the list: the pill's place is out of sight

    (newer,) = server.start_runs(RunRequest("support", "Refund $99.00 on A-1099, late.", thread))
    wait_for_arrival(page, newer)

    pill = page.get_by_role("button", name="1 new call — show")
    expect(pill).to_be_visible()
    box = pill.bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 420, box
    # Someone decides it before the reviewer looks: not new any more, nothing to show.
    other = pages.open(REVIEWER)
    visit(other, f"/runs/{newer}/")
    card(other, newer).get_by_role("button", name=APPROVE).click()
    expect(card(other, newer).locator(".outcome")).to_be_visible()
    expect(page.locator(".new-pill")).to_be_hidden()
