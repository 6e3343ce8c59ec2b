"""A continuation's output through the outbox (the in-process channel layer, the embedded default).

The layer cannot leave its process, so the output of a continuation that a ``db_worker`` runs must
travel through the ``LiveEvent`` outbox to reach the server's pages; so does the server's own
(exactly once). Every test here runs on the in-process layer, whatever ``REDIS_URL`` says, on the
suite's database (SQLite or PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from agents_runtime import Chunk, RunEvent, Runtime
from approvals import agents as served
from approvals import live
from approvals.live import events as live_events
from approvals.models import LiveEvent
from tests.support import server
from tests.support.live_sockets import WAIT, Session, is_event, messages_until, next_message
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.services import database_url

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = "Refund $300 on A-1042"


@pytest.fixture
def in_process_layer(settings: Any) -> None:
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "approvals.server.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 5000}}
    }
    assert live.uses_outbox()


@pytest.fixture
def demo_agents(settings: Any, transactional_db: None) -> Iterator[Runtime]:
    """The demo runtime (what a ``db_worker`` child serves by default), on the test database."""
    from demo.agents import runtime as demo_runtime

    settings.AGENTS_RUNTIME = "demo.agents:runtime"
    # The demo runtime is the one ApprovalsConfig.ready() composed at start-up.
    assert served.runtime() is demo_runtime
    yield demo_runtime


async def _marker(agent_id: str, run_id: str) -> None:
    """An event written after everything else: whatever was on its way arrives before it."""
    await sync_to_async(live.announce)({"type": "test-marker", "agent_id": agent_id, "run_id": run_id})


def _chunks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["chunk"] for m in messages if m["type"] == "chunk"]


@pytest.mark.slow
async def test_output_of_a_continuation_run_by_a_db_worker_reaches_the_pages_watching_the_run(
    in_process_layer: None, demo_agents: Any, reviewer: User, settings: Any, artifacts_dir: Path
) -> None:
    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    support = demo_agents.get_agent("support")
    run = await support.generate(REFUND, thread_id="t-worker")
    assert run.status == "suspended"
    session = await Session.of(reviewer)
    watcher, bystander = await session.socket(), await session.socket()
    await watcher.send_json_to({"subscribe_run": run.run_id})
    assert (await next_message(watcher, "subscribed"))["run_id"] == run.run_id

    stream = await support.approve_tool_call(run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id)
    assert (await stream.result()).status == "running"  # queued for a worker, not run here
    env = server.env_for(database_url(), tasks_backend="database")
    log = (artifacts_dir / "db_worker.log").open("wb")
    command = [server.MANAGE, "db_worker", "--batch", "--no-startup-delay", "--no-reload"]
    worker = await asyncio.create_subprocess_exec(
        sys.executable, *command, cwd=server.ROOT, env=env, stdout=log, stderr=log
    )
    try:
        streamed = await messages_until(
            watcher, lambda m: m["type"] == "chunk" and m["chunk"]["type"] == "finish", wait=60
        )
        assert await asyncio.wait_for(worker.wait(), timeout=60) == 0
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
        log.close()

    chunks = _chunks(streamed)
    assert {c["run_id"] for c in chunks} == {run.run_id}
    kinds = [c["type"] for c in chunks]
    assert kinds.index("tool-call") < kinds.index("tool-result") < kinds.index("text-delta")
    finish = chunks[-1]["payload"]
    assert finish["status"] == "success"
    # The worker's text deltas, merged on their way, add up to the answer, in order.
    assert "".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta") == finish["text"]
    assert "Refunded $300.00 on A-1042" in finish["text"]

    # Output goes to the pages watching the run, once, and never to the agent's other pages.
    await _marker("support", run.run_id)
    rest = await messages_until(watcher, is_event("test-marker"))
    assert _chunks(rest) == []
    seen = await messages_until(bystander, is_event("test-marker"))
    assert _chunks(seen) == []
    assert any(is_event("run-completed", run.run_id)(m) for m in seen)
    for socket in (watcher, bystander):
        await socket.disconnect()


async def test_output_of_a_continuation_in_this_process_arrives_once_in_order(
    in_process_layer: None, agents: DashboardAgents, reviewer: User
) -> None:
    run = await agents.agent("helpdesk").generate("refund scratched table")
    socket = await (await Session.of(reviewer)).socket()
    await socket.send_json_to({"subscribe_run": run.run_id})
    await next_message(socket, "subscribed")

    # The Immediate task backend: the continuation runs here, in the deciding "request".
    stream = await agents.agent("helpdesk").approve_tool_call(
        run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id
    )
    result = await stream.result()
    assert result.status == "success"
    await _marker("helpdesk", run.run_id)

    chunks = _chunks(await messages_until(socket, is_event("test-marker")))
    kinds = [c["type"] for c in chunks]
    assert kinds.count("finish") == 1 and kinds[-1] == "finish"
    assert kinds.count("tool-result") == 1
    assert "".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta") == result.text
    assert await sync_to_async(LiveEvent.objects.filter(kind=LiveEvent.Kind.OUTPUT).exists)()
    await socket.disconnect()


def _output_rows() -> list[dict[str, Any]]:
    return list(
        LiveEvent.objects.filter(kind=LiveEvent.Kind.OUTPUT).order_by("id").values("run_id", "payload")
    )


async def _output_rows_within(seconds: float) -> list[dict[str, Any]]:
    """The output rows, once there are any (or after ``seconds``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    rows = await sync_to_async(_output_rows)()
    while not rows and loop.time() < deadline:
        await asyncio.sleep(0.05)
        rows = await sync_to_async(_output_rows)()
    return rows


async def test_text_deltas_are_merged_into_one_outbox_row_written_at_the_finish(
    in_process_layer: None, transactional_db: None
) -> None:
    words = [f"word{i} " for i in range(50)]
    async with live.RunOutput("helpdesk") as output:
        for word in words[:25]:
            await output.send(Chunk("text-delta", "r-1", {"text": word}))
        await output.send(Chunk("tool-call", "r-1", {"tool_name": "refund", "args": {"n": 1}}))
        for word in words[25:]:
            await output.send(Chunk("text-delta", "r-1", {"text": word}))
        await output.send(Chunk("finish", "r-1", {"status": "success"}))
        # Written at the finish, not when the block ends.
        rows = await sync_to_async(_output_rows)()

    (row,) = rows
    chunks = row["payload"]["chunks"]
    assert [c["type"] for c in chunks] == ["text-delta", "tool-call", "text-delta", "finish"]
    assert chunks[0]["payload"]["text"] == "".join(words[:25])
    assert chunks[2]["payload"]["text"] == "".join(words[25:])
    assert row["run_id"] == "r-1"


async def test_pages_get_output_with_invisible_characters_shown_as_marks(
    in_process_layer: None, transactional_db: None
) -> None:
    async with live.RunOutput("helpdesk") as output:
        await output.send(Chunk("text-delta", "r-3", {"text": "IBAN 12\u202e3456"}))
        await output.send(Chunk("tool-call", "r-3", {"tool_name": "refund", "args": {"note": "a\u200bb"}}))
        await output.send(Chunk("finish", "r-3", {"status": "success"}))
        rows = await sync_to_async(_output_rows)()

    (row,) = rows
    text, call, _ = row["payload"]["chunks"]
    assert text["payload"]["text"] == "IBAN 12⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧3456"
    assert call["payload"]["args"] == {"note": "a⟦U+200B ZERO WIDTH SPACE⟧b"}


async def test_output_waiting_for_more_is_written_soon_without_a_finish(
    in_process_layer: None, transactional_db: None
) -> None:
    output = live.RunOutput("helpdesk")
    await output.send(Chunk("text-delta", "r-2", {"text": "thinking"}))
    # The model stalls: what came so far must not wait for the next chunk.
    rows = await _output_rows_within(WAIT)
    assert [row["payload"]["chunks"] for row in rows] == [
        [{"type": "text-delta", "run_id": "r-2", "payload": {"text": "thinking"}}]
    ]
    await output.aclose()


async def test_relay_waits_for_an_outbox_row_that_commits_after_a_later_one(
    in_process_layer: None, agents: DashboardAgents, reviewer: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ids are handed out at insert, rows show up at commit: on PostgreSQL, row N+1 can be visible
    # before row N. Explicit ids play that out on any database.
    monkeypatch.setattr(
        live.outbox, "OUTBOX_GAP_WAIT_SECONDS", 120.0
    )  # the gap here is filled, never skipped
    socket = await (await Session.of(reviewer)).socket()
    await _marker("helpdesk", "first")
    await messages_until(socket, is_event("test-marker", "first"))
    last = await sync_to_async(lambda: LiveEvent.objects.latest("id").id)()

    def write(row_id: int, run_id: str) -> None:
        payload = {"type": "test-marker", "agent_id": "helpdesk", "run_id": run_id}
        LiveEvent.objects.create(id=row_id, agent_id="helpdesk", run_id=run_id, payload=payload)

    await sync_to_async(write)(last + 2, "later")
    await asyncio.sleep(0.5)  # room for the relay to read the later row first
    await sync_to_async(write)(last + 1, "earlier")

    earlier = await next_message(socket, "event")
    later = await next_message(socket, "event")
    assert [earlier["event"]["run_id"], later["event"]["run_id"]] == ["earlier", "later"]
    await socket.disconnect()


@pytest.mark.postgres
async def test_relay_delivers_a_row_that_commits_after_a_later_one_on_postgresql(
    in_process_layer: None, agents: DashboardAgents, reviewer: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    monkeypatch.setattr(live.outbox, "OUTBOX_GAP_WAIT_SECONDS", 120.0)
    socket = await (await Session.of(reviewer)).socket()
    await _marker("helpdesk", "first")
    await messages_until(socket, is_event("test-marker", "first"))

    table = LiveEvent._meta.db_table
    insert = (
        f"INSERT INTO {table} (created_at, kind, agent_id, run_id, payload) "
        "VALUES (now(), 'event', 'helpdesk', %s, %s) RETURNING id"
    )
    async with await psycopg.AsyncConnection.connect(database_url()) as slow:
        async with slow.transaction():
            payload = '{"type": "test-marker", "agent_id": "helpdesk", "run_id": "earlier"}'
            await slow.execute(insert, ("earlier", payload))
            # Another writer takes the next id and commits first.
            await _marker("helpdesk", "later")
            await asyncio.sleep(0.5)  # room for the relay to read the later row first
        earlier = await next_message(socket, "event")
        later = await next_message(socket, "event")
    assert [earlier["event"]["run_id"], later["event"]["run_id"]] == ["earlier", "later"]
    await socket.disconnect()


async def test_a_continuations_events_go_out_with_its_output_in_one_write_in_the_order_they_came(
    in_process_layer: None, agents: DashboardAgents, reviewer: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run resumed, its output and the run completed: one outbox write, not one each (the
    decision's own event goes out at once, before the continuation starts)."""
    monkeypatch.setattr(live_events, "OUTPUT_FLUSH_SECONDS", 60.0)  # (all of it at the finish)
    run = await agents.agent("helpdesk").generate("refund scratched table")
    writes: list[list[tuple[str, str]]] = []
    write_outbox = live_events.write_outbox

    def counted(rows: list[tuple[str, str, str, Any]]) -> None:
        writes.append([(kind, payload.get("type") or "output") for kind, _, _, payload in rows])
        write_outbox(rows)

    monkeypatch.setattr(live_events, "write_outbox", counted)
    stream = await agents.agent("helpdesk").approve_tool_call(
        run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id
    )
    assert (await stream.result()).status == "success"

    event, output = LiveEvent.Kind.EVENT, LiveEvent.Kind.OUTPUT
    assert writes == [
        [(event, "call-decided")],
        [(event, "run-resumed"), (output, "output"), (event, "run-completed"), (output, "output")],
    ]
    rows = await sync_to_async(list)(
        LiveEvent.objects.filter(run_id=run.run_id, kind=output)
        .order_by("id")
        .values_list("payload", flat=True)
    )
    assert [c["type"] for row in rows for c in row["chunks"]][-1] == "finish"


async def test_an_event_after_the_output_closed_is_written_at_once(
    in_process_layer: None, transactional_db: None
) -> None:
    async with live.RunOutput("helpdesk") as output:
        await output.send(Chunk("finish", "r-4", {"status": "success"}))
        # (The producer of a continuation keeps the context it started in, this output in it.)
        context = contextvars.copy_context()

    late = live.publish(RunEvent("run-completed", "helpdesk", "r-4"))
    await asyncio.get_running_loop().create_task(late, context=context)

    kinds = await sync_to_async(list)(LiveEvent.objects.order_by("id").values_list("kind", flat=True))
    assert kinds == [LiveEvent.Kind.OUTPUT, LiveEvent.Kind.EVENT]
