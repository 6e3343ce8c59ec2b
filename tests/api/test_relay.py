"""An API stream following a continuation that runs elsewhere (``approvals/api/relay.py``)."""

from __future__ import annotations

import asyncio

import pytest

from agents_runtime import Chunk
from approvals.api import relay


async def test_a_stream_takes_the_output_that_arrives_after_the_continuation_is_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The output comes through the live layer (with the in-process layer, the outbox's relay), which a
    # busy machine can hold back past the moment the continuation is known to be over: the stream
    # ended then, and the chat never heard the tool's result.
    monkeypatch.setattr(relay, "POLL_SECONDS", 0.05)
    follower = relay.RunFollower("run-1")

    async def over() -> bool:
        return True

    monkeypatch.setattr(follower, "_over", over)

    async def late() -> None:
        await asyncio.sleep(0.4)
        follower.queue.put_nowait(Chunk("tool-result", "run-1", {"tool_call_id": "c1", "result": "done"}))
        follower.queue.put_nowait(Chunk("finish", "run-1", {"status": "success"}))

    arriving = asyncio.create_task(late())
    heard = [chunk.type async for chunk in follower.chunks()]
    await arriving

    assert heard == ["tool-result", "finish"]
