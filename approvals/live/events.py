"""What the pages watching hear, on its way to every server process: run events, the dashboard's own
events, sign-outs and a continuation's streamed output (text deltas, tool calls and results); the live
groups they go to, and the delivery path this process's channel layer takes.

With Redis a message goes to the channel layer (an event at once, a continuation's output within
``OUTPUT_FLUSH_SECONDS``: ``RunOutput``); with the in-process layer it is written to the
``LiveEvent`` outbox, which ``approvals.live.outbox`` relays in every server process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from functools import cache, partial
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import connections, router, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from agents_runtime import Chunk, RunEvent
from agents_runtime.store import DecisionAction
from agents_runtime.untrusted import reveal_invisible
from approvals.ids import safe
from approvals.models import AuditEntry, LiveEvent

logger = logging.getLogger(__name__)


def agent_group(agent_id: str) -> str:
    # Channels group names: ASCII letters, digits, "-", "_", "." and under 100 characters.
    return f"agent.{safe(agent_id)}"[:99]


def run_group(run_id: str) -> str:
    return f"run.{safe(run_id)}"[:99]


def presence_group(run_id: str) -> str:
    """The open pages of one run's card (who else has it open: ``LiveConsumer``'s presence)."""
    return f"presence.{safe(run_id)}"[:99]


def escalation_group(name: str) -> str:
    """The open pages of the members of the Django group ``name``, for the calls escalated to it (the
    agent's other calls are not theirs). A digest: group names are free text, and two names must
    never share a layer group."""
    return "escalation." + hashlib.sha256(name.encode()).hexdigest()[:40]


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
    """Send one event to the pages showing its agent, and to those of the members of the groups its
    call was escalated to (``escalated_to``; in reach of this layer: see ``Fanout``)."""
    layer = get_channel_layer()
    if layer is None:
        return
    # Routing only: the pages refetch what changed, and the frame stays ids.
    escalated_to = event.pop("escalated_to", None) or ()
    # Encoded once here rather than once per open page.
    text = json.dumps({"type": "event", "event": event})
    for group in (agent_group(event["agent_id"]), *map(escalation_group, escalated_to)):
        await layer.group_send(group, {"type": "run.event", "group": group, "event": event, "text": text})


async def publish(event: RunEvent) -> None:
    """The runtime listener: the store change is committed when this runs.

    An expiry carries what the deadline did (``expired_as``: "approve" or "decline", from the call's
    audit row, written in the same step): an open card says it, not what the tool asked for."""
    payload = dataclasses.asdict(event)
    if event.type == "call-decided" and event.action == DecisionAction.EXPIRE and event.tool_call_id:
        expired_as = database_sync_to_async(AuditEntry.objects.expired_as)
        payload["expired_as"] = await expired_as(event.run_id, event.tool_call_id)
    if not uses_outbox():
        await deliver(payload)
        return
    row = (LiveEvent.Kind.EVENT, event.agent_id, event.run_id, payload)
    output = _writing.get()
    if output is None or not await output.add_event(row):
        await database_sync_to_async(write_outbox)([row])


def write_outbox(rows: list[tuple[str, str, str, Any]]) -> None:
    """Outbox rows, each ``(kind, agent id, run id, payload)``, in one INSERT.

    Written by hand: the ORM's ``create`` spent more of the server's CPU on each row (the model
    instance, its save and the insert's compilation) than the statement itself, three rows a decision.
    """
    connection = connections[router.db_for_write(LiveEvent)]
    payload_field = LiveEvent._meta.get_field("payload")
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    values: list[Any] = []
    for kind, agent_id, run_id, payload in rows:
        values += [now, kind, agent_id, run_id, payload_field.get_db_prep_value(payload, connection)]
    row = "(%s, %s, %s, %s, %s)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {LiveEvent._meta.db_table} (created_at, kind, agent_id, run_id, payload)"
            f" VALUES {', '.join([row] * len(rows))}",
            values,
        )


def announce(event: dict[str, Any]) -> None:
    """``publish`` for the dashboard's own events, from synchronous code (after its commit).

    ``event`` is small and id-only like a run event: at least ``type``, ``agent_id`` and ``run_id``.
    """
    if uses_outbox():
        write_outbox([(LiveEvent.Kind.EVENT, event["agent_id"], event["run_id"], event)])
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
        async_to_sync(send_sign_out)(group)


def close_sockets_on_logout(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    """``user_logged_out``: the session's open live sockets close (4401), in every server process."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        transaction.on_commit(partial(end_session, session_key), robust=True)


async def send_sign_out(group: str) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(group, {"type": "session.ended", "group": group})


#: How long a continuation's output may wait in its process before it is written to the outbox.
OUTPUT_FLUSH_SECONDS = 0.1


def _chunk_body(chunk: Chunk) -> dict[str, Any]:
    # Through JSON once: tool args and results may hold values only ``str`` can show. What pages show
    # of it has its invisible characters as marks, as everywhere else (the pages only show it).
    body = {"type": chunk.type, "run_id": chunk.run_id, "payload": _shown(chunk.payload)}
    loaded: dict[str, Any] = json.loads(json.dumps(body, default=str))
    return loaded


def _shown(value: Any) -> Any:
    if isinstance(value, str):
        return reveal_invisible(value)
    if isinstance(value, dict):
        return {reveal_invisible(k) if isinstance(k, str) else k: _shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_shown(v) for v in value]
    return value


#: The continuation's output open in this context (``RunOutput``, the in-process layer only): the run
#: events published meanwhile join its outbox rows, in order, rather than each being a write of its own.
_writing: ContextVar[RunOutput | None] = ContextVar("countersign_run_output", default=None)

#: A listener of the continuations this context starts: the API request that decided a run streams
#: the continuation's chunks to its client. A context variable because the continuation runs as a
#: task (``approvals.tasks``) the decision hands to the scheduler; with the Immediate backend it runs
#: in the deciding request's context, which asgiref carries into every thread and loop on the way.
#: A continuation run by a ``db_worker`` has no listener: its output reaches only the live pages.
_tap: ContextVar[Callable[[Chunk], None] | None] = ContextVar("countersign_output_tap", default=None)


@contextmanager
def tapping(listener: Callable[[Chunk], None]) -> Iterator[None]:
    """Hand ``listener`` every chunk of the continuations started in this context."""
    token = _tap.set(listener)
    try:
        yield
    finally:
        _tap.reset(token)


async def send_chunks(run_id: str, bodies: list[dict[str, Any]]) -> None:
    """A run's consecutive output chunks to the pages following it: one layer message, a frame each."""
    layer = get_channel_layer()
    if layer is None or not bodies:
        return
    group = run_group(run_id)
    texts = [json.dumps({"type": "chunk", "chunk": body}) for body in bodies]
    await layer.group_send(
        group, {"type": "run.chunks", "group": group, "run_id": run_id, "chunks": bodies, "texts": texts}
    )


class RunOutput:
    """A continuation's output on its way to the pages watching its runs (best effort, not kept).

    The chunks go out in order, consecutive text deltas of a run merged, at most
    ``OUTPUT_FLUSH_SECONDS`` after they came and at once when a run finishes or fails: each run's
    consecutive chunks one layer message (with Redis, a round trip or two whoever listens) or, with
    the in-process layer, one outbox row. There the run events published in its context while it is
    open (the run resumed, completed, parked again) are written with them, in the order they came: a
    continuation's events and output are then one outbox write, not one each. Publishing never fails
    the continuation: output that cannot be sent is logged and dropped.

        async with RunOutput(agent_id) as output:
            stream = agent.continue_run(...)  # (started inside: its events join the output)
            async for chunk in stream:
                await output.send(chunk)
    """

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self._outbox = uses_outbox()
        #: Output chunks, and run events as outbox rows (``add_event``), in the order they came.
        self._pending: list[dict[str, Any] | tuple[str, str, str, Any]] = []
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None
        self._listener = _tap.get()
        self._open = False
        self._token: Token[RunOutput | None] | None = None

    async def __aenter__(self) -> RunOutput:
        self._open = True
        if self._outbox:
            self._token = _writing.set(self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _writing.reset(self._token)
            self._token = None
        await self.aclose()

    async def add_event(self, row: tuple[str, str, str, Any]) -> bool:
        """Write the outbox row of a run event with this output (at most ``OUTPUT_FLUSH_SECONDS``
        later, and before anything that comes after it); False once this output is closed: the
        caller writes it itself."""
        if not self._open:
            return False
        self._pending.append(row)
        self._flush_later()
        return True

    async def send(self, chunk: Chunk) -> None:
        if self._listener is not None:
            try:
                self._listener(chunk)
            except Exception:
                logger.exception("The listener of run %s's output failed; it gets no more", chunk.run_id)
                self._listener = None
        body = _chunk_body(chunk)
        last = self._pending[-1] if self._pending else None
        if (
            body["type"] == "text-delta"
            and isinstance(last, dict)
            and last["type"] == "text-delta"
            and last["run_id"] == body["run_id"]
        ):
            last["payload"] = {"text": last["payload"].get("text", "") + body["payload"].get("text", "")}
        else:
            self._pending.append(body)
        if body["type"] in ("finish", "error"):
            await self.flush()
        else:
            self._flush_later()

    def _flush_later(self) -> None:
        if self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._flush_soon())

    async def flush(self) -> None:
        """Send what has come so far, in order (a message or outbox row per run's chunks, per event)."""
        async with self._lock:
            batch, self._pending = self._pending, []
            if not batch:
                return
            rows = _output_rows(self.agent_id, batch)
            try:
                if self._outbox:
                    await database_sync_to_async(write_outbox)(rows)
                else:  # (no events here: they went to their agents' groups at once)
                    for _kind, _agent_id, run_id, payload in rows:
                        await send_chunks(run_id, payload["chunks"])
            except Exception:
                first = batch[0]
                run_id = first[2] if isinstance(first, tuple) else first["run_id"]
                logger.exception("Live output and events of run %s could not be sent; dropped", run_id)

    async def aclose(self) -> None:
        self._open = False
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()  # a flush it started goes on (shielded) and keeps its place in line
        await self.flush()

    async def _flush_soon(self) -> None:
        while self._pending:
            await asyncio.sleep(OUTPUT_FLUSH_SECONDS)
            await asyncio.shield(self.flush())


def _output_rows(
    agent_id: str, pending: list[dict[str, Any] | tuple[str, str, str, Any]]
) -> list[tuple[str, str, str, Any]]:
    """The outbox rows of output chunks (a row per run's consecutive chunks) and events, in order."""
    rows: list[tuple[str, str, str, Any]] = []
    for item in pending:
        if isinstance(item, tuple):
            rows.append(item)
        elif rows and rows[-1][0] == LiveEvent.Kind.OUTPUT and rows[-1][2] == item["run_id"]:
            rows[-1][3]["chunks"].append(item)
        else:
            rows.append((LiveEvent.Kind.OUTPUT, agent_id, item["run_id"], {"chunks": [item]}))
    return rows
