"""Who may see and do what: login everywhere, permissions with 403 pages that say what is missing, CSRF."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agents_runtime import DecisionRequest, Origin
from agents_runtime.store import DecisionAction
from approvals import services
from approvals.models import AuditEntry
from approvals.policy import Access, AgentAccess
from tests.support.inbox_rows import opened
from tests.support.runtime_fixtures import DashboardAgents

PAGES = ["/", "/agents/helpdesk/", "/runs/some-run/", "/runs/new/", "/audit/", "/audit/export.csv"]
POSTS = [
    "/runs/some-run/calls/call_1/approve",
    "/runs/some-run/calls/call_1/decline",
    "/runs/some-run/calls/call_1/resume",
    "/runs/new/",
]


@pytest.mark.django_db
def test_migrate_creates_the_reviewers_and_admins_groups() -> None:
    def codenames(name: str) -> set[str]:
        return set(Group.objects.get(name=name).permissions.values_list("codename", flat=True))

    assert codenames("Reviewers") == {"decide_runs"}
    # Admins also manage users and groups in the Django admin (migration 0010), webhooks (0015),
    # everyone's standing grants (0022), register external agents (0037) and read who accepted or
    # dismissed a suggested grant (0043).
    assert codenames("Admins") == {
        "decide_runs",
        "view_audit_log",
        *(f"{verb}_{model}" for verb in ("view", "add", "change") for model in ("user", "group")),
        *(f"{verb}_webhookendpoint" for verb in ("view", "add", "change", "delete")),
        "view_webhookdelivery",
        "view_grantrecord",
        "view_grantsuggestionrecord",
        "manage_grants",
        *(f"{verb}_externalagent" for verb in ("view", "add", "change")),
    }


@pytest.mark.parametrize("path", PAGES)
def test_anonymous_get_redirects_to_login(agents: DashboardAgents, client: Client, path: str) -> None:
    response = client.get(path)

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("path", POSTS)
def test_anonymous_post_redirects_to_login_and_decides_nothing(
    agents: DashboardAgents, client: Client, path: str
) -> None:
    response = client.post(path, {"agent": "helpdesk", "prompt": "refund x"})

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")
    assert not AuditEntry.objects.exists()


def test_login_page_renders_and_logs_in(agents: DashboardAgents, reviewer: User, client: Client) -> None:
    assert client.get("/accounts/login/").status_code == 200

    response = client.post(
        "/accounts/login/", {"username": "rita", "password": "correct horse battery staple"}
    )

    assert response.status_code == 302
    assert client.get("/").status_code == 200


def test_user_without_permission_may_look_but_not_decide(
    agents: DashboardAgents, viewer: User, client_for: object
) -> None:
    run = agents.start("helpdesk", "refund x")
    call = run.tool_calls[0]
    client = client_for(viewer)  # type: ignore[operator]

    inbox = client.get("/agents/helpdesk/")
    row = opened(client, inbox.content.decode())  # (a row's body, its buttons among it, comes when opened)
    approve = client.post(f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve", {"agent": "helpdesk"})
    decline = client.post(
        f"/runs/{run.run_id}/calls/{call.tool_call_id}/decline", {"agent": "helpdesk"}, HTTP_HX_REQUEST="true"
    )

    assert inbox.status_code == 200
    assert ">Approve</button>" not in row and ">Decline</button>" not in row
    assert "may look at this call but not decide it" in row
    for response in (approve, decline):
        assert response.status_code == 403
        text = response.content.decode()
        assert "approvals.decide_runs" in text
        assert "Can approve, decline and answer suspended runs" in text
    assert len(agents.suspended("helpdesk")) == 1
    assert agents.executed["refund"].count == 0


@pytest.mark.parametrize("path", ["/runs/new/"])
def test_starting_runs_needs_the_decide_permission(
    agents: DashboardAgents, nobody: User, client_for: object, path: str
) -> None:
    client = client_for(nobody)  # type: ignore[operator]

    assert "approvals.decide_runs" in client.get(path).content.decode()
    response = client.post(path, {"agent": "helpdesk", "prompt": "refund x"})

    assert response.status_code == 403
    assert agents.suspended("helpdesk") == []


@pytest.mark.parametrize("path", ["/audit/", "/audit/export.csv"])
def test_audit_log_needs_the_audit_permission(
    agents: DashboardAgents, reviewer_client: Client, admin_member_client: Client, path: str
) -> None:
    denied = reviewer_client.get(path)

    assert denied.status_code == 403
    assert "approvals.view_audit_log" in denied.content.decode()
    assert "Can view the audit log" in denied.content.decode()
    assert admin_member_client.get(path).status_code == 200


def test_navigation_shows_only_what_the_user_may_use(
    agents: DashboardAgents, reviewer_client: Client, admin_member_client: Client
) -> None:
    reviewer_nav = reviewer_client.get("/").content.decode()
    admin_nav = admin_member_client.get("/").content.decode()

    assert 'href="/runs/new/"' in reviewer_nav and 'href="/audit/"' not in reviewer_nav
    assert 'href="/queue/"' in reviewer_nav and 'href="/agents/"' in reviewer_nav
    assert 'href="/runs/new/"' in admin_nav and 'href="/audit/"' in admin_nav


def test_post_without_csrf_token_is_refused(agents: DashboardAgents, reviewer: User) -> None:
    run = agents.start("helpdesk", "refund x")
    call = run.tool_calls[0]
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    target = f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve"

    refused = client.post(target, {"agent": "helpdesk"})

    assert refused.status_code == 403
    assert "CSRF" in refused.content.decode()
    assert agents.executed["refund"].count == 0
    # With the token from the page (the form field, or the header htmx sends from <body hx-headers>).
    page = client.get("/agents/helpdesk/")
    token = page.context["csrf_token"]
    assert f'"X-CSRFToken": "{token}"' in page.content.decode()
    accepted = client.post(target, {"agent": "helpdesk"}, HTTP_X_CSRFTOKEN=str(token), HTTP_HX_REQUEST="true")
    assert accepted.status_code == 200
    assert agents.executed["refund"].count == 1


def test_designated_reviewers_see_and_decide_only_their_agents(
    agents: DashboardAgents, reviewer: User, client_for: object
) -> None:
    reviewer.groups.add(Group.objects.get_or_create(name="agent:boss")[0])
    helpdesk_run = agents.start("helpdesk", "refund x")
    client = client_for(reviewer)  # type: ignore[operator]

    overview = client.get("/").content.decode()
    inbox = client.get("/agents/helpdesk/")
    approve = client.post(
        f"/runs/{helpdesk_run.run_id}/calls/{helpdesk_run.tool_calls[0].tool_call_id}/approve",
        {"agent": "helpdesk"},
    )

    assert 'href="/agents/boss/"' in overview and 'href="/agents/helpdesk/"' not in overview
    assert inbox.status_code == 403 and "agent:helpdesk" in inbox.content.decode()
    assert approve.status_code == 403
    assert client.get(f"/runs/{helpdesk_run.run_id}/").status_code == 404
    assert agents.executed["refund"].count == 0


def test_a_decision_resolves_the_users_agents_and_rights_once(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund x")
    call = run.tool_calls[0]

    with CaptureQueriesContext(connection) as queries:
        response = reviewer_client.post(
            f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve",
            {"agent": "helpdesk"},
            HTTP_HX_REQUEST="true",
        )

    assert response.status_code == 200 and agents.executed["refund"].count == 1
    # The user's groups (which agents they see) and their permissions: read together, once.
    group_reads = [q["sql"] for q in queries.captured_queries if '"auth_user_groups"' in q["sql"]]
    assert len(group_reads) == 1, group_reads


@pytest.mark.django_db
def test_a_users_rights_come_from_their_groups_and_their_own_permissions_in_one_query() -> None:
    from django.contrib.auth.models import Permission

    from approvals.policy import AUDIT_PERMISSION, DECIDE_PERMISSION
    from tests.support.users import make_user

    auditor = make_user("alma")  # no group: the audit permission given to her alone
    auditor.user_permissions.add(Permission.objects.get(codename=AUDIT_PERMISSION.split(".")[1]))
    reviewer = make_user("ravi", "Reviewers")

    for user, decides, audits in ((auditor, False, True), (reviewer, True, False)):
        fresh = User.objects.get(pk=user.pk)  # (no permissions cached on it yet)
        with CaptureQueriesContext(connection) as queries:
            rights = (fresh.has_perm(DECIDE_PERMISSION), fresh.has_perm(AUDIT_PERMISSION))
        assert rights == (decides, audits)
        assert len(queries.captured_queries) == 1, [q["sql"] for q in queries.captured_queries]

    fresh = User.objects.get(pk=reviewer.pk)
    fresh.is_active = False
    assert not fresh.has_perm(DECIDE_PERMISSION)


def test_services_refuse_who_may_not_decide_and_rights_cannot_be_made_up(
    agents: DashboardAgents, viewer: User
) -> None:
    run = agents.start("helpdesk", "refund x")
    access = Access.of(viewer)
    target = access.for_agent("helpdesk")

    with pytest.raises(PermissionDenied, match=r"approvals\.decide_runs"):
        services.decide(
            target,
            DecisionRequest(
                run.run_id, run.tool_calls[0].tool_call_id, DecisionAction.APPROVE, origin=Origin.DASHBOARD
            ),
        )
    with pytest.raises(PermissionDenied, match="not a reviewer of the agent “boss”"):
        access.for_agent("boss")
    with pytest.raises(TypeError):
        AgentAccess(access, target.agent)
    with pytest.raises(TypeError):
        Access(viewer, ("helpdesk",), True, True)
    assert agents.executed["refund"].count == 0 and len(agents.suspended("helpdesk")) == 1
