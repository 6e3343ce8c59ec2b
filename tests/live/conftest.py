"""Helpers for the live-update tests that run real processes: logging in (the ``browser`` fixture is
the suite's, in ``tests/conftest.py``)."""

from __future__ import annotations

from typing import Any


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
