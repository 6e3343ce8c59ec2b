"""A call's preview on its card (what it would do), and a decision refused when the card showed
something else than the call is now (another preview, another version of its tool)."""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from agents_runtime import Agent, Call, Runtime, scripted_model, tool
from agents_runtime.previews import Change, Preview
from approvals import agents as served
from approvals.apps import compose
from approvals.models import AuditEntry
from approvals.store import DjangoRunStore
from demo import agents as demo_agents
from demo import tools as demo_tools
from tests.support.inbox_rows import HX, inbox

SEEN = re.compile(r'name="seen" value="([0-9a-f]+)"')


def hostile_preview(args: dict[str, Any]) -> Preview:
    return Preview(
        sentence="<script>alert(1)</script> pays \u202eevil",
        changes=(Change("<b>Balance</b>", "$10", "$0"),),
        diff="- a\n+ b",
        items=("<i>one</i>",),
    )


@tool(requires_approval=True, preview=hostile_preview)
def wire(to: str) -> str:
    return to


def wirer() -> Agent:
    return Agent("wirer", model=scripted_model(Call("wire", {"to": "x"})), tools=[wire])


def support_agent(refund: Any = demo_tools.issue_refund) -> Agent:
    return Agent(
        "support",
        name="Customer support",
        model=scripted_model(demo_agents._support_first_step),
        tools=[demo_tools.lookup_order, refund, demo_tools.send_customer_email],
    )


def install(*agents: Agent) -> Runtime:
    runtime = Runtime(agents=list(agents), storage=DjangoRunStore())
    compose(runtime)
    return runtime


@pytest.fixture
def desk(transactional_db: None) -> Iterator[Runtime]:
    previous = served.runtime()
    yield install(support_agent(), wirer())
    served.install(previous)


def start(runtime: Runtime, agent_id: str, prompt: str) -> Any:
    result = async_to_sync(runtime.get_agent(agent_id).generate)(prompt)
    assert result.status == "suspended", result
    return result


def text_of(fragment: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def preview_block(page: str) -> str:
    found = re.search(r'<section class="preview[^"]*".*?</section>', page, re.S)
    assert found is not None, "no preview on the card"
    return found.group(0)


def test_a_demo_refund_shows_the_balance_before_and_after(desk: Runtime, reviewer_client: Client) -> None:
    start(desk, "support", "Please refund $890.00 on order A-1044, it never arrived.")

    block = preview_block(inbox(reviewer_client, "/agents/support/"))

    assert text_of(block) == (
        "What it would do $890.00 goes back to sam@example.com for order A-1044. "
        "What Before After Store balance $12,500.00 $11,610.00 Refundable on A-1044 $890.00 $0.00"
    )


def test_the_preview_is_escaped_and_its_invisible_characters_shown(
    desk: Runtime, reviewer_client: Client
) -> None:
    start(desk, "wirer", "wire it")

    block = preview_block(inbox(reviewer_client, "/agents/wirer/"))

    assert "<script>" not in block and "&lt;script&gt;alert(1)&lt;/script&gt;" in block
    assert "&lt;b&gt;Balance&lt;/b&gt;" in block and "&lt;i&gt;one&lt;/i&gt;" in block
    assert "U+202E" in block
    assert '<span class="diff-line-del">- a</span>' in block
    assert '<span class="diff-line-add">+ b</span>' in block
    assert "style=" not in block


def test_a_decision_on_a_card_shown_before_the_tool_was_upgraded_is_refused_with_the_fresh_card(
    desk: Runtime, reviewer_client: Client
) -> None:
    run = start(desk, "support", "Please refund $890.00 on order A-1044")
    call_id = run.tool_calls[0].tool_call_id
    (shown,) = set(SEEN.findall(inbox(reviewer_client, "/agents/support/")))
    # The refund tool is upgraded (a deploy of the agent's code) after the card was shown.
    install(support_agent(replace(demo_tools.issue_refund, version="2")))
    url = f"/runs/{run.run_id}/calls/{call_id}/approve"

    refused = reviewer_client.post(url, {"agent": "support", "seen": shown}, **HX)

    page = refused.content.decode()
    assert "The call changed since you saw it" in html_lib.unescape(page)
    (fresh,) = set(SEEN.findall(page))
    assert fresh != shown
    assert "$890.00 goes back to sam@example.com" in page
    assert async_to_sync(desk.get_agent("support").list_suspended_runs)().runs  # nothing was decided

    approved = reviewer_client.post(url, {"agent": "support", "seen": fresh}, **HX)
    assert "Refunded $890.00 on A-1044" in approved.content.decode()


def test_the_mastra_listing_carries_the_preview_and_the_fingerprint_an_approval_is_bound_to(
    desk: Runtime, reviewer_client: Client
) -> None:
    run = start(desk, "support", "Please refund $890.00 on order A-1044")
    listing = reviewer_client.get("/api/agents/support/suspended-runs").json()
    (call,) = listing["runs"][0]["toolCalls"]
    assert call["preview"]["sentence"] == "$890.00 goes back to sam@example.com for order A-1044."
    (shown,) = set(SEEN.findall(inbox(reviewer_client, "/agents/support/")))
    assert call["fingerprint"] == shown  # what the card shows, to approve on through the routes
    install(support_agent(replace(demo_tools.issue_refund, version="2")))
    body = {"runId": run.run_id, "toolCallId": call["toolCallId"], "fingerprint": call["fingerprint"]}

    refused = reviewer_client.post(
        "/api/agents/support/approve-tool-call", body, content_type="application/json"
    )

    assert refused.status_code == 403 and "changed since you saw it" in refused.json()["error"]
    (fresh,) = reviewer_client.get("/api/agents/support/suspended-runs").json()["runs"][0]["toolCalls"]
    assert fresh["fingerprint"] != call["fingerprint"]
    approved = reviewer_client.post(
        "/api/agents/support/approve-tool-call",
        {**body, "fingerprint": fresh["fingerprint"]},
        content_type="application/json",
    )
    assert approved.status_code == 200
    # Approved on the fresh fingerprint: the attempt on the stale one was refused, this one taken.
    stale_try, taken = (
        AuditEntry.objects.filter(run_id=run.run_id).order_by("id").values_list("outcome", flat=True)
    )
    assert stale_try == "refused" and taken in {"continuing", "completed"}


def test_the_audit_row_keeps_the_preview_the_card_showed(
    desk: Runtime, reviewer_client: Client, admin_member_client: Client
) -> None:
    run = start(desk, "support", "Please refund $890.00 on order A-1044")
    (shown,) = set(SEEN.findall(inbox(reviewer_client, "/agents/support/")))
    url = f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/approve"
    reviewer_client.post(url, {"agent": "support", "seen": shown}, **HX)

    entry = AuditEntry.objects.get(run_id=run.run_id, action="approve")
    assert entry.preview["sentence"] == "$890.00 goes back to sam@example.com for order A-1044."
    page = admin_member_client.get("/audit/").content.decode()
    block = preview_block(page)
    assert "What it would do, as shown" in block
    assert "Store balance $12,500.00 $11,610.00" in text_of(block)
