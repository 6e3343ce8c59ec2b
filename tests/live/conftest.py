"""Fixtures for the live-update tests that run real processes: a browser, and helpers to log in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests import services


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright (never Playwright's own download)."""
    from playwright.sync_api import sync_playwright

    executable = services.require_chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=services.CHROMIUM_ARGS)
        yield launched
        launched.close()


def log_in(browser: Any, base_url: str, username: str, password: str, *, next_path: str = "/") -> Any:
    """A new browser context logged in as ``username``; returns a page showing ``next_path``."""
    context = browser.new_context(base_url=base_url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto(f"/accounts/login/?next={next_path}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("main button[type=submit]")
    page.wait_for_url(f"**{next_path}")
    return page
