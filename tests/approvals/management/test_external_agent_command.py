"""``manage.py external_agent``, and the admin's page for external agents: registered, served at once,
with tokens that may only ask for the agent's requests."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import Client

from agents_runtime import ExternalAgent
from approvals import agents as served
from approvals.models import ExternalAgent as ExternalAgentRow
from tests.support.runtime_fixtures import DashboardAgents


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_register_serve_and_ask_with_its_token(agents: DashboardAgents, client: Client) -> None:
    run(
        "external_agent",
        "register",
        "deployer",
        "--name",
        "CI deployer",
        "--tools",
        '{"deploy": {"approvals": 2}}',
    )
    agent = served.get("deployer")
    assert isinstance(agent, ExternalAgent) and agent.name == "CI deployer"
    tool = agent.find_tool("deploy")
    assert tool is not None and tool.approvals == 2
    assert Group.objects.filter(name="agent:deployer").exists()
    token = run("external_agent", "token", "deployer", "--name", "ci").strip()
    auth = {"Authorization": f"Bearer {token}"}
    asked = client.post(
        "/api/v1/approval-requests",
        json.dumps({"agent": "deployer", "tool": "deploy", "args": {"env": "prod"}}),
        content_type="application/json",
        headers=auth,
    )
    assert asked.status_code == 201, asked.content
    assert client.get("/api/v1/agents", headers=auth).status_code == 403
    assert "deployer" in run("external_agent", "list")


@pytest.mark.parametrize(
    "args",
    [
        ("register", "Bad Id"),
        ("register", "helpdesk"),  # the runtime's own agent
        ("register", "x", "--tools", "{not json"),
        ("register", "x", "--tools", '{"t": {"approvals": "two"}}'),
        ("token", "nobody", "--name", "t"),
    ],
)
def test_refusals(agents: DashboardAgents, args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError):
        run("external_agent", *args)


def test_a_superuser_registers_one_in_the_admin(agents: DashboardAgents, client: Client) -> None:
    admin = User.objects.create_superuser("root", password="pw-for-tests-only")
    client.force_login(admin)
    response = client.post(
        "/admin/approvals/externalagent/add/",
        {"agent_id": "mailer", "name": "Mailer", "description": "", "tools": '{"send": {"confirm": true}}'},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    agent = served.get("mailer")
    assert isinstance(agent, ExternalAgent) and agent.find_tool("send").confirm  # type: ignore[union-attr]
    refused = client.post(
        "/admin/approvals/externalagent/add/",
        {"agent_id": "mailer2", "name": "", "description": "", "tools": '{"send": {"nope": 1}}'},
    )
    assert refused.status_code == 200 and "unknown rules" in refused.content.decode()


def test_an_admin_member_registers_one_in_the_admin(agents: DashboardAgents, client: Client) -> None:
    from tests.support.users import make_user

    client.force_login(make_user("ada", "Admins"))
    response = client.post(
        "/admin/approvals/externalagent/add/",
        {"agent_id": "crm", "name": "", "description": "", "tools": "{}"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert isinstance(served.get("crm"), ExternalAgent)


def test_an_agent_registered_by_another_process_is_on_the_desk_at_once(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    """What ``external_agent register`` in another process leaves (its rows; this process, serving
    already, not told): its page answers on the next request, not "not yours" until the sweep."""
    assert reviewer_client.get("/agents/").status_code == 200  # (a process that has served a request)
    user = User.objects.create_user("external:nightly-backup", password=None)
    ExternalAgentRow.objects.create(agent_id="nightly-backup", name="Nightly backup", tools={}, user=user)
    Group.objects.get_or_create(name="agent:nightly-backup")

    page = reviewer_client.get("/agents/nightly-backup/")
    assert page.status_code == 200 and "Nightly backup" in page.content.decode()
    assert reviewer_client.get("/agents/nobody-registered/").status_code == 404
