"""``RunStream``: the chunks of a run as they happen, and its result."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from ._pydantic import Emit
from .store import AgentRun, AgentRunToolCall, Chunk, RunResult

_END: Final = object()


class RunStream:
    """An async iterator of ``Chunk``s for one run, with ``await stream.result()``.

    The run proceeds whether or not anyone iterates: chunks are buffered, and ``result()`` waits
    for the end. Iterating is single-consumer.
    """

    def __init__(self, run_id: str, producer: Callable[[Emit], Awaitable[RunResult]]) -> None:
        self.run_id = run_id
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._task: asyncio.Task[RunResult] = asyncio.ensure_future(self._produce(producer))

    @classmethod
    def finished(cls, result: RunResult, chunks: list[Chunk] | None = None) -> RunStream:
        """A stream that is already over (a decision that did not continue the run)."""

        async def replay(emit: Emit) -> RunResult:
            for chunk in chunks or ():
                emit(chunk)
            return result

        return cls(result.run_id, replay)

    async def _produce(self, producer: Callable[[Emit], Awaitable[RunResult]]) -> RunResult:
        try:
            return await producer(self._queue.put_nowait)
        finally:
            self._queue.put_nowait(_END)

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> Chunk:
        item = await self._queue.get()
        if item is _END:
            # Let a second iteration end too instead of hanging.
            self._queue.put_nowait(_END)
            raise StopAsyncIteration
        assert isinstance(item, Chunk)
        return item

    async def result(self) -> RunResult:
        """Wait for the run (or continuation) to end or suspend, and return its outcome."""
        return await asyncio.shield(self._task)


@dataclass(frozen=True)
class Decided:
    """What ``Agent.decide`` did: the call it decided, the run as the decision left it (the calls it
    still waits on), the record the store wrote with the decision (its id, when the store keeps
    records), and the run's continuation, to consume like any ``RunStream``."""

    call: AgentRunToolCall
    run: AgentRun
    record_id: int | None
    stream: RunStream
