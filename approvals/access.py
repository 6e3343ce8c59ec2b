"""Who may see which agents.

Reviewers and admins see every agent. A user who belongs to one or more groups named
``agent:<agent id>`` is a designated reviewer: they see (and, with the decide permission, decide)
only those agents. Superusers see everything.
"""

from __future__ import annotations

from typing import Any

from approvals.registry import get_runtime

AGENT_GROUP_PREFIX = "agent:"


def visible_agent_ids(user: Any) -> list[str]:
    """The ids of the agents ``user`` may see, in the runtime's order (empty when anonymous)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return []
    all_ids = [agent.id for agent in get_runtime().agents]
    if user.is_superuser:
        return all_ids
    designated = {
        name.removeprefix(AGENT_GROUP_PREFIX)
        for name in user.groups.filter(name__startswith=AGENT_GROUP_PREFIX).values_list("name", flat=True)
    }
    if not designated:
        return all_ids
    return [agent_id for agent_id in all_ids if agent_id in designated]


def can_see_agent(user: Any, agent_id: str) -> bool:
    return agent_id in visible_agent_ids(user)
