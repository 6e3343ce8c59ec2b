"""Money read from a schema's ``x-money`` as from a ``Money`` hint, an edit shown as a diff of the
model's arguments, and the "why" that says what earlier calls did not find.
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from asgiref.sync import async_to_sync
from django.template.loader import render_to_string
from django.test import Client
from pydantic import Field
from pydantic_ai import ModelRetry

from agents_runtime import Agent, Call, Runtime, scripted_model, tool
from approvals import agents as served
from approvals.apps import compose
from approvals.cards.args import arg_views
from approvals.cards.batch import money_total
from approvals.cards.diff import MAX_CHANGES, Change, args_diff
from approvals.models import BatchItem
from approvals.store import DjangoRunStore
from demo import agents as demo_agents
from demo import tools as demo_tools
from tests.support.inbox_rows import inbox

EUR_MINOR = {"x-money": {"currency": "EUR", "unit": "minor"}}


@tool(requires_approval=True)
def pay_supplier(vendor: str, amount: Annotated[int, Field(ge=0, json_schema_extra=EUR_MINOR)]) -> str:
    """Pays a supplier (money from the schema, no Python hint)."""
    return vendor


@tool
def find_customer(name: str) -> str:
    raise ModelRetry(f"No customer is named {name}")


def _after_a_failed_lookup(ctx: Any) -> Any:
    return Call("pay_supplier", {"vendor": "Acme", "amount": 1234}, say="Paying anyway.")


@pytest.fixture
def desk(transactional_db: None) -> Iterator[Runtime]:
    support = Agent(
        "support",
        name="Customer support",
        model=scripted_model(demo_agents._support_first_step),
        tools=[demo_tools.lookup_order, demo_tools.issue_refund, demo_tools.send_customer_email],
    )
    payer = Agent(
        "payer",
        model=scripted_model(Call("find_customer", {"name": "bob"}), _after_a_failed_lookup),
        tools=[find_customer, pay_supplier],
    )
    runtime = Runtime(agents=[support, payer], storage=DjangoRunStore())
    previous = served.runtime()
    compose(runtime)
    yield runtime
    served.install(previous)


def start(runtime: Runtime, agent_id: str, prompt: str) -> str:
    result = async_to_sync(runtime.get_agent(agent_id).generate)(prompt)
    assert result.status == "suspended", result
    return result.run_id


def why_text(page: str) -> str:
    why = re.search(r'<div class="why">(.*?)</div>\s*\n\s*<dl class="args">', page, re.S)
    assert why is not None
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", why.group(1))).split())


# -- money from the schema -----------------------------------------------------------------------


def test_a_schema_annotated_amount_reads_as_money_on_the_card_in_titles_and_totals() -> None:
    (amount,) = [
        a for a in arg_views({"vendor": "Acme", "amount": 123_456}, pay_supplier) if a.name == "amount"
    ]

    assert (amount.kind, amount.text) == ("money", "€1,234.56")
    assert pay_supplier.title_for({"vendor": "Acme", "amount": 1234}) == "Pay supplier · Acme · €12.34"
    items = [
        BatchItem(tool_name="pay_supplier", args={"vendor": "A", "amount": 1000}),
        BatchItem(tool_name="pay_supplier", args={"vendor": "B", "amount": 250}),
        BatchItem(tool_name="issue_refund", args={"amount_cents": 9900}),
    ]
    agent = Agent("mixed", model=scripted_model(), tools=[pay_supplier, demo_tools.issue_refund])
    assert money_total(items, agent) == "€12.50 + $99.00"


def test_a_batchs_total_is_never_rounded() -> None:
    """Past 28 digits Python's decimals round a sum: the total shown is what is approved."""
    items = [
        BatchItem(tool_name="issue_refund", args={"amount_cents": 10**30}),
        BatchItem(tool_name="issue_refund", args={"amount_cents": 1}),
    ]
    agent = Agent("refunds", model=scripted_model(), tools=[demo_tools.issue_refund])

    assert money_total(items, agent) == f"${10**28:,}.01"


# -- edits as a diff -----------------------------------------------------------------------------


def test_the_diff_lists_changed_leaves_with_money_as_money() -> None:
    model = {"order_id": "A-1044", "amount_cents": 89_000, "reason": "broken", "meta": {"tags": ["a", "b"]}}
    approved = {"order_id": "A-1044", "amount_cents": 4_000, "reason": "", "meta": {"tags": ["a", "c", "d"]}}

    diff = args_diff(model, approved, demo_tools.issue_refund)

    assert diff.changes == (
        Change("amount_cents", "changed", "$890.00", "$40.00"),
        Change("reason", "changed", '"broken"', '""'),
        Change("meta.tags[1]", "changed", '"b"', '"c"'),
        Change("meta.tags[2]", "added", after='"d"'),
    )
    assert not args_diff(model, dict(model), demo_tools.issue_refund)


def test_the_diff_shows_added_removed_and_retyped_values_and_counts_what_it_leaves_out() -> None:
    diff = args_diff({"a": 1, "b": True, "gone": None}, {"a": True, "b": True, "new": {"x": 1}})
    many = args_diff({str(n): n for n in range(MAX_CHANGES + 3)}, {})

    assert diff.changes == (
        Change("a", "changed", "1", "yes"),  # ``1 == True`` in Python, not in JSON
        Change("gone", "removed", before="—"),
        Change("new", "added", after='{"x": 1}'),
    )
    assert (len(many.changes), many.more) == (MAX_CHANGES, 3)


def test_the_diff_strikes_the_models_value_and_marks_the_approved_one_escaped() -> None:
    diff = args_diff({"note": "<b>old</b>", "amount_cents": 500}, {"note": "new", "amount_cents": 250},
                     demo_tools.issue_refund)  # fmt: skip

    html = render_to_string("approvals/partials/args_diff.html", {"diff": diff})

    assert (
        '<dt><code>amount_cents</code></dt><dd class="diff-changed"><del class="diff-old">'
        '<span class="visually-hidden">The model\'s: </span>$5.00</del>'
        '<span class="diff-arrow" aria-hidden="true">→</span><ins class="diff-new">'
        '<span class="visually-hidden">Approved: </span>$2.50</ins></dd>'
    ) in html
    assert "&quot;&lt;b&gt;old&lt;/b&gt;&quot;" in html and "<b>" not in html
    assert "style=" not in html  # strict CSP: classes only


# -- the why's negative results --------------------------------------------------------------------


def test_the_why_says_an_earlier_lookup_found_nothing(desk: Runtime, reviewer_client: Client) -> None:
    start(desk, "support", "Please refund $99 on A-9999, it never arrived")

    text = why_text(inbox(reviewer_client, "/agents/support/"))

    assert "Earlier lookup_order found nothing" in text
    assert "Earlier lookup_order found Status" not in text


def test_the_why_says_an_earlier_call_failed_and_why(desk: Runtime, reviewer_client: Client) -> None:
    start(desk, "payer", "pay bob's supplier")

    page = inbox(reviewer_client, "/agents/payer/")

    assert "Earlier find_customer failed: No customer is named bob" in why_text(page)
    assert '<div class="why-item why-result why-negative">' in page
