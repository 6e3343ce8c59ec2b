"""Management commands: ``run_agent`` for scripts, ``demo_setup`` for ``make run``."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command

from agents_runtime import Agent, Call, Reply, Runtime, scripted_model, tool
from agents_runtime.store import Deadline
from approvals import agents as served
from approvals.apps import compose
from approvals.models import AuditEntry, RoutingRule
from approvals.policy import Access, create_agent_groups
from approvals.services.suggestions import suggestions
from approvals.store import DjangoRunStore
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import ensure_groups


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_run_agent_prints_run_id_and_status(agents: DashboardAgents) -> None:
    output = run("run_agent", "helpdesk", "refund from the shell", "--thread", "t-cli", "--resource", "r-cli")

    listed = agents.suspended("helpdesk", thread_id="t-cli", resource_id="r-cli")
    assert len(listed) == 1
    assert f"run_id: {listed[0].run_id}" in output
    assert "status: suspended" in output
    assert "waiting: refund (approval)" in output


def test_run_agent_prints_the_answer_of_a_run_that_completes(agents: DashboardAgents) -> None:
    output = run("run_agent", "helpdesk", "transfer 5")

    assert "status: success" in output and "text: transfer: moved 5" in output


def test_run_agent_rejects_an_unknown_agent(agents: DashboardAgents) -> None:
    with pytest.raises(CommandError, match="known agents: helpdesk, boss, worker"):
        run("run_agent", "nope", "hello")


@pytest.mark.django_db(transaction=True)
def test_demo_setup_creates_the_demo_login_and_seeds_once(settings: object) -> None:
    ensure_groups()
    settings.AGENTS_RUNTIME = "demo.agents:runtime"  # type: ignore[attr-defined]
    first = run("demo_setup")
    second = run("demo_setup")
    waiting = sum(
        len(__import__("asgiref.sync").sync.async_to_sync(a.list_suspended_runs)().runs)
        for a in served.all_agents()
    )

    user = User.objects.get(username="reviewer")
    assert user.check_password("countersign-demo")
    assert user.has_perm("approvals.decide_runs") and user.has_perm("approvals.view_audit_log")
    assert "username 'reviewer', password 'countersign-demo'" in first
    assert "Seeded demo runs" in first
    assert "already waiting: not seeding" in second
    assert waiting > 0
    # The week of decided calls before them yields a grant to suggest (the grants page's).
    assert "Seeded decided calls: 23 decided by 'reviewer'" in first
    assert [s.summary for s in suggestions(Access.of(user))] == [
        "15 of 15 issue_refund calls where amount_cents is at most $120.00 approved by reviewers, "
        "none declined, none edited, in 7 days. Would have matched 15 of the last 17 decided calls: "
        "0 declined, 0 edited."
    ]


@pytest.mark.django_db(transaction=True)
def test_demo_setup_seeds_routing_rules_that_route_the_demo_agents_calls(settings: object) -> None:
    ensure_groups()
    settings.AGENTS_RUNTIME = "demo.agents:runtime"  # type: ignore[attr-defined]
    out = run("demo_setup")

    assert "Seeded demo routing rules: 2" in out
    assert list(RoutingRule.objects.order_by("id").values_list("agent_id", "route", "created_by_name")) == [
        ("support", "deny", "reviewer"),
        ("ops", "two", "reviewer"),
    ]
    big = async_to_sync(served.get("support").generate)("Refund $6000 on A-1042, please.")
    assert big.status == "success"
    assert AuditEntry.objects.get(run_id=big.run_id, action="decline").channel == "rule"


# -- grant --escalation ----------------------------------------------------------------------------


@pytest.fixture
def escalating(transactional_db: None) -> Iterator[Runtime]:
    """An agent whose refunds escalate to "Finance leads" after an hour."""

    @tool(
        requires_approval=True,
        expires_after=timedelta(hours=1),
        on_expiry="escalate",
        escalate_to="Finance leads",
    )
    def refund(order: str) -> str:
        return f"refunded {order}"

    model = scripted_model(lambda ctx: Call("refund", {"order": ctx.prompt}), Reply("Done."))
    runtime = Runtime(agents=[Agent("helpdesk", model=model, tools=[refund])], storage=DjangoRunStore())
    previous = served.runtime()
    compose(runtime)
    ensure_groups()
    yield runtime
    served.install(previous)


def test_grant_puts_a_user_in_a_group_the_tools_escalate_to_and_nothing_more(escalating: Runtime) -> None:
    User.objects.create_user("fay", password="x")

    printed = run("grant", "fay", "--escalation", "Finance leads")

    fay = User.objects.get(username="fay")
    assert list(fay.groups.values_list("name", flat=True)) == ["Finance leads"]
    assert not fay.has_perm("approvals.decide_runs")  # (the group is enough for the calls escalated to it)
    assert "fay added to: Finance leads" in printed
    run("grant", "fay", "--escalation", "Finance leads", "--revoke")
    assert not fay.groups.exists()


def test_grant_takes_a_group_a_waiting_call_was_escalated_to_by_its_runs_own_deadline(
    escalating: Runtime,
) -> None:
    User.objects.create_user("fay", password="x")
    deadline = Deadline(timedelta(minutes=5), "escalate", escalate_to="night shift")
    async_to_sync(escalating.get_agent("helpdesk").generate)("A-1", deadline=deadline)
    with pytest.raises(CommandError, match="No call escalates to 'night shift'"):
        run("grant", "fay", "--escalation", "night shift")  # not escalated yet
    assert async_to_sync(escalating.expire_due)(datetime.now(UTC) + timedelta(minutes=6)) == 1

    run("grant", "fay", "--escalation", "night shift")

    assert list(User.objects.get(username="fay").groups.values_list("name", flat=True)) == ["night shift"]


@pytest.mark.parametrize(
    ("group", "refusal"),
    [
        ("Finance lead", "No call escalates to 'Finance lead'. Escalation groups: Finance leads."),
        ("Reviewers", "not an escalation group; use --review, --admin or --audit"),
        ("agent:helpdesk", "not an escalation group"),
    ],
)
def test_grant_refuses_a_group_no_call_escalates_to(escalating: Runtime, group: str, refusal: str) -> None:
    User.objects.create_user("fay", password="x")

    with pytest.raises(CommandError, match=re.escape(refusal)):
        run("grant", "fay", "--escalation", group)

    assert not User.objects.get(username="fay").groups.exists()


def test_migrate_creates_the_groups_the_tools_escalate_to(escalating: Runtime) -> None:
    create_agent_groups(sender=None)

    assert Group.objects.filter(name__in=["Finance leads", "agent:helpdesk"]).count() == 2
