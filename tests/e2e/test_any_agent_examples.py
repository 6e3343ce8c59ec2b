"""The examples of docs/any-agent.md, run as their own processes against a live desk, with a reviewer
deciding in the browser: a plain function behind ``requires_approval`` (its amount edited at the
desk) and a pydantic-ai agent answered through the bridge (declined with a reason)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.conftest import ROOT, Pages, Server
from tests.support.card_rows import DECLINE, declining, expanded

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]


def _example(server: Server, module: str, agent: str, *args: str) -> subprocess.Popen[str]:
    server.manage("external_agent", "register", agent, "--name", agent)
    token = server.manage("external_agent", "token", agent, "--name", "example").strip().splitlines()[-1]
    env = {
        **os.environ,
        "COUNTERSIGN_URL": server.base_url,
        "COUNTERSIGN_TOKEN": token,
        "COUNTERSIGN_AGENT": agent,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python" / "src")]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _waiting_card(page: Page, agent: str, text: str, process: subprocess.Popen[str]) -> Locator:
    """The agent's inbox once the example's request waits in it (the example takes a moment to
    start; a card parked after the page loaded waits behind the "new" pill, so reload instead)."""
    ends = time.monotonic() + 60
    while True:
        page.goto(f"/agents/{agent}/", wait_until="networkidle")
        card = page.locator("article.run-card", has_text=text)
        if card.count() == 1:
            return card
        if process.poll() is not None or time.monotonic() > ends:
            process.kill()
            raise AssertionError(f"no waiting call {text!r}; the example said:\n{process.communicate()[0]}")
        time.sleep(0.5)


@pytest.fixture
def stopped() -> Iterator[list[subprocess.Popen[str]]]:
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()


def test_a_decorated_function_runs_with_the_amount_the_reviewer_typed(
    pages: Pages, server: Server, stopped: list[subprocess.Popen[str]]
) -> None:
    agent = "billing-scripts-e2e"
    process = _example(server, "examples.any_agent.decorated_function", agent, "A-1042", "4200")
    stopped.append(process)

    page = pages.open()
    card = expanded(_waiting_card(page, agent, "Refund 42.00 USD on A-1042", process))
    card.get_by_text("Edit arguments", exact=True).click()
    form = card.locator("form.edit-args-fields")
    form.get_by_label(re.compile("^Amount", re.I)).fill("2500")
    form.get_by_role("button", name="with these arguments").click()
    expect(page.locator("article.run-card .outcome").first).to_contain_text("with edited arguments")

    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "refunded 2500 cents on A-1042" in output


def test_a_pydantic_ai_agent_hears_the_reviewers_reason_when_declined(
    pages: Pages, server: Server, stopped: list[subprocess.Popen[str]]
) -> None:
    agent = "release-bot-e2e"
    process = _example(server, "examples.any_agent.pydantic_ai_bridge", agent, "Deploy v2.4.1 to production")
    stopped.append(process)

    page = pages.open()
    card = declining(_waiting_card(page, agent, "deploy", process))
    card.get_by_label(re.compile("reason", re.I)).first.fill("Not on a Friday")
    card.get_by_role("button", name=DECLINE).first.click()
    expect(page.locator("article.run-card .outcome").first).to_contain_text("declined")

    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "Not on a Friday" in output
