"""Keys faster than the page: what the keyboard does while a row, or the list, is still loading.

The page is made slower than the keys on purpose: Playwright holds the answers (a folded row's body,
a live refetch of the list) until the test lets them through, so the keys always arrive first.

- d, then a reason typed at once while the row's body loads: the letters are the reason, not
  commands (a letter once approved a refund), and the decline sends it.
- a while the body loads does nothing, then or later; a once the row shows approves, once.
- a held (the key repeats), then pressed again at once, on a shown call: one approval.
- a while a live refetch replaces the list does nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, Request, Route, expect

from tests.e2e.conftest import TIMEOUT_MS, Pages, RunRequest, Server, unique
from tests.e2e.test_keys_and_bulk import QUIET, current_call, refund, visit, wait_until_shown

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

#: Every letter the inbox's keys use, and ? (the list of keys), in a reason typed without a pause; the
#: last of a, d and e in it is an a (as in the report: the reason's letters ended in an approval).
REASON = "Ask jake: a duplicate? Check the box, then decide by mail."


class Held:
    """The page's requests that ``wanted`` picks, held back until ``release``: the page is slower
    than the keys."""

    def __init__(self, page: Page, url: Callable[[str], bool], wanted: Callable[[Request], bool]) -> None:
        self.page = page
        self.wanted = wanted
        self.routes: list[Route] = []
        self.holding = True
        page.route(url, self._route)

    def _route(self, route: Route) -> None:
        if self.holding and self.wanted(route.request):
            self.routes.append(route)
        else:
            route.continue_()

    def wait(self) -> None:
        """Until the page has asked for one (the page runs meanwhile: its events, its keys)."""
        for _ in range(TIMEOUT_MS // 25):
            if self.routes:
                return
            self.page.wait_for_timeout(25)
        pytest.fail("the page never asked for what the test holds", pytrace=False)

    def release(self) -> None:
        self.holding = False
        for route in self.routes:
            route.continue_()
        self.routes.clear()


def hold_bodies(page: Page) -> Held:
    """Holds each folded row's body (GET /runs/<run>/calls/<call>/; decisions are POSTs there)."""
    return Held(page, lambda url: "/calls/" in url, lambda request: request.method == "GET")


def hold_list_refetches(page: Page, agent_id: str) -> Held:
    """Holds the list's live refetches: htmx GETs the page's own address (live-refetch.js)."""
    return Held(
        page,
        lambda url: f"/agents/{agent_id}/" in url,
        lambda request: request.method == "GET" and request.headers.get("hx-request") == "true",
    )


def audit(server: Server, run_id: str) -> list[tuple[str, str]]:
    """What the audit log recorded for the run, oldest first: (action, reason)."""
    printed = server.manage(
        "shell",
        "--command",
        "from approvals.models import AuditEntry\n"
        f"print(list(AuditEntry.objects.filter(run_id={run_id!r}).order_by('id')"
        ".values_list('action', 'reason')))",
    )
    entries: list[tuple[str, str]] = ast.literal_eval(printed.strip().splitlines()[-1])
    return entries


def actions(server: Server, run_id: str) -> list[str]:
    return [action for action, _ in audit(server, run_id)]


def open_inbox(pages: Pages, server: Server, prefix: str, runs: int = 1) -> tuple[Page, list[str]]:
    """The support inbox showing only ``runs`` new runs (oldest first), and their ids in that order."""
    thread = unique(prefix)
    server.start_runs(*(RunRequest("support", refund(n), thread) for n in range(runs)))
    page = pages.open()
    visit(page, f"/agents/support/?thread={thread}&sort=oldest")
    cards = page.locator(".run-card")
    expect(cards).to_have_count(runs)
    return page, [str(cards.nth(i).get_attribute("data-run-id")) for i in range(runs)]


def test_a_reason_typed_while_the_row_loads_is_the_reason_not_commands(pages: Pages, server: Server) -> None:
    page, (run_id,) = open_inbox(pages, server, "race-decline")
    bodies = hold_bodies(page)

    page.keyboard.press("j")  # the first call: its row opens, its body is asked for (and held)
    call = current_call(page)
    bodies.wait()
    page.keyboard.press("d")
    page.keyboard.type(REASON, delay=0)
    page.keyboard.press("Enter")  # submits nothing: there is no form yet
    expect(page.locator(f"#{call} .call-body-lazy")).to_have_count(1)  # all typed before the body came

    bodies.release()
    page.wait_for_function(QUIET)
    expect(page.locator(f"#run-{run_id} .outcome")).to_have_count(0)  # nothing was decided meanwhile
    assert actions(server, run_id) == []
    reason = page.locator(f"#{call} .decline-form [name='reason']")
    expect(reason).to_be_focused()
    expect(reason).to_have_value(REASON)

    page.locator(f"#{call} .decline-form button[type='submit']").click()
    expect(page.locator(f"#run-{run_id} .outcome")).to_contain_text("declined")
    assert audit(server, run_id) == [("decline", REASON)]


def test_a_while_the_row_loads_does_nothing_then_a_once_shown_approves_once(
    pages: Pages, server: Server
) -> None:
    page, (run_id,) = open_inbox(pages, server, "race-approve")
    bodies = hold_bodies(page)

    page.keyboard.press("j")
    call = current_call(page)
    bodies.wait()
    page.keyboard.press("a")
    bodies.release()
    page.wait_for_function(QUIET)  # (the body in, and an approval it had set off back)
    expect(page.locator(f"#run-{run_id} .outcome")).to_have_count(0)
    assert actions(server, run_id) == []
    wait_until_shown(page, call)
    expect(page.locator(f"#{call} button.approve")).to_be_enabled()  # the call still waits

    page.keyboard.press("a")
    expect(page.locator(f"#run-{run_id} .outcome")).to_contain_text("approved")
    page.wait_for_function(QUIET)
    assert actions(server, run_id) == ["approve"]


def test_a_pressed_twice_on_a_shown_call_approves_once(pages: Pages, server: Server) -> None:
    page, (run_id,) = open_inbox(pages, server, "race-twice")
    page.keyboard.press("j")
    call = current_call(page)
    wait_until_shown(page, call)

    page.keyboard.down("a")
    page.keyboard.down("a")  # held: the key repeats
    page.keyboard.up("a")
    page.keyboard.press("a")  # and pressed again at once, the first approval on its way
    expect(page.locator(f"#run-{run_id} .outcome")).to_contain_text("approved")
    page.wait_for_function(QUIET)
    expect(page.locator(f"#run-{run_id} .outcome")).to_have_count(1)
    assert actions(server, run_id) == ["approve"]


def test_a_while_a_live_refetch_replaces_the_list_does_nothing(pages: Pages, server: Server) -> None:
    page, (run_id,) = open_inbox(pages, server, "race-refetch")
    page.keyboard.press("j")
    call = current_call(page)
    wait_until_shown(page, call)  # a alone would approve it now
    lists = hold_list_refetches(page, "support")

    # A new run for the agent (on another thread: not in this list) makes the list refetch itself.
    server.start_runs(RunRequest("support", refund(9), unique("race-elsewhere")))
    lists.wait()
    page.keyboard.press("a")
    lists.release()
    page.wait_for_function(QUIET)
    expect(page.locator(f"#run-{run_id} .outcome")).to_have_count(0)
    expect(page.locator(f"#{call} button.approve")).to_be_enabled()  # the call still waits
    assert actions(server, run_id) == []

    # Once the list has settled, the same key approves it.
    wait_until_shown(page, call)
    page.keyboard.press("a")
    expect(page.locator(f"#run-{run_id} .outcome")).to_contain_text("approved")
    assert actions(server, run_id) == ["approve"]
