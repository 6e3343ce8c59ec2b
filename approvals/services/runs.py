"""Starting runs from the dashboard."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync

from agents_runtime import RunResult, RunStream
from approvals.policy import AgentAccess

logger = logging.getLogger(__name__)


def run_start(
    access: AgentAccess, *, prompt: str, thread_id: str | None = None, resource_id: str | None = None
) -> RunResult:
    """Start a run of the agent and wait until it completes, fails or suspends."""
    access.require_start()
    agent = access.agent
    logger.info("%s starts a run of %s (thread %s)", access.access.username, agent.id, thread_id)
    return async_to_sync(agent.generate)(
        prompt,
        thread_id=thread_id or None,
        resource_id=resource_id or None,
        # The login's name: a tool with separate_duties=True refuses this user's approvals.
        started_by=access.access.username,
    )


async def run_stream(
    access: AgentAccess, *, prompt: str, thread_id: str | None = None, resource_id: str | None = None
) -> RunStream:
    """Start a run of the agent and stream its chunks (the HTTP API's ``stream`` route)."""
    access.require_start()
    agent = access.agent
    logger.info("%s starts a run of %s over the API (thread %s)", access.access.username, agent.id, thread_id)
    return await agent.stream(
        prompt, thread_id=thread_id, resource_id=resource_id, started_by=access.access.username
    )
