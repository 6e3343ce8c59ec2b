"""The outbox relay: every server process polls ``LiveEvent`` and hands new rows to its pages.

Used with the in-process channel layer (the embedded default), which cannot leave its process: run
events, output and sign-outs from any process on the same database (``manage.py run_agent``, a
``db_worker``, another server) reach every server this way.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from datetime import timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.utils import timezone

from approvals.live.events import deliver, send_chunks, send_sign_out, uses_outbox
from approvals.models import LiveEvent

logger = logging.getLogger(__name__)

#: How often each server process looks for new outbox rows: at most this long (plus the fan-out)
#: from another process's commit to the open pages. One indexed query on an idle table.
RELAY_INTERVAL_SECONDS = 0.05
OUTBOX_RETENTION = timedelta(minutes=10)
#: PostgreSQL hands out ids when a row is inserted, not when it commits: a relay that already read row
#: N+1 may see row N commit later. It holds back what follows a missing id for this long (a row
#: that never commits, rolled back, costs this much delay once); SQLite never leaves such gaps.
OUTBOX_GAP_WAIT_SECONDS = 2.0


class OutboxRelay:
    """Polls ``LiveEvent`` and forwards new rows to this process's consumers (one per event loop)."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    async def ensure_started(self) -> None:
        """Start relaying in this event loop (once), from the newest event at this moment.

        Awaited before a consumer accepts its socket: every event committed after the page opened
        its socket reaches it (the page refetches its partials once the socket is open).
        """
        if not uses_outbox():
            return
        loop = asyncio.get_running_loop()
        task = self._tasks.get(loop)
        if task is not None and not task.done():
            return
        async with self._locks.setdefault(loop, asyncio.Lock()):
            task = self._tasks.get(loop)
            if task is not None and not task.done():
                return
            last_id = await database_sync_to_async(_latest_event_id)()
            self._tasks = {lp: t for lp, t in self._tasks.items() if not t.done() and not lp.is_closed()}
            self._locks = {lp: lock for lp, lock in self._locks.items() if not lp.is_closed()}
            # A fresh context: the relay outlives the consumer that started it.
            self._tasks[loop] = loop.create_task(
                self._run(last_id), name="countersign-outbox-relay", context=contextvars.Context()
            )

    async def _run(self, last_id: int) -> None:
        loop = asyncio.get_running_loop()
        # Whether row ``last_id + 1`` is the next one. Not known while nothing was read (an empty
        # table says nothing about where its ids went on).
        contiguous = last_id > 0
        gap_since: float | None = None
        pruned_at = timezone.now()
        while True:
            try:
                for row_id, kind, payload in await database_sync_to_async(_rows_after)(last_id):
                    if contiguous and row_id != last_id + 1:
                        # A row before this one may not have committed yet: wait for it, a while.
                        if gap_since is None:
                            gap_since = loop.time()
                        if loop.time() - gap_since < OUTBOX_GAP_WAIT_SECONDS:
                            break
                    last_id, contiguous, gap_since = row_id, True, None
                    await _relay(kind, payload)
                if timezone.now() - pruned_at > OUTBOX_RETENTION:
                    pruned_at = timezone.now()
                    await database_sync_to_async(_prune)()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Live event relay failed; retrying")
            await asyncio.sleep(RELAY_INTERVAL_SECONDS)


async def _relay(kind: str, payload: dict[str, Any]) -> None:
    if kind == LiveEvent.Kind.OUTPUT:
        chunks = payload["chunks"]
        await send_chunks(chunks[0]["run_id"], chunks)
    elif kind == LiveEvent.Kind.SIGN_OUT:
        await send_sign_out(payload["group"])
    else:
        await deliver(payload)


def _latest_event_id() -> int:
    latest = LiveEvent.objects.order_by("-id").values_list("id", flat=True).first()
    return latest or 0


def _rows_after(last_id: int) -> list[tuple[int, str, dict[str, Any]]]:
    rows = LiveEvent.objects.filter(id__gt=last_id).order_by("id").values_list("id", "kind", "payload")
    return list(rows[:500])


def _prune() -> None:
    LiveEvent.objects.filter(created_at__lt=timezone.now() - OUTBOX_RETENTION).delete()


relay = OutboxRelay()
