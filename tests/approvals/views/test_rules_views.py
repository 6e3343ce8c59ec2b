"""Routing rules in the dashboard: admins make them on /rules/; each route then does its work as the
helpdesk's calls park (allow, two, deny), the first match wins, a rule that cannot be evaluated
leaves the call to a person, "Try" counts real decided calls, and every change is in the audit log."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client

from approvals.models import AuditEntry, GrantRecord, RoutingRule
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import make_user

HX = {"HTTP_HX_REQUEST": "true"}


def approve_url(run_id: str, tool_call_id: str) -> str:
    return f"/runs/{run_id}/calls/{tool_call_id}/approve"


def add_rule(client: Client, route: str, condition: str = "", **more: Any) -> Any:
    data = {"tool": "helpdesk:refund", "route": route, "condition": condition, "reason": "", "position": ""}
    data.update(more)
    return client.post("/rules/", data)


def made_rule() -> RoutingRule:
    return RoutingRule.objects.order_by("-id").first()  # type: ignore[return-value]


def test_an_allow_rule_runs_the_refund_without_a_reviewer_recorded_as_the_rule(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    response = add_rule(admin_member_client, "allow", 'note == "small"')
    assert response.status_code == 302
    rule = made_rule()

    allowed = agents.start("helpdesk", "refund small")
    waits = agents.start("helpdesk", "refund large")

    assert allowed.status == "success" and waits.status == "suspended"
    assert agents.executed["refund"].calls == [{"order_id": "A-1", "amount_cents": 500, "note": "small"}]
    row = AuditEntry.objects.get(run_id=allowed.run_id, action="approve")
    assert (row.username, row.channel, row.reason) == (
        f"rule #{rule.pk} of ada",
        "rule",
        f"Allowed by rule #{rule.pk} of ada",
    )
    assert row.decided_by == f"rule #{rule.pk} of ada"


def test_a_deny_rule_declines_at_once_and_the_model_is_told_which_rule(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    add_rule(
        admin_member_client, "deny", 'note == "fraud"', reason="Refunds flagged as fraud go to the risk team"
    )
    rule = made_rule()

    result = agents.start("helpdesk", "refund fraud")

    assert result.status == "success" and agents.executed["refund"].count == 0
    said = f"Declined by rule #{rule.pk} of ada: Refunds flagged as fraud go to the risk team"
    assert said in agents.helpdesk_model.tool_results().values()
    row = AuditEntry.objects.get(run_id=result.run_id, action="decline")
    assert (row.username, row.channel, row.reason) == (f"rule #{rule.pk} of ada", "rule", said)


def test_a_two_rule_needs_two_different_reviewers(
    agents: DashboardAgents, admin_member_client: Client, reviewer_client: Client, client_for: Any
) -> None:
    add_rule(admin_member_client, "two", 'note == "big"')
    rule = made_rule()
    run = agents.start("helpdesk", "refund big")
    call = run.tool_calls[0]
    assert run.status == "suspended"
    card = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    assert f"Routed by rule #{rule.pk} of ada" in card and "0 of 2 approvals" in card

    first = reviewer_client.post(approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk"}, **HX)
    again = reviewer_client.post(approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk"}, **HX)

    assert "Vote recorded" in first.content.decode() and agents.executed["refund"].count == 0
    assert "already approved" in again.content.decode() and agents.executed["refund"].count == 0
    sam = client_for(make_user("sam", "Reviewers"))
    sam.post(approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk"}, **HX)
    assert agents.executed["refund"].count == 1


def test_the_first_matching_rule_wins(agents: DashboardAgents, admin_member_client: Client) -> None:
    add_rule(admin_member_client, "allow")
    add_rule(admin_member_client, "deny", 'note == "fraud"', position="1")

    denied = agents.start("helpdesk", "refund fraud")
    allowed = agents.start("helpdesk", "refund fine")

    assert AuditEntry.objects.get(run_id=denied.run_id, tool_call_id__gt="").action == "decline"
    assert AuditEntry.objects.get(run_id=allowed.run_id, tool_call_id__gt="").action == "approve"
    assert [c["note"] for c in agents.executed["refund"].calls] == ["fine"]


def test_a_rule_that_cannot_be_evaluated_leaves_the_call_waiting_and_the_card_says_so(
    agents: DashboardAgents, admin_member_client: Client, reviewer_client: Client
) -> None:
    add_rule(admin_member_client, "deny", "amount_cents / 0 == 1")
    broken = made_rule()
    add_rule(admin_member_client, "allow")

    run = agents.start("helpdesk", "refund any")

    assert run.status == "suspended" and agents.executed["refund"].count == 0
    card = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    assert f"Rule #{broken.pk} of ada could not be evaluated" in card
    assert "the call waits for a person" in card


def test_only_admins_of_the_agent_manage_rules(
    agents: DashboardAgents, admin_member_client: Client, reviewer_client: Client
) -> None:
    refused = add_rule(reviewer_client, "allow")
    assert refused.status_code == 400 and not RoutingRule.objects.exists()
    page = reviewer_client.get("/rules/").content.decode()
    assert "New rule" not in page

    add_rule(admin_member_client, "allow", 'note == "<b>x</b>"')
    rule = made_rule()
    seen = reviewer_client.get("/rules/").content.decode()
    assert "&lt;b&gt;x&lt;/b&gt;" in seen and "<b>x</b>" not in seen
    assert f"Delete rule #{rule.pk}" not in seen
    assert reviewer_client.post(f"/rules/{rule.pk}/delete").status_code == 403
    assert (
        reviewer_client.post(f"/rules/{rule.pk}/", {"tool": "helpdesk:refund", "route": "deny"}).status_code
        == 403
    )
    assert reviewer_client.post("/rules/try", {"tool": "helpdesk:refund", "route": "deny"}).status_code == 200
    assert RoutingRule.objects.get().route == "allow"


def test_a_rule_the_tool_cannot_take_is_refused_with_nothing_kept(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    response = admin_member_client.post(
        "/rules/",
        {"tool": "helpdesk:payout", "route": "allow", "condition": "", "reason": "", "position": ""},
    )
    bad = add_rule(admin_member_client, "deny", "amount_cents <")

    assert response.status_code == 400 and "needs 2 approvals" in response.content.decode()
    assert bad.status_code == 400
    assert not RoutingRule.objects.exists()
    assert not AuditEntry.objects.filter(action="route").exists()


def test_try_counts_the_tools_real_decided_calls_and_saves_nothing(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    helpdesk = agents.agent("helpdesk")
    for note, how in (("a", "decline"), ("b", "edit"), ("c", "approve"), ("d", "decline")):
        run = agents.start("helpdesk", f"refund {note}")
        call_id = run.tool_calls[0].tool_call_id
        if how == "decline":
            stream = async_to_sync(helpdesk.decline_tool_call)(
                run_id=run.run_id, tool_call_id=call_id, actor="rita"
            )
        else:
            edits = {"order_id": "A-1", "amount_cents": 400, "note": note} if how == "edit" else None
            stream = async_to_sync(helpdesk.approve_tool_call)(
                run_id=run.run_id, tool_call_id=call_id, actor="rita", edited_args=edits
            )
        async_to_sync(stream.result)()
    agents.start("helpdesk", "refund e")  # still waiting: not history

    data = {
        "tool": "helpdesk:refund",
        "route": "allow",
        "condition": 'note != "c"',
        "reason": "",
        "position": "",
    }
    response = admin_member_client.post("/rules/try", data, **HX)

    html = response.content.decode()
    assert response.status_code == 200
    assert (
        "Would have matched 3 of the last 4 calls of this tool, of which 2 were declined (1 edited)." in html
    )
    assert "<html" not in html  # the fragment only
    assert not RoutingRule.objects.exists()
    refused = admin_member_client.post(
        "/rules/try", {**data, "tool": "helpdesk:payout", "condition": ""}, **HX
    ).content.decode()
    assert "This rule cannot be kept" in refused and "needs 2 approvals" in refused


def test_making_changing_and_deleting_a_rule_are_in_the_audit_log(
    agents: DashboardAgents, admin_member_client: Client, admin_member: User
) -> None:
    add_rule(admin_member_client, "allow", 'note == "small"')
    rule = made_rule()
    changed = admin_member_client.post(
        f"/rules/{rule.pk}/",
        {
            "tool": "helpdesk:refund",
            "route": "deny",
            "condition": 'note == "small"',
            "reason": "No",
            "position": "",
        },
    )
    deleted = admin_member_client.post(f"/rules/{rule.pk}/delete")

    assert changed.status_code == 302 and deleted.status_code == 302
    assert not RoutingRule.objects.exists()
    rows = list(
        AuditEntry.objects.filter(action="route")
        .order_by("id")
        .values_list("username", "tool_name", "outcome_detail")
    )
    assert [r[:2] for r in rows] == [("ada", "refund")] * 3
    assert [r[2].split(" (")[0] for r in rows] == [
        f"Rule #{rule.pk} {c}" for c in ("added", "changed", "deleted")
    ]
    assert "allow without asking" in rows[0][2] and "deny at once. Reason: No" in rows[1][2]
    assert AuditEntry.objects.filter(action="route", user=admin_member).count() == 3


def test_a_rule_whose_maker_lost_the_right_decides_nothing(
    agents: DashboardAgents, admin_member_client: Client, admin_member: User
) -> None:
    add_rule(admin_member_client, "allow")
    admin_member.groups.clear()

    run = agents.start("helpdesk", "refund any")

    assert run.status == "suspended" and agents.executed["refund"].count == 0
    assert not AuditEntry.objects.filter(run_id=run.run_id).exists()


def test_a_call_a_rule_routes_to_two_offers_no_approve_and_allow_and_a_forged_one_makes_no_grant(
    agents: DashboardAgents, admin_member_client: Client, reviewer_client: Client
) -> None:
    """Two people's approval is not one person's to give ahead of time, whether the tool asks for
    two (its card offers no grant) or a rule does: one vote makes no standing grant."""
    add_rule(admin_member_client, "two", 'note == "big"')
    run = agents.start("helpdesk", "refund big", thread="t-2")
    call = run.tool_calls[0]
    card = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    assert "0 of 2 approvals" in card and "Approve and allow" not in card

    forged = {"agent": "helpdesk", "grant-scope": "thread", "grant-lasts": "1h", "grant-uses": ""}
    forged |= {"grant-condition": ""}
    voted = reviewer_client.post(approve_url(run.run_id, call.tool_call_id), forged, **HX).content.decode()

    assert "Vote recorded" in voted and "Allowed from now on" not in voted
    assert "No standing grant" in voted
    assert not GrantRecord.objects.exists() and agents.executed["refund"].count == 0
