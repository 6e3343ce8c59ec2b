"""Who may see which agents: deny by default.

A user sees an agent only through a group that grants it:

- ``agent:<agent id>`` groups make a *designated* reviewer: they see (and, with the decide
  permission, decide) only those agents;
- otherwise the Reviewers and Admins groups see every agent;
- anyone else sees nothing, unless ``settings.COUNTERSIGN_OPEN_VISIBILITY`` is on (small teams
  that want every logged-in user to see every agent). Superusers see everything.

``manage.py grant`` puts users in these groups; so does the Django admin.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from approvals import agents
from approvals.groups import AGENT_GROUP_PREFIX, ALL_AGENTS_GROUPS


def visible_agent_ids(user: Any) -> list[str]:
    """The ids of the agents ``user`` may see, in the runtime's order (empty when anonymous)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return []
    all_ids = [agent.id for agent in agents.all_agents()]
    if user.is_superuser:
        return all_ids
    groups = set(user.groups.values_list("name", flat=True))
    designated = {
        name.removeprefix(AGENT_GROUP_PREFIX) for name in groups if name.startswith(AGENT_GROUP_PREFIX)
    }
    if designated:
        return [agent_id for agent_id in all_ids if agent_id in designated]
    if groups & ALL_AGENTS_GROUPS or getattr(settings, "COUNTERSIGN_OPEN_VISIBILITY", False):
        return all_ids
    return []


def can_see_agent(user: Any, agent_id: str) -> bool:
    return agent_id in visible_agent_ids(user)
