"""A continuation that runs in another process (a ``db_worker``), followed through the channel layer.

The dashboard's run page watches a run's output in the run's group (``live.run_group``): with Redis
the worker sends its chunks there, with the in-process layer it writes them to the outbox, which
this process's relay forwards to the same group. The API's decision stream joins that group (through
this process's ``live.fanout``, as a page does) before the decision is made, so it misses nothing the
continuation sends, and ends at the run's ``finish`` (success, suspension or failure).

A worker that dies before its ``finish`` sends nothing more: the stream also ends once the task
backend reports the continuation over, and at the latest after ``API_STREAM_MAX_SECONDS``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.tasks.backends.immediate import ImmediateBackend

from agents_runtime import Chunk
from approvals import live, tasks

#: How often a stream waiting on a worker asks the task backend whether the continuation is over.
POLL_SECONDS = 2.0
#: How long a stream waits, once the continuation is over, for the rest of its output to arrive
#: (its ``finish``), before it ends without it: the output comes through the live layer (with the
#: in-process layer, the outbox's relay), which a busy machine can hold back for a while.
OUTPUT_GRACE_SECONDS = 5.0


def continues_elsewhere() -> bool:
    """True when a decided run goes on in a worker process, not in the deciding request."""
    return not isinstance(tasks.continue_run.get_backend(), ImmediateBackend)


class RunFollower:
    """Member of a run's live group for one API stream: the group's chunks, in order, until ``finish``."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.group = live.run_group(run_id)
        self.queue: asyncio.Queue[Chunk] = asyncio.Queue()
        self.joined = False

    async def __aenter__(self) -> RunFollower:
        await live.relay.ensure_started()
        await live.fanout.join(self.group, self)
        self.joined = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.leave()

    async def leave(self) -> None:
        if self.joined:
            self.joined = False
            await live.fanout.leave(self.group, self)

    async def forward(self, message: dict[str, Any]) -> None:
        if message.get("type") != "run.chunks" or message.get("run_id") != self.run_id:
            return
        for body in message["chunks"]:
            self.queue.put_nowait(Chunk(body["type"], self.run_id, body.get("payload") or {}))

    async def chunks(self) -> AsyncIterator[Chunk]:
        """The continuation's chunks up to and including its ``finish``; leaves the group at the end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(getattr(settings, "API_STREAM_MAX_SECONDS", 600))
        try:
            while loop.time() < deadline:
                try:
                    wait = min(POLL_SECONDS, deadline - loop.time())
                    chunk = await asyncio.wait_for(self.queue.get(), wait)
                except TimeoutError:
                    if deadline > loop.time() + OUTPUT_GRACE_SECONDS and await self._over():
                        deadline = loop.time() + OUTPUT_GRACE_SECONDS  # (the rest is on its way)
                    continue
                yield chunk
                if chunk.type == "finish":
                    return
        finally:
            await self.leave()

    async def _over(self) -> bool:
        result = await sync_to_async(tasks.continuation_result)(self.run_id)
        return result is not None and result.status != "running"


async def tapped[T](
    decide: Callable[[], Awaitable[T]],
) -> tuple[asyncio.Future[T], Chunk | None, AsyncIterator[Chunk]]:
    """Run ``decide`` with its continuation's chunks tapped into this request: the decision's task,
    the first chunk (None: the decision ended with no continuation here, its task says why) and the
    chunks after it, in order, to the continuation's end.

    The task copies this context, so the continuation it starts reports to the listener (and a
    decision's audit row says "api"); it is not cancelled with the request: a decision on record
    goes on if the client hangs up."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Chunk | None] = asyncio.Queue()

    def listener(chunk: Chunk) -> None:
        # Called from the continuation, on whichever thread or loop runs it.
        loop.call_soon_threadsafe(queue.put_nowait, chunk)

    with live.tapping(listener):
        task = asyncio.ensure_future(decide())
    # Queued after every chunk the continuation sent (both go through the loop's queue in order).
    task.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, None))
    first = await queue.get()

    async def rest() -> AsyncIterator[Chunk]:
        while (item := await queue.get()) is not None:
            yield item

    return task, first, rest()
