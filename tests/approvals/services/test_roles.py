"""Roles: deny by default, `manage.py grant`, 403s that name the group, Admins in the Django admin."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import Client

from tests.support.runtime_fixtures import DashboardAgents


def _grant(*args: str) -> str:
    out = StringIO()
    call_command("grant", *args, stdout=out)
    return out.getvalue()


def test_a_user_in_no_group_sees_no_agent(agents: DashboardAgents, nobody: User, client_for: Any) -> None:
    agents.start("helpdesk", "refund secret customer")
    client = client_for(nobody)

    overview = client.get("/").content.decode()
    inbox = client.get("/agents/helpdesk/")

    assert "helpdesk" not in overview and "Help desk" not in overview
    assert inbox.status_code == 403
    assert "secret customer" not in inbox.content.decode()
    assert "“agent:helpdesk”" in inbox.content.decode()
    assert "manage.py grant USER --review helpdesk" in inbox.content.decode()


def test_open_visibility_lets_every_user_see_every_agent(
    agents: DashboardAgents, nobody: User, client_for: Any, settings: Any
) -> None:
    settings.COUNTERSIGN_OPEN_VISIBILITY = True
    agents.start("helpdesk", "refund parcel")

    assert client_for(nobody).get("/agents/helpdesk/").status_code == 200


def test_grant_review_lets_a_user_see_and_decide_only_the_named_agents(
    agents: DashboardAgents, nobody: User, client_for: Any
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    out = _grant("nina", "--review", "helpdesk")
    client = client_for(nobody)

    assert "nina added to: agent:helpdesk, Reviewers" in out
    assert client.get("/agents/helpdesk/").status_code == 200
    assert client.get("/agents/boss/").status_code == 403
    decided = client.post(
        f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/approve", {"agent": "helpdesk"}
    )
    assert decided.status_code == 302
    assert agents.executed["refund"].count == 1

    _grant("nina", "--review", "helpdesk", "--revoke")
    assert client.get("/agents/helpdesk/").status_code == 403


def test_grant_admin_opens_the_audit_log(agents: DashboardAgents, nobody: User, client_for: Any) -> None:
    client = client_for(nobody)
    assert client.get("/audit/").status_code == 403
    _grant("nina", "--admin")
    assert client.get("/audit/").status_code == 200
    _grant("nina", "--admin", "--revoke")
    assert client.get("/audit/").status_code == 403


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nina", "--review", "no-such-agent"], "No agent 'no-such-agent'"),
        (["ghost", "--admin"], "No user 'ghost'"),
        (["nina"], "Say what to grant"),
    ],
)
def test_grant_refuses_what_it_cannot_do(
    agents: DashboardAgents, nobody: User, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        _grant(*args)
    assert not nobody.groups.exists()


def test_the_audit_403_names_the_group_that_grants_it(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    denied = reviewer_client.get("/audit/").content.decode()

    assert "“Admins”" in denied
    assert "Reviewers" not in denied
    assert "manage.py grant USER --admin" in denied


def test_admins_use_the_django_admin_without_being_superusers(
    agents: DashboardAgents, admin_member: User, client_for: Any
) -> None:
    root = User.objects.create_superuser("root", password="x")
    client = client_for(admin_member)
    assert not admin_member.is_staff and not admin_member.is_superuser

    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/auth/user/").status_code == 200
    own = client.get(f"/admin/auth/user/{admin_member.pk}/change/").content.decode()
    assert 'name="is_superuser"' not in own  # shown read-only
    assert 'name="groups"' in own
    assert 'name="_save"' not in client.get(f"/admin/auth/user/{root.pk}/change/").content.decode()
    assert client.get(f"/admin/auth/user/{root.pk}/password/").status_code == 403
    group = Group.objects.get(name="Reviewers")
    assert 'name="permissions"' not in client.get(f"/admin/auth/group/{group.pk}/change/").content.decode()


def test_reviewers_do_not_get_the_django_admin(agents: DashboardAgents, reviewer_client: Client) -> None:
    assert reviewer_client.get("/admin/").status_code == 302  # to the admin's login


def test_migrate_offers_a_group_for_every_agent(agents: DashboardAgents) -> None:
    call_command("migrate", verbosity=0)
    assert {"agent:helpdesk", "agent:boss", "agent:worker"} <= set(
        Group.objects.values_list("name", flat=True)
    )


def test_auditors_read_every_agent_and_the_audit_log_and_decide_nothing(
    agents: DashboardAgents, reviewer_client: Client, nobody: User, client_for: Any
) -> None:
    helpdesk = agents.start("helpdesk", "refund first")
    (call,) = helpdesk.tool_calls
    boss = agents.start("boss", "pay out")
    decided = reviewer_client.post(
        f"/runs/{boss.run_id}/calls/{boss.tool_calls[0].tool_call_id}/approve", {"agent": "boss"}
    )
    assert decided.status_code in (200, 302)
    auditor = client_for(nobody)

    assert "Auditors" in _grant("nina", "--audit")

    # Every agent's waiting calls, and the audit log of every agent.
    for agent_id in ("helpdesk", "boss"):
        assert auditor.get(f"/agents/{agent_id}/").status_code == 200
    audit = auditor.get("/audit/")
    assert audit.status_code == 200 and boss.run_id in audit.content.decode()
    # The run that ended, with its decision; and the queue's health.
    ended = auditor.get(f"/runs/{boss.run_id}/")
    assert ended.status_code == 200 and "approved" in ended.content.decode()
    assert auditor.get("/health/").status_code == 200
    # No decision goes through, whatever the door.
    approve = auditor.post(
        f"/runs/{helpdesk.run_id}/calls/{call.tool_call_id}/approve", {"agent": "helpdesk"}
    )
    assert approve.status_code == 403
    assert len(agents.suspended("helpdesk")) == 1 and agents.executed["refund"].count == 0
    # Nor anything to manage: the Django admin stays closed.
    assert auditor.get("/admin/").status_code == 302

    _grant("nina", "--audit", "--revoke")
    assert auditor.get("/audit/").status_code == 403
