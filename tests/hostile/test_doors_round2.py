"""One door for every decision, round two: rules that leaked where two features meet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from agents_runtime import Agent, Call, Reply, Runtime, scripted_model, tool
from agents_runtime.routing import Route
from approvals import agents as served
from approvals.apps import compose
from approvals.models import AuditEntry
from approvals.policy import Access
from approvals.services import rules as rule_services
from approvals.services.requests import agent_token, register
from approvals.services.rules import RuleTerms
from approvals.store import DjangoRunStore
from tests.support.api import token_caller
from tests.support.runtime_helpers import ToolLog
from tests.support.users import ensure_groups, make_user

HX = {"HTTP_HX_REQUEST": "true"}


def waiting(runtime: Runtime, agent_id: str) -> list[str]:
    return [r.run_id for r in async_to_sync(runtime.get_agent(agent_id).list_suspended_runs)().runs]


# -- a sub-agent's call is judged by its own tool, not by a namesake ----------------------------------


@pytest.fixture
def team(transactional_db: None) -> Iterator[tuple[Runtime, ToolLog]]:
    """``desk`` delegates to ``billing`` (a plain ``refund``) and ``treasury`` (a ``refund`` of its own
    that needs two approvals, separates duties and is risky above all)."""
    log = ToolLog()

    @tool(requires_approval=True, name="refund")
    def billing_refund(order: str) -> str:
        log.record(agent="billing", order=order)
        return f"billing refunded {order}"

    @tool(requires_approval=True, name="refund", confirm=True, approvals=2, separate_duties=True)
    def treasury_refund(order: str) -> str:
        log.record(agent="treasury", order=order)
        return f"treasury refunded {order}"

    billing = Agent(
        "billing",
        model=scripted_model(lambda ctx: Call("refund", {"order": "B-1"}), Reply("Done.")),
        tools=[billing_refund],
    )
    treasury = Agent(
        "treasury",
        model=scripted_model(lambda ctx: Call("refund", {"order": "T-1"}), Reply("Done.")),
        tools=[treasury_refund],
    )
    desk = Agent(
        "desk",
        model=scripted_model(lambda ctx: Call("agent_treasury", {"prompt": "refund T-1"}), Reply("Handled.")),
        agents=[billing, treasury],
    )
    runtime = Runtime(agents=[desk], storage=DjangoRunStore())
    previous = served.runtime()
    compose(runtime)
    ensure_groups()
    yield runtime, log
    served.install(previous)


def test_a_sub_agents_call_is_judged_by_its_own_tool_not_by_a_sibling_namesake(
    team: tuple[Runtime, ToolLog],
) -> None:
    runtime, log = team
    rita = make_user("rita", "Reviewers")
    started = async_to_sync(runtime.get_agent("desk").generate)("go", started_by="rita")
    assert started.status == "suspended"
    call_id = started.tool_calls[0].tool_call_id
    url = f"/api/v1/agents/desk/runs/{started.run_id}/calls/{call_id}/approve"

    # treasury's refund asks for "I checked this", two approvals, and never its starter's.
    answer = token_caller(rita)("POST", url, {})

    assert answer.status_code == 409 and answer.json()["code"] == "risky_unconfirmed", answer.content
    confirmed = token_caller(rita)("POST", url, {"confirm": True})
    assert confirmed.status_code == 403 and "separation of duties" in confirmed.json()["error"]
    assert log.calls == [] and waiting(runtime, "desk") == [started.run_id]


# -- separation of duties is not lifted by a routing rule the starter wrote ---------------------------


@pytest.fixture
def treasury(transactional_db: None) -> Iterator[tuple[Runtime, ToolLog]]:
    """``treasury`` moves money: ``transfer`` separates duties (its starter never approves it)."""
    log = ToolLog()

    @tool(requires_approval=True, separate_duties=True)
    def transfer(to: str, amount: int) -> str:
        log.record(to=to, amount=amount)
        return f"sent {amount} to {to}"

    runtime = Runtime(
        agents=[
            Agent(
                "treasury",
                model=scripted_model(
                    lambda ctx: Call("transfer", {"to": ctx.prompt, "amount": 10}), Reply("Done.")
                ),
                tools=[transfer],
            )
        ],
        storage=DjangoRunStore(),
    )
    previous = served.runtime()
    compose(runtime)
    ensure_groups()
    yield runtime, log
    served.install(previous)


def test_an_allow_rule_never_approves_a_call_its_author_started_when_the_tool_separates_duties(
    treasury: tuple[Runtime, ToolLog],
) -> None:
    """A standing grant of ada's never approves ada's own run's call (the grant is her approval);
    a routing rule ada wrote decides in her name too, so it must not either."""
    runtime, log = treasury
    ada = make_user("ada", "Admins")
    rule_services.add_rule(Access.of(ada), "treasury", RuleTerms("transfer", Route.ALLOW))

    started = token_caller(ada)("POST", "/api/agents/treasury/generate", {"messages": "mallory"})

    assert started.status_code == 200, started.content
    assert log.calls == [], "ada's own rule approved the call ada started"
    assert len(waiting(runtime, "treasury")) == 1


# -- an approval request is withdrawn only by whoever asked ------------------------------------------


def test_only_whoever_asked_withdraws_an_approval_request(treasury: tuple[Runtime, ToolLog]) -> None:
    """The external agent asks; a reviewer's token (who may ask for that agent too) cannot withdraw
    the agent's request: withdrawing is the requester's own step (``NotTheRequester``), a reviewer
    declines it at the desk, on the record, under the desk's rules (a colleague's claim, ...)."""
    register("payer", name="Payments (elsewhere)")
    payer = Client()
    token = agent_token("payer", name="t").plaintext
    asked = payer.post(
        "/api/v1/approval-requests",
        json.dumps({"agent": "payer", "tool": "pay", "args": {"to": "ann", "amount": 40}}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert asked.status_code == 201, asked.content
    request_id = asked.json()["id"]
    bob = make_user("bob", "Reviewers")

    withdrawn = token_caller(bob)(
        "POST", f"/api/v1/approval-requests/{request_id}/cancel", {"reason": "mine now"}
    )

    assert withdrawn.status_code != 200, withdrawn.content
    assert (
        not AuditEntry.objects.filter(run_id=request_id, action="cancel").exclude(outcome="refused").exists()
    )
    assert waiting(runtime_of(), "payer") == [request_id]


def runtime_of() -> Runtime:
    return served.runtime()


# -- nobody answering is not "another reviewer" ----------------------------------------------------


def test_a_requester_chosen_approve_deadline_never_approves_a_tool_that_separates_duties(
    treasury: tuple[Runtime, ToolLog],
) -> None:
    """rita asks for a call of a tool that separates duties (she may never approve it herself), with
    a deadline whose default is "approve": letting it run out must not approve it with no reviewer
    at all (an approval of such a tool names its reviewer; the deadline's names nobody)."""
    register("payer", tools={"pay": {"separate_duties": True}})
    rita = make_user("rita", "Reviewers")
    asked = token_caller(rita)(
        "POST",
        "/api/v1/approval-requests",
        {
            "agent": "payer",
            "tool": "pay",
            "args": {"to": "rita", "amount": 900},
            "deadline": {"inSeconds": 60, "default": "approve"},
        },
    )
    assert asked.status_code == 201, asked.content
    own = token_caller(rita)(
        "POST", f"/api/v1/agents/payer/runs/{asked.json()['id']}/calls/request/approve", {}
    )
    assert own.status_code == 403  # separation of duties: never rita's to approve

    async_to_sync(runtime_of().expire_due)(datetime.now(UTC) + timedelta(minutes=2))

    read = token_caller(rita)("GET", f"/api/v1/approval-requests/{asked.json()['id']}")
    assert read.json()["status"] == "expired", read.content
