"""One door for every decision: the same rule holds through every entry point.

Three rules used to leak between doors. Each is tried here through every door it applies to (the
card's buttons, which the keyboard presses; bulk; the v1 API; the Mastra routes; standing grants;
deadline defaults; the Django admin for reading):

- an escalation-only reviewer sees and decides the calls escalated to them, and nothing else of
  the agent, and their grants can never cover other calls;
- a risky call is approved only with "I checked this" (a grant only if made for risky calls, a
  deadline's default never);
- an admin designated for one agent reads only that agent's rows in the Django admin.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, Permission, User

from agents_runtime import Agent, Call, Reply, Runtime, fingerprint, scripted_model, tool
from agents_runtime.routing import Route
from agents_runtime.store import Deadline
from approvals import agents as served
from approvals.apps import compose
from approvals.models import AuditEntry, Batch, GrantRecord, WebhookDelivery, WebhookEndpoint
from approvals.policy import Access
from approvals.services import batches
from approvals.services import rules as rule_services
from approvals.services.rules import RuleTerms
from approvals.store import DjangoRunStore
from tests.support.api import token_caller
from tests.support.runtime_helpers import ToolLog
from tests.support.users import ensure_groups, make_user, signed_in

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def ops(transactional_db: None) -> Iterator[tuple[Runtime, ToolLog]]:
    """``ops`` deploys (production is risky; grants allowed) and ``helpdesk`` refunds."""
    log = ToolLog()

    @tool(requires_approval=True, risky={"environment": ["production"]})
    def deploy(service: str, environment: str) -> str:
        log.record(service=service, environment=environment)
        return f"{service} is live on {environment}"

    @tool(requires_approval=True)
    def refund(order: str) -> str:
        log.record(order=order)
        return f"refunded {order}"

    def deploy_step(ctx: Any) -> Call:
        service, environment = ctx.prompt.split()
        return Call("deploy", {"service": service, "environment": environment})

    runtime = Runtime(
        agents=[
            Agent("ops", model=scripted_model(deploy_step, Reply("Done.")), tools=[deploy]),
            Agent(
                "helpdesk",
                model=scripted_model(lambda ctx: Call("refund", {"order": ctx.prompt}), Reply("Done.")),
                tools=[refund],
            ),
        ],
        storage=DjangoRunStore(),
    )
    previous = served.runtime()
    compose(runtime)
    ensure_groups()
    yield runtime, log
    served.install(previous)


def park(runtime: Runtime, agent_id: str, prompt: str, **options: Any) -> Any:
    result = async_to_sync(runtime.get_agent(agent_id).generate)(prompt, **options)
    assert result.status == "suspended", result
    return result


def call_of(run: Any) -> str:
    return str(run.tool_calls[0].tool_call_id)


def waiting(runtime: Runtime, agent_id: str) -> list[str]:
    return [r.run_id for r in async_to_sync(runtime.get_agent(agent_id).list_suspended_runs)().runs]


# -- escalation only -----------------------------------------------------------------------------------


@pytest.fixture
def lead(ops: tuple[Runtime, ToolLog]) -> User:
    """A member of "leads" only: may decide (the group holds the permission), sees no agent."""
    leads, _ = Group.objects.get_or_create(name="leads")
    leads.permissions.add(Permission.objects.get(codename="decide_runs"))
    user = User.objects.create_user("leo", password="x")
    user.groups.add(leads)
    return user


def escalated_and_not(runtime: Runtime) -> tuple[Any, Any]:
    deadline = Deadline(timedelta(minutes=5), "escalate", escalate_to="leads")
    escalated = park(runtime, "helpdesk", "A-1", deadline=deadline)
    other = park(runtime, "helpdesk", "A-2", deadline=timedelta(hours=1))
    assert async_to_sync(runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6)) == 1
    return escalated, other


def test_an_escalation_only_reviewer_gets_the_escalated_calls_through_the_api_and_nothing_else(
    ops: tuple[Runtime, ToolLog], lead: User
) -> None:
    runtime, log = ops
    escalated, other = escalated_and_not(runtime)
    call = token_caller(lead)

    listed = json.loads(call("GET", "/api/agents/helpdesk/suspended-runs").content)
    assert [r["runId"] for r in listed["runs"]] == [escalated.run_id] and listed["total"] == 1
    assert call("GET", f"/api/v1/agents/helpdesk/runs/{other.run_id}").status_code == 404
    assert call("GET", f"/api/v1/agents/helpdesk/runs/{escalated.run_id}").status_code == 200
    started = call("POST", "/api/agents/helpdesk/stream", {"messages": "A-3"})
    assert started.status_code == 403 and "escalated to you" in started.json()["error"]
    refused = call(
        "POST",
        "/api/agents/helpdesk/approve-tool-call",
        {"runId": other.run_id, "toolCallId": call_of(other)},
    )
    assert refused.status_code == 404
    v1 = call("POST", f"/api/v1/agents/helpdesk/runs/{other.run_id}/calls/{call_of(other)}/approve", {})
    assert v1.status_code == 404
    assert log.calls == [] and set(waiting(runtime, "helpdesk")) == {escalated.run_id, other.run_id}

    taken = call(
        "POST", f"/api/v1/agents/helpdesk/runs/{escalated.run_id}/calls/{call_of(escalated)}/approve", {}
    )
    assert taken.status_code == 200 and taken.json()["outcome"] == "completed"
    assert log.calls == [{"order": "A-1"}]


def test_an_escalation_only_reviewer_cannot_start_runs_on_the_dashboard_nor_make_grants(
    ops: tuple[Runtime, ToolLog], lead: User
) -> None:
    runtime, log = ops
    escalated, _ = escalated_and_not(runtime)
    client = signed_in(lead)

    assert client.post("/runs/new/", {"agent": "helpdesk", "prompt": "A-9"}).status_code in (400, 403)
    allow = client.post(
        f"/runs/{escalated.run_id}/calls/{call_of(escalated)}/approve",
        {"agent": "helpdesk", "grant-scope": "everyone", "grant-lasts": "1d"},
        **HX,
    )
    assert "escalated to you" in allow.content.decode()
    assert GrantRecord.objects.count() == 0 and log.calls == []


def test_a_grant_only_approves_what_its_maker_may_decide_now(
    ops: tuple[Runtime, ToolLog], lead: User
) -> None:
    runtime, log = ops
    helpdesk = runtime.get_agent("helpdesk")
    # Made through the runtime (as a script could), by the escalation-only lead: it covers nothing
    # that was not escalated to them.
    request = helpdesk.grant_request("refund", scope="everyone", created_by="leo", max_uses=5)
    async_to_sync(helpdesk.add_grant)(request)

    run = park(runtime, "helpdesk", "A-5")

    assert log.calls == [] and waiting(runtime, "helpdesk") == [run.run_id]


# -- risky calls -----------------------------------------------------------------------------------------


@pytest.fixture
def reviewer(ops: tuple[Runtime, ToolLog]) -> User:
    return make_user("rita", "Reviewers")


def test_a_risky_call_needs_i_checked_this_through_the_v1_api(
    ops: tuple[Runtime, ToolLog], reviewer: User
) -> None:
    runtime, log = ops
    run = park(runtime, "ops", "search production")
    url = f"/api/v1/agents/ops/runs/{run.run_id}/calls/{call_of(run)}/approve"
    call = token_caller(reviewer)

    refused = call("POST", url, {})

    assert refused.status_code == 409 and refused.json()["code"] == "risky_unconfirmed"
    assert log.calls == [] and waiting(runtime, "ops") == [run.run_id]
    # "I checked this" is a JSON true, nothing that reads as one: anything else is a 400 naming it.
    for loose in ("yes", "on", "1", 1):
        malformed = call("POST", url, {"confirm": loose, "confirmRerun": False})
        assert malformed.status_code == 400 and malformed.json()["issues"][0]["field"] == "confirm", loose
    assert call("POST", url, {"confirmRerun": "true"}).json()["issues"][0]["field"] == "confirmRerun"
    assert log.calls == [] and waiting(runtime, "ops") == [run.run_id]
    taken = call("POST", url, {"confirm": True})
    assert taken.status_code == 200 and log.calls == [{"service": "search", "environment": "production"}]


def test_mastras_route_refuses_a_risky_call_and_names_the_dashboard(
    ops: tuple[Runtime, ToolLog], reviewer: User
) -> None:
    runtime, log = ops
    run = park(runtime, "ops", "search production")

    refused = token_caller(reviewer)(
        "POST", "/api/agents/ops/approve-tool-call", {"runId": run.run_id, "toolCallId": call_of(run)}
    )

    body = refused.json()
    assert refused.status_code == 409 and body["code"] == "risky_unconfirmed"
    assert body["dashboard"] == f"/runs/{run.run_id}/" and f"/runs/{run.run_id}/" in body["error"]
    assert log.calls == [] and waiting(runtime, "ops") == [run.run_id]


def test_bulk_approval_leaves_risky_calls_out_and_says_so(
    ops: tuple[Runtime, ToolLog], reviewer: User
) -> None:
    runtime, log = ops
    risky = park(runtime, "ops", "search production")
    plain = park(runtime, "ops", "search staging")
    access = served_access(reviewer, "ops")
    batch = batches.batch_prepare(
        access, selection=[(risky.run_id, call_of(risky)), (plain.run_id, call_of(plain))]
    )
    assert batches.batch_start(access.access, batch, action="approve")

    batches.batch_run(batch.pk)

    items = {i.run_id: i for i in Batch.objects.get(pk=batch.pk).items.all()}
    assert items[plain.run_id].state == "decided"
    assert items[risky.run_id].state == "skipped" and "marked risky" in items[risky.run_id].detail
    assert log.calls == [{"service": "search", "environment": "staging"}]
    assert waiting(runtime, "ops") == [risky.run_id]


def served_access(user: User, agent_id: str) -> Any:
    from approvals.policy import Access

    return Access.of(User.objects.get(pk=user.pk)).for_agent(agent_id)


def test_a_grant_approves_a_risky_call_only_when_made_for_risky_calls(ops: tuple[Runtime, ToolLog]) -> None:
    runtime, log = ops
    make_user("rita", "Reviewers")
    agent = runtime.get_agent("ops")
    # Scoped to staging by its condition... and a production deploy is what it must never approve.
    made = agent.grant_request("deploy", scope="everyone", created_by="rita", max_uses=5)
    async_to_sync(agent.add_grant)(made)

    production = park(runtime, "ops", "search production")
    staging = async_to_sync(agent.generate)("search staging")

    assert staging.status == "success" and waiting(runtime, "ops") == [production.run_id]
    for_risky = agent.grant_request(
        "deploy", scope="everyone", created_by="rita", max_uses=5, covers_risky=True
    )
    grant = async_to_sync(agent.add_grant)(for_risky)
    later = async_to_sync(agent.generate)("billing production")
    assert later.status == "success"
    row = AuditEntry.objects.get(run_id=later.run_id)
    assert row.grant_id == grant.id and "made for risky calls" in row.reason
    assert log.calls == [
        {"service": "search", "environment": "staging"},
        {"service": "billing", "environment": "production"},
    ]


def test_nobody_answering_never_approves_a_risky_call(ops: tuple[Runtime, ToolLog]) -> None:
    runtime, log = ops
    approve_when_due = Deadline(timedelta(minutes=5), "approve")
    risky = park(runtime, "ops", "search production", deadline=approve_when_due)
    plain = park(runtime, "ops", "search staging", deadline=approve_when_due)

    assert async_to_sync(runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6)) == 2

    assert log.calls == [{"service": "search", "environment": "staging"}]
    rows = {r.run_id: r for r in AuditEntry.objects.filter(action="expire")}
    assert rows[plain.run_id].outcome_detail.endswith(": approved. Recorded; the run continues.")
    assert (
        "marked risky" in rows[risky.run_id].outcome_detail
        and ": declined." in rows[risky.run_id].outcome_detail
    )


# -- the Django admin ------------------------------------------------------------------------------------


def test_an_admin_designated_for_one_agent_reads_only_its_rows_in_the_django_admin(
    ops: tuple[Runtime, ToolLog], reviewer: User
) -> None:
    runtime, _ = ops
    Group.objects.get_or_create(name="agent:ops")
    admin = make_user("ada", "Admins", "agent:ops")
    admin.is_staff = True
    admin.save()
    endpoint = WebhookEndpoint.objects.create(url="https://hooks.example.com/x", events=["call-decided"])
    for agent_id, prompt in (("ops", "search staging"), ("helpdesk", "A-7")):
        run = park(runtime, agent_id, prompt)
        async_to_sync(runtime.get_agent(agent_id).decline_tool_call)(
            run_id=run.run_id, tool_call_id=call_of(run)
        )
        WebhookDelivery.objects.create(
            endpoint=endpoint,
            message_id=f"msg-{agent_id}",
            event_type="call-decided",
            payload={"type": "call-decided", "data": {"agentId": agent_id, "runId": run.run_id}},
        )
    client = signed_in(admin)

    audit = client.get("/admin/approvals/auditentry/").content.decode()
    deliveries = client.get("/admin/approvals/webhookdelivery/").content.decode()

    ops_row, help_row = (AuditEntry.objects.get(agent_id=a) for a in ("ops", "helpdesk"))
    assert f"/admin/approvals/auditentry/{ops_row.pk}/" in audit
    assert f"/admin/approvals/auditentry/{help_row.pk}/" not in audit
    assert client.get(f"/admin/approvals/auditentry/{help_row.pk}/change/").status_code in (302, 404)
    ops_delivery, help_delivery = (
        WebhookDelivery.objects.get(message_id=f"msg-{a}") for a in ("ops", "helpdesk")
    )
    assert f"/admin/approvals/webhookdelivery/{ops_delivery.pk}/" in deliveries
    assert f"/admin/approvals/webhookdelivery/{help_delivery.pk}/" not in deliveries
    # An endpoint that hears of every agent is not theirs to read or change.
    assert (
        f"/admin/approvals/webhookendpoint/{endpoint.pk}/"
        not in client.get("/admin/approvals/webhookendpoint/").content.decode()
    )


def test_a_decision_on_arguments_the_call_no_longer_has_is_refused(
    ops: tuple[Runtime, ToolLog], reviewer: User
) -> None:
    runtime, log = ops
    run = park(runtime, "ops", "search staging")
    url = f"/runs/{run.run_id}/calls/{call_of(run)}/approve"
    client = signed_in(reviewer)
    stale = fingerprint({"service": "search", "environment": "production"})

    refused = client.post(url, {"agent": "ops", "seen": stale}, **HX)

    assert "changed since you saw it" in refused.content.decode()
    assert log.calls == [] and waiting(runtime, "ops") == [run.run_id]
    shown = fingerprint(run.tool_calls[0].args)
    assert f'name="seen" value="{shown}"' in client.get(f"/runs/{run.run_id}/").content.decode()
    client.post(url, {"agent": "ops", "seen": shown}, **HX)
    assert log.calls == [{"service": "search", "environment": "staging"}]


@pytest.mark.parametrize("posted", ["not-a-fingerprint", "F" * 32, "a" * 5000])
def test_a_card_that_posts_something_else_than_a_fingerprint_decides_nothing(
    ops: tuple[Runtime, ToolLog], reviewer: User, posted: str
) -> None:
    """A mangled or forged ``seen`` binds the decision as the API's ``fingerprint`` does: refused as a
    stale card, never taken as a decision bound to nothing."""
    runtime, log = ops
    run = park(runtime, "ops", "search staging")
    url = f"/runs/{run.run_id}/calls/{call_of(run)}/approve"

    refused = signed_in(reviewer).post(url, {"agent": "ops", "seen": posted}, **HX)

    assert "changed since you saw it" in refused.content.decode()
    assert log.calls == [] and waiting(runtime, "ops") == [run.run_id]
    (row,) = AuditEntry.objects.filter(run_id=run.run_id)
    assert row.outcome == "refused" and row.outcome_detail.endswith("(arguments_changed)")


# -- risky values as the tool receives them ----------------------------------------------------------


@pytest.fixture
def payments(transactional_db: None) -> Iterator[tuple[Runtime, ToolLog]]:
    """``payments``: ``deploy`` (production is risky, and the default) and ``refund`` (666 cents and
    ``force`` are risky). The prompt is "<tool> <JSON arguments>", the model's call as sent."""
    log = ToolLog()

    @tool(requires_approval=True, risky={"environment": ["production"]})
    def deploy(service: str, environment: str = "production") -> str:
        log.record(tool="deploy", service=service, environment=environment)
        return f"{service} is live on {environment}"

    @tool(requires_approval=True, risky={"amount_cents": [666], "force": [True]})
    def refund(amount_cents: int, force: bool = False) -> str:
        log.record(tool="refund", amount_cents=amount_cents, force=force)
        return "refunded"

    def step(ctx: Any) -> Call:
        name, args = ctx.prompt.split(" ", 1)
        return Call(name, json.loads(args))

    runtime = Runtime(
        agents=[Agent("payments", model=scripted_model(step, Reply("Done.")), tools=[deploy, refund])],
        storage=DjangoRunStore(),
    )
    previous = served.runtime()
    compose(runtime)
    ensure_groups()
    make_user("rita", "Reviewers")
    yield runtime, log
    served.install(previous)


def _ask(runtime: Runtime, prompt: str, **options: Any) -> Any:
    return async_to_sync(runtime.get_agent("payments").generate)(prompt, **options)


def _granted(runtime: Runtime, tool_name: str) -> None:
    agent = runtime.get_agent("payments")
    request = agent.grant_request(tool_name, scope="everyone", created_by="rita", max_uses=5)
    async_to_sync(agent.add_grant)(request)  # not made for risky calls


@pytest.mark.parametrize("decider", ["grant", "allow rule", "deadline"])
def test_a_risky_value_the_tool_takes_by_default_is_never_approved_by_an_automatic_decider(
    payments: tuple[Runtime, ToolLog], decider: str
) -> None:
    """``environment`` left out is "production": risky, whatever the model wrote."""
    runtime, log = payments
    options: dict[str, Any] = {}
    if decider == "grant":
        _granted(runtime, "deploy")
    elif decider == "allow rule":
        admin = Access.of(make_user("ada", "Admins"))
        rule_services.add_rule(
            admin, "payments", RuleTerms("deploy", Route.ALLOW, condition='service == "api"')
        )
    else:
        options["deadline"] = Deadline(timedelta(minutes=5), on_expiry="approve")

    assert _ask(runtime, 'deploy {"service": "api"}', **options).status == "suspended"
    async_to_sync(runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6))

    assert log.calls == []  # (the deadline declines it: "nobody answering never approves it")
    waiting = async_to_sync(runtime.get_agent("payments").list_suspended_runs)().total
    assert waiting == (0 if decider == "deadline" else 1)


def test_a_deadline_never_stands_in_for_the_votes_a_routing_rule_asks_for(
    payments: tuple[Runtime, ToolLog],
) -> None:
    """The rule says two people approve refunds; one did, nobody else answered: the deadline's
    "approve" declines it instead, saying why, and the tool never runs."""
    runtime, log = payments
    admin = Access.of(make_user("ada", "Admins"))
    rule_services.add_rule(admin, "payments", RuleTerms("refund", Route.TWO))
    deadline = Deadline(timedelta(minutes=5), on_expiry="approve")
    run = _ask(runtime, 'refund {"amount_cents": 5}', deadline=deadline)
    agent = runtime.get_agent("payments")
    (call,) = run.tool_calls
    async_to_sync(agent.approve_tool_call)(run_id=run.run_id, tool_call_id=call.tool_call_id, actor="rita")
    assert async_to_sync(agent.list_suspended_runs)().total == 1  # one vote of two

    assert async_to_sync(runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6)) == 1

    assert log.calls == [] and async_to_sync(agent.list_suspended_runs)().total == 0
    (row,) = AuditEntry.objects.filter(run_id=run.run_id, action="expire")
    assert row.resume_data == {"approved": False}
    assert "needs 2 approvals by distinct reviewers (1 given)" in row.reason


@pytest.mark.parametrize(
    ("prompt", "then"),
    [
        ('refund {"amount_cents": 5}', "it is approved"),
        ('refund {"amount_cents": 666}', "it is declined"),  # risky
        ('deploy {"service": "api"}', "it is declined"),  # risky by default
    ],
)
def test_a_cards_deadline_says_what_nobody_answering_will_do(
    payments: tuple[Runtime, ToolLog], prompt: str, then: str
) -> None:
    """The card tells what the rules will do, not only what the deadline asked for."""
    runtime, _log = payments
    run = _ask(runtime, prompt, deadline=Deadline(timedelta(minutes=5), on_expiry="approve"))

    page = signed_in(User.objects.get(username="rita")).get(f"/runs/{run.run_id}/").content.decode()

    assert f"then {then} unless someone decides" in page


def test_a_cards_deadline_says_a_call_needing_two_approvals_is_declined(
    payments: tuple[Runtime, ToolLog],
) -> None:
    runtime, _log = payments
    admin = Access.of(make_user("ada", "Admins"))
    rule_services.add_rule(admin, "payments", RuleTerms("refund", Route.TWO))
    deadline = Deadline(timedelta(minutes=5), on_expiry="approve")
    run = _ask(runtime, 'refund {"amount_cents": 5}', deadline=deadline)

    page = signed_in(admin.user).get(f"/runs/{run.run_id}/").content.decode()

    assert "then it is declined unless someone decides" in page


@pytest.mark.parametrize("args", [{"amount_cents": "666"}, {"amount_cents": 5, "force": "true"}])
def test_a_value_the_tool_converts_to_a_risky_one_is_risky(
    payments: tuple[Runtime, ToolLog], args: dict[str, Any]
) -> None:
    """The model's "666" is the tool's 666: a grant not made for risky calls leaves it waiting."""
    runtime, log = payments
    _granted(runtime, "refund")

    assert _ask(runtime, f"refund {json.dumps(args)}").status == "suspended"

    assert log.calls == []


def test_a_deny_rule_is_not_stepped_round_by_a_value_sent_as_text(payments: tuple[Runtime, ToolLog]) -> None:
    """Conditions read the arguments as the tool receives them: "true" for a bool is true."""
    runtime, log = payments
    admin = Access.of(make_user("ada", "Admins"))
    rule_services.add_rule(admin, "payments", RuleTerms("refund", Route.DENY, condition="force == true"))
    rule_services.add_rule(admin, "payments", RuleTerms("refund", Route.ALLOW))

    _ask(runtime, 'refund {"amount_cents": 5, "force": "true"}')

    assert log.calls == []
    assert AuditEntry.objects.filter(agent_id="payments", tool_name="refund", action="decline").exists()


def test_a_changed_rule_decides_on_its_changers_rights_and_in_their_name(
    payments: tuple[Runtime, ToolLog],
) -> None:
    """Its terms are whoever wrote them last: bob's "allow" stops when bob leaves, though ada, who
    made the rule, still may; while bob may, the record names bob."""
    runtime, log = payments
    ada, bob = (Access.of(make_user(name, "Admins")) for name in ("ada", "bob"))
    staging = 'environment == "staging"'
    rule = rule_services.add_rule(ada, "payments", RuleTerms("deploy", Route.DENY, condition=staging))
    rule_services.change_rule(bob, rule.id, RuleTerms("deploy", Route.ALLOW, condition=staging))

    _ask(runtime, 'deploy {"service": "api", "environment": "staging"}')
    assert log.calls == [{"tool": "deploy", "service": "api", "environment": "staging"}]
    assert AuditEntry.objects.get(action="approve").username == f"rule #{rule.id} of bob"
    bob.user.is_active = False
    bob.user.save()

    assert _ask(runtime, 'deploy {"service": "web", "environment": "staging"}').status == "suspended"
    assert len(log.calls) == 1


def test_a_deleted_makers_grant_approves_nothing_for_a_new_account_of_the_same_name(
    payments: tuple[Runtime, ToolLog],
) -> None:
    runtime, log = payments
    tom = make_user("tom", "Reviewers")
    agent = runtime.get_agent("payments")
    request = agent.grant_request("deploy", scope="everyone", created_by="tom", max_uses=5)
    async_to_sync(agent.add_grant)(request)
    staging = 'deploy {"service": "api", "environment": "staging"}'
    assert _ask(runtime, staging).status == "success"  # tom's grant, while tom is here
    tom.delete()
    make_user("tom", "Reviewers")  # later, someone else named tom

    assert _ask(runtime, staging).status == "suspended"
    assert len(log.calls) == 1


def test_a_deleted_changers_rule_decides_nothing_for_a_new_account_of_the_same_name(
    payments: tuple[Runtime, ToolLog],
) -> None:
    """As grants do: the rule's last changer is their account on record, not whoever has the name."""
    runtime, log = payments
    ada, bob = (Access.of(make_user(name, "Admins")) for name in ("ada", "bob"))
    rule = rule_services.add_rule(ada, "payments", RuleTerms("deploy", Route.DENY))
    rule_services.change_rule(bob, rule.id, RuleTerms("deploy", Route.ALLOW))
    staging = 'deploy {"service": "api", "environment": "staging"}'
    assert _ask(runtime, staging).status == "success"  # bob's terms, while bob is here
    bob.user.delete()
    make_user("bob", "Admins")  # later, someone else named bob

    assert _ask(runtime, staging).status == "suspended"
    assert len(log.calls) == 1


@pytest.mark.parametrize("meanwhile", ["deleted", "changed to deny"])
def test_a_rule_deleted_or_changed_while_a_call_parks_decides_nothing_on_its_old_terms(
    payments: tuple[Runtime, ToolLog], monkeypatch: pytest.MonkeyPatch, meanwhile: str
) -> None:
    """Another admin's click between the rules' reading and the call's parking (here, as the call is
    stored): the rule as it matched is not the rule as it stands, so it decides nothing."""
    runtime, log = payments
    ada = Access.of(make_user("ada", "Admins"))
    staging = 'environment == "staging"'
    rule = rule_services.add_rule(ada, "payments", RuleTerms("deploy", Route.ALLOW, condition=staging))
    store = runtime.get_agent("payments").storage
    original = store.insert_suspended

    def parked_meanwhile(suspension: Any) -> Any:
        if meanwhile == "deleted":
            rule_services.delete_rule(ada, rule.id)
        else:
            rule_services.change_rule(ada, rule.id, RuleTerms("deploy", Route.DENY, condition=staging))
        return original(suspension)

    monkeypatch.setattr(store, "insert_suspended", parked_meanwhile)

    result = _ask(runtime, 'deploy {"service": "api", "environment": "staging"}')

    assert result.status == "suspended" and log.calls == []
