"""What a card says: a readable title, the arguments by type, why the call waits, the forms built
from the tool's parameters, risky approvals confirmed on the server, and sub-agents' calls counted once.

The demo's tools (``demo/tools.py``) carry the metadata; the agents here are the demo's scripts on a
fresh runtime with the database store.
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from agents_runtime import Agent, Call, Reply, Runtime, scripted_model, tool
from agents_runtime.presentation import ApprovalRule
from approvals import agents as served
from approvals.apps import compose
from approvals.cards.args import arg_view
from approvals.cards.call import call_view
from approvals.store import DjangoRunStore
from demo import agents as demo_agents
from demo import tools as demo_tools
from tests.support.inbox_rows import inbox, opened
from tests.support.runtime_fixtures import XSS

HX = {"HTTP_HX_REQUEST": "true"}


@tool(requires_approval=ApprovalRule(because=f"Because {XSS}"), title="Open {url} for {who}")
def open_link(url: str, who: str, note: str) -> str:
    """Opens a link. <b>bold</b>"""
    return url


def _hostile_step(ctx: Any) -> Any:
    return Call(
        "open_link",
        {"url": "https://p\u0430ypal.com/login?x=<script>", "who": XSS, "note": f"line 1\nline 2 {XSS}"},
        say=f"I will {XSS}",
    )


@pytest.fixture
def desk(transactional_db: None) -> Iterator[Runtime]:
    """The demo agents' scripts and tools on a fresh runtime, served by the dashboard."""
    support = Agent(
        "support",
        name="Customer support",
        model=scripted_model(demo_agents._support_first_step),
        tools=[demo_tools.lookup_order, demo_tools.issue_refund, demo_tools.send_customer_email],
    )
    ops = Agent(
        "ops",
        name="Release engineer",
        model=scripted_model(demo_agents._ops_first_step, demo_agents._ops_second_step),
        tools=[demo_tools.request_change_window, demo_tools.deploy_service],
    )
    coordinator = Agent(
        "coordinator",
        name="Coordinator",
        model=scripted_model(lambda ctx: Call("agent_ops", {"prompt": ctx.prompt}), Reply("Done.")),
        agents=[ops],
    )
    hostile = Agent("hostile", model=scripted_model(_hostile_step, Reply("ok")), tools=[open_link])
    runtime = Runtime(agents=[support, ops, coordinator, hostile], storage=DjangoRunStore())
    previous = served.runtime()
    compose(runtime)
    yield runtime
    served.install(previous)


def start(runtime: Runtime, agent_id: str, prompt: str) -> str:
    result = async_to_sync(runtime.get_agent(agent_id).generate)(prompt)
    assert result.status == "suspended", result
    return result.run_id


def waiting_call(runtime: Runtime, agent_id: str, run_id: str) -> Any:
    [call] = async_to_sync(runtime.get_agent(agent_id).get_suspended_run)(run_id).tool_calls
    return call


def text_of(html: str, css_class: str) -> list[str]:
    """The text inside each element whose class list starts with ``css_class`` (tags stripped)."""
    found = re.findall(rf'class="{css_class}[^"]*"[^>]*>(.*?)</(?:h3|div|p|span|dd|blockquote)>', html, re.S)
    return [html_lib.unescape(re.sub(r"<[^>]+>", "", f)).strip() for f in found]


def test_a_call_reads_as_its_title_with_the_run_id_in_the_meta_line(
    desk: Runtime, reviewer_client: Client
) -> None:
    run_id = start(desk, "support", "Please refund $890 on A-1044, it never arrived")

    page = inbox(reviewer_client, "/agents/support/")

    assert text_of(page, "call-title") == ["Refund $890.00 · A-1044"]
    [meta] = text_of(page, "call-meta")
    assert run_id in meta and "Customer support" in meta and "waiting" in meta
    # A dense row that expands in place: a <details> whose summary holds the title.
    assert re.search(
        r'<details class="call-row">\s*<summary class="call-summary">\s*<h3 class="call-title"', page
    )
    assert 'aria-label="Approve Refund $890.00 · A-1044"' in page
    assert 'aria-label="Decline Refund $890.00 · A-1044"' in page


def test_arguments_read_by_type_money_and_multiline_text(desk: Runtime, reviewer_client: Client) -> None:
    start(desk, "support", "Please refund $890 on A-1044")
    start(desk, "support", "write to the customer of A-1042 that the parcel is late")

    page = inbox(reviewer_client, "/agents/support/")

    assert re.search(r'<div class="arg arg-money"><dt>Amount cents</dt><dd>\$890\.00</dd>', page)
    body = re.search(
        r'<div class="arg arg-multiline"><dt>Body</dt><dd><div class="arg-text">(.*?)</div>', page, re.S
    )
    assert body is not None
    assert body.group(1).startswith("Hello,\n\nwrite to the customer") and "\\n" not in body.group(1)
    # The JSON stays one click away.
    assert "<summary>Arguments as JSON" in page


def test_risky_values_and_enums_are_chips(desk: Runtime, reviewer_client: Client) -> None:
    staging = start(desk, "ops", "deploy search to staging")
    prod_run = start(desk, "ops", "deploy search to production")
    async_to_sync(desk.get_agent("ops").resume_stream)(
        {"start": "2026-12-01T22:00:00+00:00", "risk": "low"}, run_id=prod_run
    )

    page = inbox(reviewer_client, "/agents/ops/")

    assert '<span class="chip chip-risky">Environment: production</span>' in page  # in the row itself
    assert re.search(
        r'<div class="arg arg-enum is-risky"><dt>Environment</dt><dd>'
        r'<span class="chip chip-risky">production',
        page,
    )
    assert re.search(r'<div class="arg arg-enum"><dt>Environment</dt><dd><span class="chip">staging', page)
    assert staging in page


def test_a_folded_row_builds_its_risky_chips_and_leaves_the_rest_to_its_body(desk: Runtime) -> None:
    ops = desk.get_agent("ops")
    staging_run, prod_run = (
        start(desk, "ops", "deploy search to staging"),
        start(desk, "ops", "deploy search to production"),
    )
    async_to_sync(ops.resume_stream)({"start": "2026-12-01T22:00:00+00:00", "risk": "low"}, run_id=prod_run)
    prod, staging = ops.get_suspended_run_sync(prod_run), ops.get_suspended_run_sync(staging_run)

    row = call_view(prod, prod.tool_calls[0], agent=ops, folded=True)
    body = call_view(prod, prod.tool_calls[0], agent=ops)
    quiet = call_view(staging, staging.tool_calls[0], agent=ops, folded=True)

    assert row.lazy and [(a.label, a.text) for a in row.risky_args] == [("Environment", "production")]
    assert [a.name for a in row.args] == ["environment"] and row.preview is None
    assert len(body.args) > 1 and body.risky_args == row.risky_args and body.preview is not None
    assert quiet.args == [] and quiet.title == call_view(staging, staging.tool_calls[0], agent=ops).title


def test_urls_show_their_host_apart_and_never_as_links() -> None:
    look_alike = arg_view("url", "https://p\u0430ypal.com/login")
    plain = arg_view("url", "http://example.com:8080/a?b=c")

    assert (look_alike.kind, look_alike.host) == ("url", "xn--pypal-4ve.com")
    assert (plain.kind, plain.host, plain.text) == ("url", "example.com", "http://example.com:8080/a?b=c")
    assert arg_view("url", "javascript:alert(1)").kind == "text"
    assert arg_view("note", "see https://x.example/ later").kind == "text"


def test_hostile_model_output_is_escaped_in_title_arguments_and_why(
    desk: Runtime, reviewer_client: Client
) -> None:
    start(desk, "hostile", "go")

    page = inbox(reviewer_client, "/agents/hostile/")

    assert "<script>alert(1)</script>" not in page and "<img src=x" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    [title] = text_of(page, "call-title")
    assert title.startswith("Open https://p\u0430ypal.com/login?x=<script> for <script>")
    assert '<span class="url-host">xn--pypal-4ve.com</span>' in page
    assert 'href="https://p' not in page  # a model's URL is never a link


def test_the_why_block_shows_the_ask_the_agent_the_key_results_the_tool_and_the_rule(
    desk: Runtime, reviewer_client: Client
) -> None:
    start(desk, "support", "Please refund $890 on A-1044, it never arrived")

    page = inbox(reviewer_client, "/agents/support/")

    why = re.search(r'<div class="why">(.*?)</div>\s*\n\s*<dl class="args">', page, re.S)
    assert why is not None
    text = html_lib.unescape(re.sub(r"<[^>]+>", " ", why.group(1)))
    text = " ".join(text.split())
    assert "Why approval: Refunds over $50.00 need a human's approval" in text
    assert "The user asked Please refund $890 on A-1044, it never arrived" in text
    assert "The agent said Let me look up A-1044 and refund it." in text
    assert "Earlier lookup_order found Status: shipped · Total cents: $890.00" in text
    assert "The tool: Refund part or all of an order." in text


def test_the_inbox_reads_no_snapshot(
    desk: Runtime, reviewer_client: Client, django_assert_max_num_queries: Any
) -> None:
    for n in range(3):
        start(desk, "support", f"Please refund ${100 + n} on A-1044")
    reviewer_client.get("/agents/support/")

    with django_assert_max_num_queries(12) as queries:
        page = reviewer_client.get("/agents/support/", **HX).content.decode()
    # The rows start folded: each body (the why among it) comes when the reviewer opens the row.
    assert page.count("call-body-lazy") == 3 and 'class="why"' not in page
    assert not any("snapshot" in q["sql"] for q in queries.captured_queries)

    with django_assert_max_num_queries(12 * 3):
        page = opened(reviewer_client, page)
    assert page.count('class="why"') == 3


def test_edit_form_is_built_from_the_tools_parameters(desk: Runtime, reviewer_client: Client) -> None:
    run_id = start(desk, "support", "Please refund $890 on A-1044")
    call = waiting_call(desk, "support", run_id)

    page = reviewer_client.get(f"/runs/{run_id}/").content.decode()
    folded = reviewer_client.get("/agents/support/").content.decode()
    opened_rows = opened(reviewer_client, folded)

    assert call.tool_name == "issue_refund"
    for html in (page, opened_rows):
        # Money in dollars, its currency before it; the tool's cents only once posted.
        assert re.search(
            r'<span class="input-unit"><span class="unit" aria-hidden="true">\$</span> '
            r'<input type="text" name="args-amount_cents" id="[^"]+" value="890.00" inputmode="decimal"',
            html,
        )
        assert re.search(r'<input type="text" name="args-order_id" id="[^"]+" value="A-1044"', html)
        assert 'name="edited_args"' in html  # the JSON: the advanced view
    # A folded inbox row has none of its forms until it opens; without JavaScript, a link to the run.
    assert 'name="args-amount_cents"' not in folded and 'name="edited_args"' not in folded
    assert re.search(
        rf'hx-get="/runs/{run_id}/calls/{call.tool_call_id}/\?agent=support&amp;next=/agents/support/" '
        r'hx-trigger="cs:load-body"',
        folded,
    )
    assert f'<a class="run-link" href="/runs/{run_id}/?next=/agents/support/">Open run' in folded


def test_edit_form_errors_are_one_per_field_and_decide_nothing(
    desk: Runtime, reviewer_client: Client
) -> None:
    run_id = start(desk, "support", "Please refund $890 on A-1044")
    call = waiting_call(desk, "support", run_id)
    url = f"/runs/{run_id}/calls/{call.tool_call_id}/approve"

    response = reviewer_client.post(
        url,
        {
            "agent": "support",
            "args_form": "1",
            "args-order_id": "A-1044",
            "args-amount_cents": "lots",
            "args-reason": "",
        },
        **HX,
    )

    page = response.content.decode()
    errors = re.findall(r'<div class="field-errors" id="([^"]+)_error" role="alert">([^<]*)</div>', page)
    assert [(field_id.rsplit("-", 1)[-1], message) for field_id, message in errors] == [
        ("amount_cents", "Enter an amount in USD, such as $40.00."),
        ("reason", "This field is required."),
    ]
    assert waiting_call(desk, "support", run_id).tool_call_id == call.tool_call_id  # still waiting


def test_edit_form_approves_with_the_edited_arguments(desk: Runtime, reviewer_client: Client) -> None:
    run_id = start(desk, "support", "Please refund $890 on A-1044")
    call = waiting_call(desk, "support", run_id)

    response = reviewer_client.post(
        f"/runs/{run_id}/calls/{call.tool_call_id}/approve",
        {
            "agent": "support",
            "args_form": "1",
            "args-order_id": "A-1044",
            "args-amount_cents": "45",
            "args-reason": "partial refund",
        },
        **HX,
    )

    page = response.content.decode()
    assert '<span class="badge verdict verdict-approved_with_edits">Approved with edits</span>' in page
    assert "Refunded $45.00 on A-1044" in page
    assert re.search(
        r'<span class="next-label">Then the run:</span> <span class="badge outcome-completed">', page
    )


def test_a_risky_approval_needs_the_box_ticked_checked_on_the_server(
    desk: Runtime, reviewer_client: Client
) -> None:
    run_id = start(desk, "ops", "deploy search to production")
    async_to_sync(desk.get_agent("ops").resume_stream)(
        {"start": "2026-12-01T22:00:00+00:00", "risk": "low"}, run_id=run_id
    )
    call = waiting_call(desk, "ops", run_id)
    url = f"/runs/{run_id}/calls/{call.tool_call_id}/approve"
    page = inbox(reviewer_client, "/agents/ops/")
    assert '<input type="checkbox" name="confirm_risky" value="yes" required> I checked this' in page

    refused = reviewer_client.post(url, {"agent": "ops"}, **HX).content.decode()

    assert "This call is marked risky: confirm that you checked it (“I checked this”)" in refused
    assert waiting_call(desk, "ops", run_id).tool_call_id == call.tool_call_id
    approved = reviewer_client.post(url, {"agent": "ops", "confirm_risky": "yes"}, **HX).content.decode()
    assert "verdict-approved" in approved and "search v2.4.1 is live on production" in approved


def test_editing_a_call_into_a_risky_one_needs_the_box_too(desk: Runtime, reviewer_client: Client) -> None:
    run_id = start(desk, "ops", "deploy search to staging")
    call = waiting_call(desk, "ops", run_id)
    page = inbox(reviewer_client, "/agents/ops/")
    assert 'name="confirm_risky"' not in page  # staging is not risky

    posted = {
        "agent": "ops",
        "args_form": "1",
        "args-service": "search",
        "args-version": "v2.4.1",
        "args-environment": "production",
    }
    refused = reviewer_client.post(f"/runs/{run_id}/calls/{call.tool_call_id}/approve", posted, **HX)

    assert "This call is marked risky" in refused.content.decode()
    assert waiting_call(desk, "ops", run_id).tool_call_id == call.tool_call_id


def test_decline_is_its_own_step_and_the_verdict_is_apart_from_what_the_run_did(
    desk: Runtime, reviewer_client: Client
) -> None:
    run_id = start(desk, "support", "Please refund $890 on A-1044")
    call = waiting_call(desk, "support", run_id)
    page = inbox(reviewer_client, "/agents/support/")
    assert re.search(
        r'<details class="decline">\s*<summary class="button danger-outline"[^>]*>Decline…</summary>', page
    )

    response = reviewer_client.post(
        f"/runs/{run_id}/calls/{call.tool_call_id}/decline", {"agent": "support", "reason": "Too much"}, **HX
    )

    decided = response.content.decode()
    assert '<span class="badge verdict verdict-declined">Declined</span>' in decided
    assert re.search(r'Then the run:</span> <span class="badge outcome-completed">Completed</span>', decided)


def test_the_resume_form_asks_its_question_with_a_date_time_input(
    desk: Runtime, reviewer_client: Client
) -> None:
    run_id = start(desk, "ops", "deploy search to production")

    page = reviewer_client.get(f"/runs/{run_id}/").content.decode()

    assert text_of(page, "call-title") == ["When may we deploy search to production?"]
    assert re.search(r'<input type="datetime-local" name="resume-start"', page)
    assert "Time zone: UTC" in page


def test_a_date_time_answer_is_sent_with_the_viewers_offset(
    desk: Runtime, reviewer_client: Client, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    run_id = start(desk, "ops", "deploy search to production")
    call = waiting_call(desk, "ops", run_id)

    reviewer_client.post(
        f"/runs/{run_id}/calls/{call.tool_call_id}/resume",
        {
            "agent": "ops",
            "resume-start": "2026-12-01T22:00",
            "resume-risk": "low",
            "resume-duration_minutes": "30",
        },
        **HX,
    )

    follow_up = waiting_call(desk, "ops", run_id)
    [answer] = follow_up.context.previous_answers
    assert answer.answer["start"] == "2026-12-01T22:00:00+01:00"
    page = inbox(reviewer_client, "/agents/ops/")
    assert "Answered before: When may we deploy search to production?" in page


def test_sub_agent_calls_are_decided_and_counted_on_the_supervisor_only(
    desk: Runtime, reviewer_client: Client
) -> None:
    run_id = start(desk, "coordinator", "deploy search to staging")

    supervisor = inbox(reviewer_client, "/agents/coordinator/")
    sub_agent = inbox(reviewer_client, "/agents/ops/")
    overview = reviewer_client.get("/agents/").content.decode()

    assert f'id="run-{run_id}"' in supervisor and "via Release engineer" in supervisor
    assert 'data-total="1"' in supervisor and ">Approve</button>" in supervisor
    assert 'data-total="0"' in sub_agent  # not counted as waiting here
    assert "Decided through a supervisor" in sub_agent and "read-only here" in sub_agent
    assert ">Approve</button>" not in sub_agent
    counts = dict(
        re.findall(r'<th scope="row"><a href="/agents/(\w+)/">.*?data-pending="(\d+)"', overview, re.S)
    )
    assert counts.get("coordinator") == "1" and counts.get("ops") == "0", counts
