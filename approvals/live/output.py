"""A continuation's output (text deltas, tool calls and results) to the pages watching its run."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from agents_runtime import Chunk
from agents_runtime.untrusted import reveal_invisible
from approvals.live.events import run_group, uses_outbox, write_outbox
from approvals.models import LiveEvent

logger = logging.getLogger(__name__)

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


async def send_chunk(body: dict[str, Any]) -> None:
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
        self._listener = _tap.get()

    async def __aenter__(self) -> RunOutput:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def send(self, chunk: Chunk) -> None:
        if self._listener is not None:
            try:
                self._listener(chunk)
            except Exception:
                logger.exception("The listener of run %s's output failed; it gets no more", chunk.run_id)
                self._listener = None
        body = _chunk_body(chunk)
        if not self._outbox:
            try:
                await send_chunk(body)
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
    rows: list[tuple[str, str, str, dict[str, Any]]] = []
    for chunk in chunks:
        if rows and rows[-1][2] == chunk["run_id"]:
            rows[-1][3]["chunks"].append(chunk)
        else:
            rows.append((LiveEvent.Kind.OUTPUT, agent_id, chunk["run_id"], {"chunks": [chunk]}))
    write_outbox(rows)
