"""Starting runs from the dashboard."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync

from agents_runtime import RunResult
from approvals import agents
from approvals.access import DECIDE_PERMISSION, require_agent_access, require_permission

logger = logging.getLogger(__name__)


def run_start(
    *, user: Any, agent_id: str, prompt: str, thread_id: str | None = None, resource_id: str | None = None
) -> RunResult:
    """Start a run of ``agent_id`` and wait until it completes, fails or suspends."""
    require_permission(user, DECIDE_PERMISSION, to="start runs")
    agent = agents.get(agent_id)
    require_agent_access(user, agent_id)
    logger.info("%s starts a run of %s (thread %s)", user.get_username(), agent_id, thread_id)
    return async_to_sync(agent.generate)(prompt, thread_id=thread_id or None, resource_id=resource_id or None)
