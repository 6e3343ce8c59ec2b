"""Starting runs from the dashboard and over the API."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync, sync_to_async
from django.db import IntegrityError, transaction

from agents_runtime import RunResult, RunStream
from approvals.models import ChosenRunId, EndedRun, RunRecord
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


class RunIdInUse(Exception):
    """A caller chose a run id that names another run (waiting, ended, or chosen before)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run id {run_id!r} is already in use: choose another, or leave runId out")
        self.run_id = run_id


def _reserve_run_id(access: AgentAccess, run_id: str) -> None:
    # Ids are unique across agents, as the run store keeps them; the reservation's unique insert
    # settles two requests that choose the same id at once.
    if RunRecord.objects.filter(run_id=run_id).exists() or EndedRun.objects.filter(run_id=run_id).exists():
        raise RunIdInUse(run_id)
    try:
        with transaction.atomic():
            ChosenRunId.objects.create(
                run_id=run_id, agent_id=access.agent.id, chosen_by=access.access.username
            )
    except IntegrityError:
        raise RunIdInUse(run_id) from None


async def run_stream(
    access: AgentAccess,
    *,
    prompt: str,
    thread_id: str | None = None,
    resource_id: str | None = None,
    run_id: str | None = None,
) -> RunStream:
    """Start a run of the agent and stream its chunks (the HTTP API's ``stream`` and ``generate``).

    ``run_id``: the caller's id for the run, which must name no other run (``RunIdInUse``)."""
    access.require_start()
    agent = access.agent
    if run_id is not None:
        await sync_to_async(_reserve_run_id)(access, run_id)
    logger.info("%s starts a run of %s over the API (thread %s)", access.access.username, agent.id, thread_id)
    return await agent.stream(
        prompt,
        thread_id=thread_id,
        resource_id=resource_id,
        started_by=access.access.username,
        run_id=run_id,
    )
