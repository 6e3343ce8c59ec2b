"""Live updates: run events, run output and sign-outs to the websocket consumers of every server process.

Events are small and id-only ("run X of agent A was suspended"); pages refetch their own partials
over HTTP so each keeps its filters and pagination. A continuation's output (text deltas, tool calls
and results) goes to the pages watching that run. A logout closes that session's sockets. Two
delivery paths, chosen by the channel layer:

- Redis (``REDIS_URL``): the process that has the message sends it to the channel layer directly;
  every server instance's consumers receive it.
- In-process layer (the embedded default): the layer cannot leave its process, so every message goes
  through the ``LiveEvent`` outbox table, which a relay task in each server process polls and
  forwards; a server's own messages too, so each arrives once. A run started by ``manage.py
  run_agent`` or continued by a ``db_worker`` still reaches the open pages. Output is coalesced on its
  way in (``RunOutput``): a model streams tens of text deltas a second, the outbox gets a row at most
  every ``OUTPUT_FLUSH_SECONDS`` per continuation.

Either way a server process receives each message once, on one layer channel of its own, and hands
it to its open pages itself (``Fanout``): per message, the layer carries one copy per process, not one
per page.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import hashlib
import json
import logging
from datetime import timedelta
from functools import cache
from typing import Any, Protocol

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from agents_runtime import Chunk, RunEvent
from approvals.dom_ids import safe
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
#: How long a continuation's output may wait in its process before it is written to the outbox.
OUTPUT_FLUSH_SECONDS = 0.1


def agent_group(agent_id: str) -> str:
    # Channels group names: ASCII letters, digits, "-", "_", "." and under 100 characters.
    return f"agent.{safe(agent_id)}"[:99]


def run_group(run_id: str) -> str:
    return f"run.{safe(run_id)}"[:99]


def session_group(session_key: str) -> str:
    # A digest, never the key: group names travel through Redis and the outbox, and a key is a login.
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def uses_outbox() -> bool:
    """True when the channel layer cannot leave this process (Channels' in-memory layer, or ours)."""
    return _in_process(str(settings.CHANNEL_LAYERS["default"]["BACKEND"]))


@cache
def _in_process(backend: str) -> bool:
    return issubclass(import_string(backend), InMemoryChannelLayer)


async def deliver(event: dict[str, Any]) -> None:
    """Send one event to the pages showing its agent (in reach of this layer: see ``Fanout``)."""
    layer = get_channel_layer()
    if layer is None:
        return
    group = agent_group(event["agent_id"])
    # Encoded once here rather than once per open page.
    text = json.dumps({"type": "event", "event": event})
    await layer.group_send(group, {"type": "run.event", "group": group, "event": event, "text": text})


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


def end_session(session_key: str) -> None:
    """Close the open sockets of a session that logged out, in every server process (synchronous)."""
    group = session_group(session_key)
    if uses_outbox():
        LiveEvent.objects.create(
            kind=LiveEvent.Kind.SIGN_OUT, agent_id="", run_id="", payload={"group": group}
        )
    else:
        async_to_sync(_send_sign_out)(group)


async def _send_sign_out(group: str) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(group, {"type": "session.ended", "group": group})


def _chunk_body(chunk: Chunk) -> dict[str, Any]:
    # Through JSON once: tool args and results may hold values only ``str`` can show.
    body = {"type": chunk.type, "run_id": chunk.run_id, "payload": chunk.payload}
    loaded: dict[str, Any] = json.loads(json.dumps(body, default=str))
    return loaded


async def _send_chunk(body: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    group = run_group(body["run_id"])
    text = json.dumps({"type": "chunk", "chunk": body})
    await layer.group_send(group, {"type": "run.chunk", "group": group, "chunk": body, "text": text})


class RunOutput:
    """A continuation's output on its way to the pages watching its runs (best effort, not kept).

    With Redis each chunk goes to the run's group at once. With the in-process layer the chunks go
    through the outbox, in order: consecutive text deltas of a run are merged, and what has come
    is written at most ``OUTPUT_FLUSH_SECONDS`` after it came, and at once when a run finishes or
    fails. Publishing never fails the continuation: a chunk that cannot be sent is logged and dropped.

        async with RunOutput(agent_id) as output:
            async for chunk in stream:
                await output.send(chunk)
    """

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self._outbox = uses_outbox()
        self._pending: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RunOutput:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def send(self, chunk: Chunk) -> None:
        body = _chunk_body(chunk)
        if not self._outbox:
            try:
                await _send_chunk(body)
            except Exception:
                logger.exception("Live output of run %s could not be sent; dropped", chunk.run_id)
            return
        last = self._pending[-1] if self._pending else None
        if (
            body["type"] == "text-delta"
            and last is not None
            and last["type"] == "text-delta"
            and last["run_id"] == body["run_id"]
        ):
            last["payload"] = {"text": last["payload"].get("text", "") + body["payload"].get("text", "")}
        else:
            self._pending.append(body)
        if body["type"] in ("finish", "error"):
            await self.flush()
        elif self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._flush_soon())

    async def flush(self) -> None:
        """Write what has come so far to the outbox (one row per run, in order)."""
        async with self._lock:
            batch, self._pending = self._pending, []
            if not batch:
                return
            try:
                await database_sync_to_async(_write_output)(self.agent_id, batch)
            except Exception:
                logger.exception("Live output of run %s could not be written; dropped", batch[0]["run_id"])

    async def aclose(self) -> None:
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()  # a flush it started goes on (shielded) and keeps its place in line
        await self.flush()

    async def _flush_soon(self) -> None:
        while self._pending:
            await asyncio.sleep(OUTPUT_FLUSH_SECONDS)
            await asyncio.shield(self.flush())


def _write_output(agent_id: str, chunks: list[dict[str, Any]]) -> None:
    rows: list[LiveEvent] = []
    for chunk in chunks:
        if rows and rows[-1].run_id == chunk["run_id"]:
            rows[-1].payload["chunks"].append(chunk)
        else:
            rows.append(
                LiveEvent(
                    kind=LiveEvent.Kind.OUTPUT,
                    agent_id=agent_id,
                    run_id=chunk["run_id"],
                    payload={"chunks": [chunk]},
                )
            )
    LiveEvent.objects.bulk_create(rows)


class Member(Protocol):
    """An open page (a consumer) that ``Fanout`` forwards a group's messages to."""

    async def forward(self, message: dict[str, Any]) -> None: ...


class Fanout:
    """One channel-layer channel per server process for all live groups, fanned out in the process.

    Channels' usual way gives every socket its own layer channel and group memberships, so one event
    costs one layer message per open page (with Redis: one write and one read each, and a task hop
    per page in either layer). Here each process joins every group that one of its pages needs once,
    receives each event once, and hands it to its pages directly, yielding to the event loop every
    ``BATCH`` pages so the first ones are written out while the rest are served.
    """

    BATCH = 50
    #: Layers forget group memberships (after ``group_expiry``, or when Redis restarts): renew them.
    REJOIN_SECONDS = 300.0

    def __init__(self) -> None:
        self._hubs: dict[asyncio.AbstractEventLoop, _Hub] = {}

    def _hub(self) -> _Hub:
        loop = asyncio.get_running_loop()
        hub = self._hubs.get(loop)
        if hub is None:
            self._hubs = {lp: h for lp, h in self._hubs.items() if not lp.is_closed()}
            hub = self._hubs[loop] = _Hub(self)
        return hub

    async def join(self, group: str, member: Member) -> None:
        await self._hub().join(group, member)

    async def leave(self, group: str, member: Member) -> None:
        await self._hub().leave(group, member)


class _Hub:
    """``Fanout`` in one event loop (channel layers are bound to the loop they run in)."""

    def __init__(self, fanout: Fanout) -> None:
        self.fanout = fanout
        self.layer = get_channel_layer()
        self.channel = ""
        self.members: dict[str, set[Member]] = {}
        self.lock = asyncio.Lock()
        self.tasks: list[asyncio.Task[None]] = []

    async def join(self, group: str, member: Member) -> None:
        async with self.lock:
            if not self.channel:
                self.channel = await self.layer.new_channel()
            if group not in self.members:
                await self.layer.group_add(group, self.channel)
                self.members[group] = set()
            self.members[group].add(member)
            if not self.tasks or any(t.done() for t in self.tasks):
                for task in self.tasks:
                    task.cancel()
                loop = asyncio.get_running_loop()
                # Fresh contexts: these outlive the consumer that started them.
                self.tasks = [
                    loop.create_task(
                        self._pump(), name="countersign-live-fanout", context=contextvars.Context()
                    ),
                    loop.create_task(
                        self._renew(), name="countersign-live-renew", context=contextvars.Context()
                    ),
                ]

    async def leave(self, group: str, member: Member) -> None:
        async with self.lock:
            members = self.members.get(group)
            if members is None:
                return
            members.discard(member)
            if not members:
                del self.members[group]
                await self.layer.group_discard(group, self.channel)

    async def _rejoin(self) -> None:
        async with self.lock:
            for group in list(self.members):
                await self.layer.group_add(group, self.channel)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.fanout.REJOIN_SECONDS)
            try:
                await self._rejoin()
            except Exception:
                logger.exception("Live fan-out: renewing group memberships failed")

    async def _pump(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Live fan-out: receiving failed; retrying")
                await asyncio.sleep(1)
                with contextlib.suppress(Exception):
                    await self._rejoin()
                continue
            members = list(self.members.get(message.get("group", ""), ()))
            for index, member in enumerate(members, start=1):
                try:
                    await member.forward(message)
                except Exception:
                    logger.exception("Live fan-out: forwarding to %r failed", member)
                if index % self.fanout.BATCH == 0:
                    await asyncio.sleep(0)


fanout = Fanout()


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
        for chunk in payload["chunks"]:
            await _send_chunk(chunk)
    elif kind == LiveEvent.Kind.SIGN_OUT:
        await _send_sign_out(payload["group"])
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
