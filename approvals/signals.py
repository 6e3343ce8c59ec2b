"""Signal receivers the app connects in ``ApprovalsConfig.ready``."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction

from approvals import agents, live
from approvals.policy import agent_group_name


def close_live_sockets(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    """``user_logged_out``: the session's open live sockets close (4401), in every server process."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        transaction.on_commit(partial(live.end_session, session_key), robust=True)


def create_agent_groups(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """``post_migrate``: an ``agent:<id>`` group for every agent, to put its reviewers in."""
    from django.contrib.auth.models import Group

    for agent in agents.all_agents():
        Group.objects.using(using).get_or_create(name=agent_group_name(agent.id))
