"""Starting runs from the dashboard."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync

from agents_runtime import RunResult
from approvals.access import DECIDE_PERMISSION, AgentAccess

logger = logging.getLogger(__name__)


def run_start(
    access: AgentAccess, *, prompt: str, thread_id: str | None = None, resource_id: str | None = None
) -> RunResult:
    """Start a run of the agent and wait until it completes, fails or suspends."""
    access.access.require(DECIDE_PERMISSION, to="start runs")
    agent = access.agent
    logger.info("%s starts a run of %s (thread %s)", access.access.username, agent.id, thread_id)
    return async_to_sync(agent.generate)(prompt, thread_id=thread_id or None, resource_id=resource_id or None)
