"""A refund edited in dollars: the reviewer types 40, the tool gets 4000 cents, and every page that
shows the decision shows the change as a diff (the outcome, the run page, the audit log). A bad
amount is refused next to the field and decides nothing.

The agent is the demo's ``support`` (its ``issue_refund`` holds ``amount_cents`` as ``Money``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from agents_runtime import Agent, Runtime, scripted_model
from agents_runtime.store import DecisionAction, Outcome
from approvals import agents as served
from approvals.apps import compose
from approvals.models import AuditEntry
from approvals.store import DjangoRunStore
from demo import agents as demo_agents
from demo import tools as demo_tools

HX = {"HTTP_HX_REQUEST": "true"}
#: The diff of $890.00 edited to $40.00, as every page shows it.
AMOUNT_DIFF = re.compile(
    r'<dt><code>amount_cents</code></dt><dd class="diff-changed"><del class="diff-old">'
    r'<span class="visually-hidden">The model\'s: </span>\$890\.00</del>'
    r'<span class="diff-arrow" aria-hidden="true">→</span><ins class="diff-new">'
    r'<span class="visually-hidden">Approved: </span>\$40\.00</ins></dd>'
)


@pytest.fixture
def support(transactional_db: None) -> Iterator[Runtime]:
    agent = Agent(
        "support",
        name="Customer support",
        model=scripted_model(demo_agents._support_first_step),
        tools=[demo_tools.lookup_order, demo_tools.issue_refund],
    )
    runtime = Runtime(agents=[agent], storage=DjangoRunStore())
    previous = served.runtime()
    compose(runtime)
    yield runtime
    served.install(previous)


def refund_waiting(runtime: Runtime) -> tuple[str, str]:
    result = async_to_sync(runtime.get_agent("support").generate)("Please refund $890 on A-1044")
    assert result.status == "suspended"
    return result.run_id, result.tool_calls[0].tool_call_id


def approve(client: Client, run_id: str, call_id: str, amount: str) -> str:
    response = client.post(
        f"/runs/{run_id}/calls/{call_id}/approve",
        {
            "agent": "support",
            "args_form": "1",
            "args-order_id": "A-1044",
            "args-amount_cents": amount,
            "args-reason": "arrived late",
        },
        **HX,
    )
    assert response.status_code == 200
    return response.content.decode()


def test_typing_40_approves_4000_cents_and_every_page_shows_the_diff(
    support: Runtime, admin_member_client: Client
) -> None:
    run_id, call_id = refund_waiting(support)

    outcome = approve(admin_member_client, run_id, call_id, "40")

    (entry,) = AuditEntry.objects.filter(run_id=run_id, action=DecisionAction.APPROVE)
    assert entry.edited_args == {"order_id": "A-1044", "amount_cents": 4000, "reason": "arrived late"}
    assert "Refunded $40.00 on A-1044" in outcome
    assert AMOUNT_DIFF.search(outcome)
    # The reason changed too; the order id did not.
    assert "<dt><code>reason</code></dt>" in outcome and "<dt><code>order_id</code></dt>" not in outcome
    run_page = admin_member_client.get(f"/runs/{run_id}/").content.decode()
    assert AMOUNT_DIFF.search(run_page)
    audit_page = admin_member_client.get("/audit/").content.decode()
    assert AMOUNT_DIFF.search(audit_page)


@pytest.mark.parametrize(
    ("typed", "error"),
    [
        ("forty", "Enter an amount in USD, such as $40.00."),
        ("40.505", "USD amounts have at most 2 decimals: enter e.g. $40.50."),
        ("40,50", "Enter an amount in USD, such as $40.00."),
    ],
)
def test_a_bad_amount_is_refused_next_to_the_field_and_decides_nothing(
    support: Runtime, reviewer_client: Client, typed: str, error: str
) -> None:
    run_id, call_id = refund_waiting(support)

    page = approve(reviewer_client, run_id, call_id, typed)

    errors = re.findall(r'<div class="field-errors" id="([^"]+)_error" role="alert">([^<]*)</div>', page)
    assert [(i.rsplit("-", 1)[-1], m) for i, m in errors] == [("amount_cents", error)]
    assert f'value="{typed}"' in page  # what was typed stays
    assert not AuditEntry.objects.filter(run_id=run_id).exclude(outcome=Outcome.INVALID).exists()
    waiting = async_to_sync(support.get_agent("support").get_suspended_run)(run_id)
    assert [c.tool_call_id for c in waiting.tool_calls] == [call_id]
