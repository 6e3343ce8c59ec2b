"""A sub-agent's call on its supervisor's pages reads by its own tool, not by a namesake's.

``desk`` delegates to ``treasury``, and both have tools named ``refund``, ``lookup`` and ``ask``:
treasury's count US cents, desk's namesakes count yen. The decision path already judges a mirrored
call by treasury's tools (``test_nested_namesakes``); here every surface that shows or totals one
does too: the bulk preview (its total is part of what is approved), its groups, the card's earlier
results and answers, the notifications, and the audit log.
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.utils import timezone

from agents_runtime import Agent, Call, Reply, Runtime, ScriptContext, ToolContext, scripted_model, tool
from agents_runtime.presentation import Money
from agents_runtime.store import AgentRunToolCall
from approvals import agents as served
from approvals.apps import compose
from approvals.models import NotificationPreference
from approvals.notifications import remind_due
from approvals.services.suggestions import MIN_APPROVALS, suggestion_for
from approvals.store import DjangoRunStore
from tests.support.batches import key
from tests.support.inbox_rows import inbox
from tests.support.notification_sinks import MailSink, wait_for
from tests.support.users import make_user

CENTS = Money(cents=True, currency="USD")
YEN = Money(currency="JPY")
AMOUNT = {
    "type": "object",
    "properties": {"amount_cents": {"type": "integer"}},
    "required": ["amount_cents"],
    "additionalProperties": False,
}


def _treasury_first(ctx: ScriptContext) -> Call:
    if "lookup" in ctx.prompt:
        return Call("lookup", {"order": "A-1"})
    if "ask" in ctx.prompt:
        return Call("ask", {"question": "how much?"})
    return Call("refund", {"order": "A-1", "amount_cents": 89_000})


def _treasury_then(ctx: ScriptContext) -> Call | Reply:
    # After a lookup or an answer, the refund they led to; after a refund, done.
    if "lookup" in ctx.prompt or "ask" in ctx.prompt:
        return Call("refund", {"order": "A-1", "amount_cents": 89_000})
    return Reply("Refunded.")


def _desk_step(ctx: ScriptContext) -> Call:
    if "own" in ctx.prompt:
        return Call("refund", {"order": "D-1", "amount_cents": 500})
    return Call("agent_treasury", {"prompt": ctx.prompt})


def _build() -> Runtime:
    @tool(
        requires_approval=True,
        name="refund",
        title="Treasury refund {amount_cents|money}",
        fields={"amount_cents": CENTS},
        expires_after=timedelta(hours=2),
    )
    def treasury_refund(order: str, amount_cents: int) -> str:
        return f"treasury refunded {amount_cents} on {order}"

    @tool(name="lookup", key_results=["paid_cents"], fields={"paid_cents": CENTS})
    def treasury_lookup(order: str) -> dict[str, Any]:
        return {"paid_cents": 89_000}

    @tool(name="ask", resume_schema=AMOUNT, fields={"amount_cents": CENTS})
    def treasury_ask(ctx: ToolContext, question: str) -> str:
        if ctx.resume_data is None:
            ctx.suspend({"question": question})
        return f"heard {ctx.resume_data}"

    @tool(
        requires_approval=True,
        name="refund",
        title="Desk refund {amount_cents|money}",
        fields={"amount_cents": YEN},
    )
    def desk_refund(order: str, amount_cents: int) -> str:
        return f"desk refunded {amount_cents} on {order}"

    @tool(name="lookup", key_results=["paid_cents"], fields={"paid_cents": YEN})
    def desk_lookup(order: str) -> dict[str, Any]:
        return {"paid_cents": 1}

    @tool(name="ask", resume_schema=AMOUNT, fields={"amount_cents": YEN})
    def desk_ask(ctx: ToolContext, question: str) -> str:
        if ctx.resume_data is None:
            ctx.suspend({"question": question})
        return f"heard {ctx.resume_data}"

    treasury = Agent(
        "treasury",
        name="Treasury",
        model=scripted_model(_treasury_first, _treasury_then, Reply("Done.")),
        tools=[treasury_refund, treasury_lookup, treasury_ask],
    )
    desk = Agent(
        "desk",
        name="Desk",
        model=scripted_model(_desk_step, Reply("Handled.")),
        tools=[desk_refund, desk_lookup, desk_ask],
        agents=[treasury],
    )
    return Runtime(agents=[desk], storage=DjangoRunStore())


@pytest.fixture
def desk(transactional_db: None) -> Iterator[Agent]:
    runtime = _build()
    previous = served.runtime()
    compose(runtime)
    yield runtime.get_agent("desk")
    served.install(previous)


@pytest.fixture
def rita(desk: Agent) -> Client:
    client = Client()
    client.force_login(make_user("rita", "Reviewers"))
    return client


@pytest.fixture
def mail(settings: Any) -> Iterator[MailSink]:
    sink = MailSink()
    settings.MAILERS = sink.settings()
    settings.NOTIFY_COLLAPSE_SECONDS = 0.1
    yield sink
    sink.stop()


def start(desk: Agent, prompt: str) -> Any:
    started = async_to_sync(desk.generate)(prompt)
    assert started.status == "suspended", started
    return started


def waiting_call(desk: Agent, run_id: str) -> AgentRunToolCall:
    [call] = async_to_sync(desk.get_suspended_run)(run_id).tool_calls
    return call


def text_of(fragment: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


# -- the bulk preview ------------------------------------------------------------------------------


def _batch_page(rita: Client, *runs: Any) -> str:
    posted = rita.post("/agents/desk/batches/new", {"call": [key(r) for r in runs], "scope": "selected"})
    assert posted.status_code == 302, posted.content.decode()[:500]
    return rita.get(posted["Location"]).content.decode()


def test_the_bulk_total_reads_a_sub_agents_call_by_its_own_tools_money(desk: Agent, rita: Client) -> None:
    """Treasury's 89000 is US cents, $890.00: not ¥89,000 by desk's namesake (the total is part of
    what the reviewer approves)."""
    mirrored = start(desk, "refund")
    own = start(desk, "own refund")

    page = _batch_page(rita, mirrored, own)

    [total] = re.findall(r'<p class="batch-total">(.*?)</p>', page, re.S)
    assert text_of(total) == "In all: $890.00 + ¥500"
    [rule] = re.findall(r'<li class="batch-rule .*?</li>', page, re.S)
    assert text_of(rule).endswith("· $890.00 + ¥500")


def test_namesakes_are_two_groups_of_the_bulk_preview_each_by_its_own_tool(desk: Agent, rita: Client) -> None:
    mirrored = start(desk, "refund")
    own = start(desk, "own refund")

    page = _batch_page(rita, mirrored, own)

    headings = [text_of(h) for h in re.findall(r'<h2 id="batch-tool-\d+">(.*?)</h2>', page, re.S)]
    assert headings == ["refund \N{MULTIPLICATION SIGN} 1", "refund via Treasury \N{MULTIPLICATION SIGN} 1"]
    same = [text_of(s) for s in re.findall(r'<p class="batch-same">(.*?)</p>', page, re.S)]
    assert "amount_cents: ¥500" in same[0] and "amount_cents: $890.00" in same[1], same


# -- the card's earlier results and answers ----------------------------------------------------------


def test_an_earlier_result_of_a_sub_agents_run_reads_by_its_own_tool(desk: Agent, rita: Client) -> None:
    start(desk, "lookup then refund")

    page = inbox(rita, "/agents/desk/")

    assert "Earlier lookup found Paid cents: $890.00" in text_of(page)


def test_an_earlier_answer_in_a_sub_agents_run_reads_by_its_own_tool(desk: Agent, rita: Client) -> None:
    run = start(desk, "ask then refund")
    asked = waiting_call(desk, run.run_id)
    async_to_sync(desk.resume_stream)(
        {"amount_cents": 89_000}, run_id=run.run_id, tool_call_id=asked.tool_call_id, actor="rita"
    )
    assert waiting_call(desk, run.run_id).tool_name == "refund"

    page = text_of(inbox(rita, "/agents/desk/"))

    assert "Answered before: how much? Amount cents: $890.00" in page


# -- notifications ---------------------------------------------------------------------------------


def _wants_mail(username: str) -> None:
    user = make_user(username, "Reviewers")
    user.email = f"{username}@example.com"
    user.save()
    NotificationPreference.objects.create(user=user, mode="each")


def test_the_message_of_a_sub_agents_call_titles_it_by_its_own_tool(desk: Agent, mail: MailSink) -> None:
    _wants_mail("rita")

    start(desk, "refund")

    wait_for(lambda: len(mail.messages) == 1)
    assert (
        str(mail.messages[0]["Subject"])
        == "[Countersign] Treasury refund $890.00 waits for a decision on Desk"
    )


def test_the_reminder_of_a_sub_agents_call_titles_it_by_its_own_tool(
    desk: Agent, mail: MailSink, settings: Any
) -> None:
    settings.NOTIFY_REMINDER_BEFORE_SECONDS = 3600
    _wants_mail("rita")
    start(desk, "refund")
    wait_for(lambda: len(mail.messages) == 1)

    assert remind_due(timezone.now() + timedelta(minutes=61)) == 1

    wait_for(lambda: len(mail.messages) == 2)
    assert str(mail.messages[1]["Subject"]).startswith(
        "[Countersign] Deadline soon: Treasury refund $890.00 on Desk"
    )


# -- the receipt and the audit log ------------------------------------------------------------------


def _money_diff(before: str, after: str) -> str:
    return f"amount_cents The model's: {before} → Approved: {after}"


def test_the_receipt_and_audit_log_read_a_sub_agents_edited_call_by_its_own_tool(
    desk: Agent, rita: Client
) -> None:
    """Typed $400 on treasury's refund: the receipt's diff, the audit row's title and its diff read
    US cents as its card did, not yen by desk's namesake."""
    run = start(desk, "refund")
    call = waiting_call(desk, run.run_id)

    receipt = rita.post(
        f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve",
        {"agent": "desk", "args_form": "1", "args-order": "A-1", "args-amount_cents": "400"},
        HTTP_HX_REQUEST="true",
    )

    assert receipt.status_code == 200
    assert _money_diff("$890.00", "$400.00") in text_of(receipt.content.decode())
    auditor = Client()
    auditor.force_login(make_user("ada", "Admins"))
    page = auditor.get("/audit/").content.decode()
    titles = re.findall(r'<span class="c-tool" data-label="Call">(.*?)</span>\s*\n', page, re.S)
    assert [text_of(t) for t in titles] == ["Treasury refund $890.00 → Treasury refund $400.00"]
    assert _money_diff("$890.00", "$400.00") in text_of(page)


# -- the grants suggested from the history ------------------------------------------------------------


def _approve(rita: Client, run: Any) -> None:
    [call] = run.tool_calls
    answer = rita.post(f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve", {"agent": "desk"})
    assert answer.status_code in (200, 302)


def test_a_grant_is_suggested_for_a_tool_from_its_own_calls_not_a_sub_agents_namesakes(
    desk: Agent, rita: Client
) -> None:
    """Desk's grants never apply to its mirrors of treasury's calls: treasury's approvals suggest no
    grant of desk's own refund, which nobody has approved yet."""
    for _ in range(MIN_APPROVALS):
        _approve(rita, start(desk, "refund"))

    assert suggestion_for("desk", "refund") is None

    for _ in range(MIN_APPROVALS):
        _approve(rita, start(desk, "own refund"))
    suggested = suggestion_for("desk", "refund")
    assert suggested is not None and suggested.trial.approved_by_person == MIN_APPROVALS
