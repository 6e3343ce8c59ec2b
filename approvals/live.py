"""Live updates: run events and run output to the websocket consumers of every server process.

Events are small and id-only ("run X of agent A was suspended"); pages refetch their own partials
over HTTP so each keeps its filters and pagination. Two delivery paths, chosen by the channel layer:

- Redis (``REDIS_URL``): the process that changed a run sends to the channel layer directly; every
  server instance's consumers receive it.
- In-process layer (the embedded default): the layer cannot leave its process, so events go through
  the ``LiveEvent`` outbox table, which a relay task in each server process polls and forwards. A run
  started by ``manage.py run_agent`` or a ``db_worker`` still reaches the open pages.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.utils import timezone

from agents_runtime import Chunk, RunEvent
from approvals.dom_ids import safe
from approvals.models import LiveEvent

logger = logging.getLogger(__name__)

RELAY_INTERVAL_SECONDS = 0.1
OUTBOX_RETENTION = timedelta(minutes=10)


def agent_group(agent_id: str) -> str:
    # Channels group names: ASCII letters, digits, "-", "_", "." and under 100 characters.
    return f"agent.{safe(agent_id)}"[:99]


def run_group(run_id: str) -> str:
    return f"run.{safe(run_id)}"[:99]


def uses_outbox() -> bool:
    return str(settings.CHANNEL_LAYERS["default"]["BACKEND"]).endswith("InMemoryChannelLayer")


async def deliver(event: dict[str, Any]) -> None:
    """Send one event to the consumers of its agent and of its run (in reach of this layer)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "run.event", "event": event}
    await layer.group_send(agent_group(event["agent_id"]), message)
    await layer.group_send(run_group(event["run_id"]), message)


async def publish(event: RunEvent) -> None:
    """The runtime listener: the store change is committed when this runs."""
    payload = dataclasses.asdict(event)
    if uses_outbox():
        await database_sync_to_async(LiveEvent.objects.create)(
            agent_id=event.agent_id, run_id=event.run_id, payload=payload
        )
    else:
        await deliver(payload)


def announce(event: dict[str, Any]) -> None:
    """``publish`` for the dashboard's own events, from synchronous code (after its commit).

    ``event`` is small and id-only like a run event: at least ``type``, ``agent_id`` and ``run_id``.
    """
    if uses_outbox():
        LiveEvent.objects.create(agent_id=event["agent_id"], run_id=event["run_id"], payload=event)
    else:
        async_to_sync(deliver)(event)


async def publish_chunk(chunk: Chunk) -> None:
    """Stream a continuation's output to the pages showing that run (best effort, not stored)."""
    layer = get_channel_layer()
    if layer is None:
        return
    await layer.group_send(
        run_group(chunk.run_id),
        {
            "type": "run.chunk",
            "chunk": {"type": chunk.type, "run_id": chunk.run_id, "payload": chunk.payload},
        },
    )


class OutboxRelay:
    """Polls ``LiveEvent`` and forwards new rows to this process's consumers (one per event loop)."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}

    def ensure_started(self) -> None:
        if not uses_outbox():
            return
        loop = asyncio.get_running_loop()
        task = self._tasks.get(loop)
        if task is None or task.done():
            self._tasks = {lp: t for lp, t in self._tasks.items() if not t.done() and not lp.is_closed()}
            self._tasks[loop] = loop.create_task(self._run(), name="countersign-outbox-relay")

    async def _run(self) -> None:
        last_id = await database_sync_to_async(_latest_event_id)()
        pruned_at = timezone.now()
        while True:
            try:
                rows = await database_sync_to_async(_events_after)(last_id)
                for row_id, payload in rows:
                    last_id = row_id
                    await deliver(payload)
                if timezone.now() - pruned_at > OUTBOX_RETENTION:
                    pruned_at = timezone.now()
                    await database_sync_to_async(_prune)()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Live event relay failed; retrying")
            await asyncio.sleep(RELAY_INTERVAL_SECONDS)


def _latest_event_id() -> int:
    latest = LiveEvent.objects.order_by("-id").values_list("id", flat=True).first()
    return latest or 0


def _events_after(last_id: int) -> list[tuple[int, dict[str, Any]]]:
    return list(LiveEvent.objects.filter(id__gt=last_id).order_by("id").values_list("id", "payload")[:500])


def _prune() -> None:
    LiveEvent.objects.filter(created_at__lt=timezone.now() - OUTBOX_RETENTION).delete()


relay = OutboxRelay()
