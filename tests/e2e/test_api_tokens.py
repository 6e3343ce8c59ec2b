"""The "API tokens" page in a real browser: create a token, see it once, use it, revoke it."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import Pages, Server, screenshot, unique

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]


def _api_status(server: Server, token: str) -> int:
    request = urllib.request.Request(
        server.url("/api/agents/support/suspended-runs"), headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_create_a_token_use_it_and_revoke_it(pages: Pages, server: Server, artifacts_dir: Path) -> None:
    name = unique("script")
    page = pages.open()
    page.goto("/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="API tokens").click()
    expect(page.get_by_role("heading", name="API tokens", level=1)).to_be_visible()

    page.get_by_label("Name").fill(name)
    page.get_by_label("Expires in (days)").fill("30")
    page.get_by_role("button", name="Create token").click()
    shown = page.locator("#new-token-value")
    expect(shown).to_be_visible()
    token = shown.inner_text()
    assert token.startswith("cs_")
    screenshot(page, artifacts_dir / "api-token-created.png")
    assert _api_status(server, token) == 200

    # Shown once: the list has only its key id, and the token's last use.
    page.goto("/account/api-tokens/")
    expect(page.locator("#new-token-value")).to_have_count(0)
    row = page.get_by_role("row").filter(has_text=name)
    expect(row).to_contain_text(f"cs_{token.split('_')[1]}_…")
    expect(row).to_contain_text("active")
    expect(row).not_to_contain_text(token)

    row.get_by_role("button", name="Revoke").click()
    expect(page.get_by_text("Token revoked: it no longer authenticates.")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text=name)).to_contain_text("revoked")
    assert _api_status(server, token) == 401
