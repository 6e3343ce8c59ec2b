"""The live websocket: who may connect, which events they get, and run output streaming."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User

from approvals.live import events as live_events
from tests.support.live_sockets import connect, next_message
from tests.support.runtime_fixtures import DashboardAgents

pytestmark = pytest.mark.django_db(transaction=True)


async def _events_until(communicator: WebsocketCommunicator, last: str) -> list[dict[str, Any]]:
    events = []
    while not events or events[-1]["type"] != last:
        events.append((await next_message(communicator, "event"))["event"])
    return events


async def test_anonymous_socket_is_closed_with_4401_after_the_handshake(agents: DashboardAgents) -> None:
    # Refused at the handshake, a browser would only see 1006 (Daphne answers 403) and retry forever;
    # 4401 on an accepted socket tells live.js the session is over.
    communicator, connected, _ = await connect(None)
    assert connected
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    await communicator.disconnect()


async def test_reviewer_receives_suspension_of_a_run_started_after_connecting(
    agents: DashboardAgents, reviewer: User
) -> None:
    communicator, connected, _ = await connect(reviewer)
    assert connected
    hello = await next_message(communicator, "hello")
    assert set(hello["agents"]) == {"helpdesk", "boss", "worker"}

    result = await agents.agent("helpdesk").generate("refund broken parcel", thread_id="t-live")
    assert result.status == "suspended"

    (event,) = await _events_until(communicator, "run-suspended")
    assert (event["agent_id"], event["run_id"]) == ("helpdesk", result.run_id)
    await communicator.disconnect()


async def test_decisions_made_elsewhere_reach_open_pages(agents: DashboardAgents, reviewer: User) -> None:
    result = await agents.agent("helpdesk").generate("refund late delivery")
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")

    stream = await agents.agent("helpdesk").approve_tool_call(
        run_id=result.run_id, tool_call_id=result.tool_calls[0].tool_call_id, actor="someone-else"
    )
    assert (await stream.result()).status == "success"

    events = await _events_until(communicator, "run-completed")
    assert [e["type"] for e in events] == ["call-decided", "run-resumed", "run-completed"]
    assert {e["run_id"] for e in events} == {result.run_id}
    assert events[0]["actor"] == "someone-else"
    await communicator.disconnect()


async def test_designated_reviewer_only_gets_events_of_their_agents(
    agents: DashboardAgents, reviewer: User
) -> None:
    await sync_to_async(_designate)(reviewer, "boss")
    communicator, connected, _ = await connect(reviewer)
    assert connected
    hello = await next_message(communicator, "hello")
    assert hello["agents"] == ["boss"]

    await agents.agent("helpdesk").generate("refund for someone else")
    boss_run = await agents.agent("boss").generate("wipe the old server")

    (event,) = await _events_until(communicator, "run-suspended")
    # The helpdesk suspension came first and was never delivered; the boss's (and its worker's
    # inner run, which the designated reviewer may not see) are filtered the same way.
    assert (event["agent_id"], event["run_id"]) == ("boss", boss_run.run_id)
    await communicator.disconnect()


def _designate(user: User, agent_id: str) -> None:
    group, _ = Group.objects.get_or_create(name=f"agent:{agent_id}")
    user.groups.add(group)


async def test_run_output_streams_to_pages_subscribed_to_that_run(
    agents: DashboardAgents, reviewer: User
) -> None:
    result = await agents.agent("helpdesk").generate("refund scratched table")
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")
    await communicator.send_json_to({"subscribe_run": result.run_id})
    assert (await next_message(communicator, "subscribed"))["run_id"] == result.run_id

    # Decided through the dashboard's wiring: the continuation runs as a task that streams its chunks.
    stream = await agents.agent("helpdesk").approve_tool_call(
        run_id=result.run_id, tool_call_id=result.tool_calls[0].tool_call_id
    )
    assert (await stream.result()).status == "success"

    chunks = []
    while not chunks or chunks[-1]["type"] != "finish":
        chunks.append((await next_message(communicator, "chunk"))["chunk"])
    kinds = [c["type"] for c in chunks]
    assert "tool-result" in kinds and "text-delta" in kinds
    assert chunks[-1]["payload"]["status"] == "success"
    await communicator.disconnect()


async def test_a_continuations_output_crosses_the_layer_as_one_message_and_reaches_the_page_whole(
    agents: DashboardAgents, reviewer: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quick continuation's chunks, each a frame to the page as before, travel the channel layer
    together (with Redis a message costs round trips whether or not a page listens), its text
    deltas merged on the way; on whichever layer this suite runs (Redis with ``REDIS_URL``)."""
    monkeypatch.setattr(live_events, "OUTPUT_FLUSH_SECONDS", 60.0)  # (all of it goes at the finish)
    layer = get_channel_layer()
    to_runs: list[str] = []
    group_send = layer.group_send

    async def counted(group: str, message: dict[str, Any]) -> None:
        if group.startswith("run."):
            to_runs.append(group)
        await group_send(group, message)

    monkeypatch.setattr(layer, "group_send", counted)
    result = await agents.agent("helpdesk").generate("refund scratched table")
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")
    await communicator.send_json_to({"subscribe_run": result.run_id})
    await next_message(communicator, "subscribed")

    stream = await agents.agent("helpdesk").approve_tool_call(
        run_id=result.run_id, tool_call_id=result.tool_calls[0].tool_call_id
    )
    answer = await stream.result()
    chunks = []
    while not chunks or chunks[-1]["type"] != "finish":
        chunks.append((await next_message(communicator, "chunk"))["chunk"])

    assert [c["type"] for c in chunks] == [
        "step-finish", "tool-call", "tool-result", "text-delta", "step-finish", "finish"
    ]  # fmt: skip
    assert chunks[3]["payload"]["text"] == answer.text
    # Through the outbox the run's "completed" event keeps its place between the output and the
    # finish, and splits it in two.
    assert to_runs == [live_events.run_group(result.run_id)] * (2 if live_events.uses_outbox() else 1)
    await communicator.disconnect()


async def test_subscribing_to_a_foreign_or_unknown_run_is_refused(
    agents: DashboardAgents, reviewer: User
) -> None:
    await sync_to_async(_designate)(reviewer, "boss")
    helpdesk_run = await agents.agent("helpdesk").generate("refund not yours")
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")
    for run_id in (helpdesk_run.run_id, "no-such-run"):
        await communicator.send_json_to({"subscribe_run": run_id})
        refusal = await next_message(communicator, "error")
        assert refusal == {"type": "error", "error": "unknown run", "run_id": run_id}
    await communicator.disconnect()


async def test_a_frame_that_is_not_json_gets_an_error_and_the_socket_stays_usable(
    agents: DashboardAgents, reviewer: User
) -> None:
    result = await agents.agent("helpdesk").generate("refund after a bad frame")
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")
    await communicator.send_to(text_data="{not json")
    assert (await next_message(communicator, "error"))["error"] == "expected {'subscribe_run': '<run id>'}"
    await communicator.send_json_to({"subscribe_run": result.run_id})
    assert (await next_message(communicator, "subscribed"))["run_id"] == result.run_id
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("origin", "host", "scheme"),
    [
        (b"http://127.0.0.1:9999", b"127.0.0.1", None),  # another port: any local process's page
        (b"https://127.0.0.1", b"127.0.0.1", None),  # another scheme
        (b"http://localhost:1234", b"localhost", None),
        (b"http://evil.example", b"127.0.0.1", None),
        (b"http://127.0.0.1", b"evil.example", None),  # a host the site does not answer to
        (b"null", b"127.0.0.1", None),
    ],
)
async def test_a_socket_from_another_origin_is_refused(
    agents: DashboardAgents, reviewer: User, origin: bytes, host: bytes, scheme: str | None
) -> None:
    _communicator, connected, _ = await connect(reviewer, origin=origin, host=host, scheme=scheme)
    assert not connected


@pytest.mark.parametrize(
    ("origin", "host", "scheme"),
    [
        (b"http://127.0.0.1:8000", b"127.0.0.1:8000", None),
        (b"http://localhost", b"localhost:80", None),
        (b"https://127.0.0.1", b"127.0.0.1", "wss"),
    ],
)
async def test_a_socket_from_the_sites_own_origin_is_accepted(
    agents: DashboardAgents, reviewer: User, origin: bytes, host: bytes, scheme: str | None
) -> None:
    communicator, connected, _ = await connect(reviewer, origin=origin, host=host, scheme=scheme)
    assert connected
    await next_message(communicator, "hello")
    await communicator.disconnect()


async def test_a_trusted_extra_origin_may_connect(
    agents: DashboardAgents, reviewer: User, settings: Any
) -> None:
    settings.LIVE_TRUSTED_ORIGINS = ["https://desk.example.com"]
    communicator, connected, _ = await connect(reviewer, origin=b"https://desk.example.com")
    assert connected
    await communicator.disconnect()


@pytest.mark.parametrize(
    "frame",
    [
        '{"subscribe_run": "ab\\u0000cd"}',  # NUL: PostgreSQL text refuses it
        '{"subscribe_run": "\\ud800"}',  # a lone surrogate: cannot be encoded
        "[" * 50_000 + "]" * 50_000,  # nested past the parser's recursion limit
        '{"subscribe_run": ' + "[" * 900 + "]" * 900 + "}",
        '{"subscribe_run": "' + "x" * 10_000 + '"}',
    ],
)
async def test_a_bad_frame_gets_an_error_and_the_socket_stays_open(
    agents: DashboardAgents, reviewer: User, frame: str
) -> None:
    result = await agents.agent("helpdesk").generate("refund after a bad frame")
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")
    await communicator.send_to(text_data=frame)
    assert (await next_message(communicator, "error"))["error"] == "expected {'subscribe_run': '<run id>'}"
    await communicator.send_json_to({"subscribe_run": result.run_id})
    assert (await next_message(communicator, "subscribed"))["run_id"] == result.run_id
    await communicator.disconnect()


async def test_a_socket_that_keeps_sending_garbage_is_closed_with_a_policy_code(
    agents: DashboardAgents, reviewer: User
) -> None:
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")
    for _ in range(20):
        await communicator.send_to(text_data="garbage")
        await next_message(communicator, "error")
    await communicator.send_to(text_data="garbage")
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 1008}
    await communicator.disconnect()  # what the server does after a close: the consumer leaves its groups


async def test_a_socket_that_sends_more_than_a_page_does_is_closed_with_a_policy_code(
    agents: DashboardAgents, reviewer: User, settings: Any
) -> None:
    settings.LIVE_MAX_FRAMES_PER_MINUTE = 5
    result = await agents.agent("helpdesk").generate("refund under a flood")
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")
    for _ in range(5):  # well-formed frames, each answered
        await communicator.send_json_to({"subscribe_run": result.run_id})
        await next_message(communicator, "subscribed")
    await communicator.send_json_to({"subscribe_run": result.run_id})
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 1008}
    await communicator.disconnect()


@pytest.mark.parametrize("ask", ["subscribe_run", "presence"])
async def test_a_socket_probing_for_run_ids_is_closed_with_a_policy_code(
    agents: DashboardAgents, reviewer: User, ask: str
) -> None:
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")
    for n in range(20):
        await communicator.send_json_to({ask: f"guessed-run-{n}"})
        assert (await next_message(communicator, "error"))["error"] == "unknown run"
    await communicator.send_json_to({ask: "guessed-run-20"})
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 1008}
    await communicator.disconnect()


async def test_a_page_may_watch_only_so_many_runs(
    agents: DashboardAgents, reviewer: User, settings: Any
) -> None:
    settings.LIVE_MAX_RUN_SUBSCRIPTIONS = 2
    runs = [await agents.agent("helpdesk").generate(f"refund {n}") for n in range(3)]
    communicator, connected, _ = await connect(reviewer)
    assert connected
    await next_message(communicator, "hello")
    for run in runs[:2]:
        await communicator.send_json_to({"subscribe_run": run.run_id})
        assert (await next_message(communicator, "subscribed"))["run_id"] == run.run_id
    await communicator.send_json_to({"subscribe_run": runs[2].run_id})
    refusal = await next_message(communicator, "error")
    assert refusal["error"] == "a page may watch at most 2 runs"
    # Asking again for one it watches is not another subscription.
    await communicator.send_json_to({"subscribe_run": runs[0].run_id})
    assert (await next_message(communicator, "subscribed"))["run_id"] == runs[0].run_id
    await communicator.disconnect()
