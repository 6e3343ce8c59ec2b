"""The groups that carry access (see ``approvals.access``): their names, spelled once."""

from __future__ import annotations

#: May decide every agent's calls (unless designated for some).
REVIEWERS = "Reviewers"
#: May also read the audit log and manage users in the Django admin.
ADMINS = "Admins"
#: ``agent:<agent id>``: a designated reviewer of that agent.
AGENT_GROUP_PREFIX = "agent:"
#: Groups that see every agent (unless the user is designated for some).
ALL_AGENTS_GROUPS = frozenset({REVIEWERS, ADMINS})


def agent_group_name(agent_id: str) -> str:
    return f"{AGENT_GROUP_PREFIX}{agent_id}"
