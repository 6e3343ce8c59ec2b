"""Management commands: ``run_agent`` for scripts, ``demo_setup`` for ``make run``."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from approvals import agents as served
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
