"""Who is told is who may decide: the recipients query agrees with ``access.Access``, user by user,
for every kind of user the rule knows (so the two cannot drift apart)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, Permission, User

from agents_runtime.store import Deadline
from approvals.notifications.recipients import deciders_of, deciders_of_call
from approvals.policy import Access
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import ensure_groups, make_user

AGENTS = ("helpdesk", "boss", "worker")


def cast() -> None:
    """One user of each kind ``approvals.policy`` tells apart."""
    ensure_groups()
    decide = Permission.objects.get(codename="decide_runs")
    for name in ("agent:helpdesk", "agent:boss", "leads", "watchers"):
        Group.objects.get_or_create(name=name)
    Group.objects.get(name="leads").permissions.add(decide)
    make_user("rita", "Reviewers")
    make_user("dora", "Admins")
    make_user("vic", "agent:helpdesk")  # sees, may not decide
    make_user("val", "Reviewers", "agent:helpdesk")  # designated: decides helpdesk only
    make_user("bo", "Reviewers", "agent:boss")
    make_user("pam", "agent:helpdesk").user_permissions.add(decide)  # the permission held directly
    make_user("pete").user_permissions.add(decide)  # may decide, sees nothing (unless open visibility)
    make_user("nina")
    make_user("leo", "leads")  # may decide, sees no agent: only calls escalated to leads
    Group.objects.get_or_create(name="managers")  # (holds no permission)
    make_user("max", "managers")  # the group a call escalated to is enough: no permission needed
    make_user("lou", "managers", "Auditors")  # sees every agent: decides none, escalated or not
    make_user("vera", "managers", "agent:helpdesk")  # sees helpdesk, without the permission: likewise
    make_user("walt", "watchers")
    olga = make_user("olga", "Reviewers")
    olga.is_active = False
    olga.save()
    User.objects.create_superuser("sue", password="x")
    User.objects.create_superuser("sid", password="x", is_active=False)


def by_access(agent_id: str) -> set[str]:
    found = set()
    for user in User.objects.all():
        access = Access.of(User.objects.get(pk=user.pk))
        if agent_id in access.agent_ids and access.can_decide:
            found.add(user.username)
    return found


def names(users: Any) -> set[str]:
    return {u.username for u in users}


def test_the_deciders_of_an_agent_are_those_access_lets_decide_it(
    agents: DashboardAgents, settings: Any
) -> None:
    cast()
    for agent_id in AGENTS:
        assert names(deciders_of(agent_id)) == by_access(agent_id), agent_id
    assert names(deciders_of("helpdesk")) == {"rita", "dora", "val", "pam", "sue"}
    assert names(deciders_of("boss")) == {"rita", "dora", "bo", "sue"}
    assert names(deciders_of("no-such-agent")) == set()

    settings.COUNTERSIGN_OPEN_VISIBILITY = True
    for agent_id in AGENTS:
        assert names(deciders_of(agent_id)) == by_access(agent_id), agent_id
    assert "pete" in names(deciders_of("boss")) and "leo" in names(deciders_of("boss"))


def allowed_by_access(run_id: str, call: str) -> set[str]:
    allowed = set()
    for user in User.objects.all():
        access = Access.of(User.objects.get(pk=user.pk))
        if "helpdesk" not in access.decidable_agent_ids:
            continue
        if access.for_agent("helpdesk").may_decide_call(run_id, call):
            allowed.add(user.username)
    return allowed


@pytest.mark.parametrize("group", ["leads", "managers"])
def test_the_deciders_of_an_escalated_call_add_its_groups_members(
    agents: DashboardAgents, group: str
) -> None:
    cast()
    helpdesk = agents.agent("helpdesk")
    deadline = Deadline(timedelta(minutes=5), "escalate", escalate_to=group)
    run = async_to_sync(helpdesk.generate)("refund escalate me", deadline=deadline)
    assert async_to_sync(agents.runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6)) == 1
    call = run.tool_calls[0].tool_call_id

    allowed = allowed_by_access(run.run_id, call)

    assert names(deciders_of_call("helpdesk", group)) == allowed
    escalated_to = {"leads": "leo", "managers": "max"}[group]
    assert allowed == {"rita", "dora", "val", "pam", "sue", escalated_to}
