"""At a phone's width (390 px), every page: nothing scrolls sideways, the menu is folded behind its
button (which works without JavaScript too), axe-core finds no serious violation; the first call of
the queue and of an inbox shows without scrolling; a touch screen is offered no keyboard shortcuts.
Takes docs/screenshots/mobile-queue.png (``docs_screenshot``).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import ADMIN, Pages, RunRequest, Server, docs_screenshot, unique
from tests.e2e.test_layout_and_accessibility import check_page, finish

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

#: An iPhone 12-15's viewport.
WIDTH, HEIGHT = 390, 844


@pytest.fixture(scope="module")
def thread() -> str:
    return unique("mobile")


@pytest.fixture(scope="module")
def runs(server: Server, thread: str) -> list[str]:
    """Two waiting calls in one thread (the first to decide, for an ended run's page too) and a deploy."""
    return server.start_runs(
        RunRequest("support", "Refund $890.00 on A-1044, it never arrived at all.", thread, "sam"),
        RunRequest("support", "Refund $75.00 on A-1043, wrong size.", thread, "lee"),
        RunRequest("ops", "deploy billing-api to production", thread),
    )


def phone(pages: Pages, *, javascript: bool = True, touch: bool = True) -> Page:
    return pages.open(ADMIN, width=WIDTH, height=HEIGHT, javascript=javascript, touch=touch)


def batch_page(page: Page, thread: str) -> str:
    """A bulk decision's preview of the thread's support calls (made from the inbox): its path."""
    page.goto(f"/agents/support/?thread={thread}", wait_until="networkidle")
    page.get_by_role("button", name=re.compile(r"^Select all \d+ matching runs")).click()
    page.wait_for_url(re.compile(r"/batches/\d+/$"))
    return page.url.removeprefix(page.url.split("/batches/")[0])


def test_every_page_fits_a_phone_with_its_menu_folded_and_passes_axe(
    pages: Pages, server: Server, runs: list[str], thread: str
) -> None:
    waiting, ended, _ = runs
    page = phone(pages)
    finish(page, ended)
    problems: list[str] = []
    for name, path in (
        ("queue", "/queue/"),
        ("overview", "/agents/"),
        ("inbox", f"/agents/support/?thread={thread}"),
        ("run-waiting", f"/runs/{waiting}/"),
        ("run-ended", f"/runs/{ended}/"),
        ("audit", "/audit/"),
        ("grants", "/grants/"),
        ("health", "/health/"),
        ("bulk", batch_page(page, thread)),
        ("notifications", "/account/notifications/"),
        ("api-tokens", "/account/api-tokens/"),
        ("new-run", "/runs/new/"),
    ):
        response = page.goto(path, wait_until="networkidle")
        assert response is not None and response.status < 400, (path, response and response.status)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        if width > WIDTH:
            problems.append(f"{name}: {width} px wide, scrolls sideways")
        # The menu is one button; its links wait behind it.
        if page.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").is_visible():
            problems.append(f"{name}: the menu's links show without opening it")
        if not page.get_by_role("button", name="Menu").is_visible():
            problems.append(f"{name}: no menu button")
        problems += check_page(page, f"mobile-{name}", WIDTH)
    login = pages.open(None, width=WIDTH, height=HEIGHT, touch=True)
    login.goto("/accounts/login/")
    assert login.evaluate("() => document.documentElement.scrollWidth") <= WIDTH
    problems += check_page(login, "mobile-login", WIDTH)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("javascript", [True, False], ids=["script", "no-script"])
def test_the_menu_opens_from_its_button_with_or_without_javascript(pages: Pages, javascript: bool) -> None:
    page = phone(pages, javascript=javascript)
    page.goto("/agents/", wait_until="networkidle")
    audit = page.get_by_role("link", name="Audit log")
    expect(audit).to_be_hidden()

    menu = page.get_by_role("button" if javascript else "link", name="Menu", exact=True)
    menu.click()

    expect(audit).to_be_visible()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    if javascript:
        expect(menu).to_have_attribute("aria-expanded", "true")
        menu.click()  # folds it again
        expect(audit).to_be_hidden()
        expect(menu).to_have_attribute("aria-expanded", "false")
        menu.click()
    audit.click()
    page.wait_for_url(re.compile(r"/audit/$"))
    # At a desk's width there is no button: the links show as they always did.
    desk = pages.open(ADMIN, width=1400, javascript=javascript)
    desk.goto("/agents/", wait_until="networkidle")
    expect(desk.get_by_role("link", name="Audit log")).to_be_visible()
    expect(desk.locator(".menu-toggle:visible, .menu-link:visible")).to_have_count(0)


@pytest.mark.parametrize("path", ["/queue/?thread={thread}", "/agents/support/?thread={thread}"])
def test_on_a_phone_the_first_call_shows_without_scrolling_and_no_keys_are_offered(
    pages: Pages, runs: list[str], thread: str, path: str
) -> None:
    page = phone(pages)
    page.goto(path.format(thread=thread), wait_until="networkidle")

    first = page.locator("#run-list .call-summary").first
    expect(first).to_be_visible()
    box = first.bounding_box()
    assert box is not None and page.evaluate("() => window.scrollY") == 0
    assert box["y"] >= 0 and box["y"] + box["height"] <= HEIGHT, box
    # A touch screen has no keys to learn; a desk's browser is offered them.
    expect(page.locator(".keys-open")).to_be_hidden()
    expect(page.get_by_role("button", name=re.compile("^Keyboard shortcuts"))).to_be_hidden()
    desk = pages.open(ADMIN, width=WIDTH, height=HEIGHT)
    desk.goto(path.format(thread=thread), wait_until="networkidle")
    expect(desk.locator(".keys-open")).to_be_visible()
    if path.startswith("/queue/"):
        page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
        docs_screenshot(page, "mobile-queue.png")
