"""Who is told: the users who may decide an agent's calls (or one call, escalated), as
``approvals.policy`` rules, in one query.

``access.Access.of(user)`` decides it user by user (a user may decide an agent they see, holding
the decide permission); a notification needs the same answer the other way round, for all users at
once. ``tests/approvals/notifications/test_notifications_recipients.py`` checks the two against each other.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db.models import Exists, OuterRef, Q, QuerySet

from approvals import agents
from approvals.policy import AGENT_GROUP_PREFIX, ALL_AGENTS_GROUPS, DECIDE_PERMISSION, agent_group_name


def _in_group(names: Q) -> Exists:
    return Exists(Group.objects.filter(names, user=OuterRef("pk")))


def _holds_decide() -> Q:
    app_label, _, codename = DECIDE_PERMISSION.partition(".")
    held = Permission.objects.filter(content_type__app_label=app_label, codename=codename)
    mine = Q(user=OuterRef("pk")) | Q(group__user=OuterRef("pk"))
    return Q(is_superuser=True) | Q(Exists(held.filter(mine)))


def _users() -> QuerySet[Any]:
    return get_user_model()._default_manager.filter(is_active=True)


def _sees(agent_id: str) -> Q:
    """Users who see ``agent_id`` (``policy.visible_agent_ids``): designated reviewers (any
    ``agent:`` group) see only their agents; otherwise Reviewers, Admins and Auditors (or everyone,
    with open visibility) see every agent."""
    designated = _in_group(Q(name__startswith=AGENT_GROUP_PREFIX))
    every_agent = (
        Q()
        if getattr(settings, "COUNTERSIGN_OPEN_VISIBILITY", False)
        else Q(_in_group(Q(name__in=ALL_AGENTS_GROUPS)))
    )
    return (
        Q(is_superuser=True)
        | Q(_in_group(Q(name=agent_group_name(agent_id))))
        | (~Q(designated) & every_agent)
    )


def _served(agent_id: str) -> bool:
    return agent_id in {agent.id for agent in agents.all_agents()}


def deciders_of(agent_id: str) -> QuerySet[Any]:
    """Active users who may decide ``agent_id``'s calls (not counting escalations); none for an
    agent the runtime does not serve."""
    if not _served(agent_id):
        return _users().none()
    return _users().filter(_sees(agent_id)).filter(_holds_decide())


def deciders_of_call(agent_id: str, escalated_to: str | None) -> QuerySet[Any]:
    """Who may decide one call: the agent's deciders, and when it was escalated, the members of its
    group who do not see the agent (the group is enough for them, without the decide permission;
    those who see it decide through the permission: ``policy.may_decide``)."""
    users = deciders_of(agent_id)
    if escalated_to and _served(agent_id):
        members = _users().filter(_in_group(Q(name=escalated_to))).exclude(_sees(agent_id))
        users = users | members
    return users.distinct()
