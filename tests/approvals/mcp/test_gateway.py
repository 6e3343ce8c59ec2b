"""The MCP approval gateway end to end: the official SDK's ``Client`` in front, a real upstream MCP
server behind (``tests/support/mcp_upstream.py``, the SDK's ``MCPServer``), reviewers deciding through
the v1 API and the dashboard, over both transports:

- stdio: the client launches ``manage.py mcp_gateway`` (a process of its own on the test database),
  whose upstream is a stdio command;
- streamable HTTP: the gateway serves in this process (uvicorn), its upstream at an HTTP URL.

Every call of a dangerous tool the upstream really ran is a line in its log: the tests count them.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, User
from django.test import AsyncClient
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CallToolResult, RequestParamsMeta, TextContent

from agents_runtime import fingerprint
from approvals import agents as served
from approvals.mcp.config import load
from approvals.mcp.gateway import Gateway
from approvals.mcp.server import http_server
from approvals.models import ApprovalRequest, AuditEntry, EndedRun, RequestExecution, RunRecord
from approvals.services import requests
from approvals.services.tokens import create_token
from tests.support import server, zygote
from tests.support.api import Api
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.services import database_url
from tests.support.users import make_user

pytestmark = pytest.mark.slow

UPSTREAM = str(Path(__file__).resolve().parents[2] / "support" / "mcp_upstream.py")
AGENT = "files-gateway"
CONFIG = """
[gateway]
agent = "files-gateway"
name = "Files (through MCP)"
progress_seconds = 0.3
deadline_seconds = 3600
http_auth = "{http_auth}"

[upstreams.files]
{upstream}
default = "pass"

[upstreams.files.tools.delete_file]
mode = "approve"
preview = {{ sentence = "Deletes ${{path}} {{0.__class__}}", items = ["${{path}}", "${{owner}}"] }}

[upstreams.files.tools.write_file]
mode = "approve"
when = 'path.startsWith("/etc/")'

[upstreams.files.tools.shutdown]
mode = "hide"
"""

Connect = Callable[..., AbstractAsyncContextManager[Client]]


class Upstream:
    def __init__(self, log: Path) -> None:
        self.log = log

    def calls(self, tool: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [line["args"] for line in lines if line["tool"] == tool]


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "upstream.log")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    ends = time.monotonic() + 30
    while time.monotonic() < ends:
        assert process.poll() is None, "the upstream exited at start"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError("the upstream did not start")


@asynccontextmanager
async def _http_gateway(config: Path) -> AsyncIterator[str]:
    """The gateway serving HTTP in this process, for the test's length. Its life is one task of its
    own: the upstream's client is entered and left in one task (pytest's fixtures set up and tear
    down in different ones)."""
    port, started, stop = _free_port(), asyncio.Event(), asyncio.Event()

    async def serve() -> None:
        gateway = Gateway(load(config))
        async with AsyncExitStack() as stack:
            await gateway.start(stack)
            served = http_server(gateway, host="127.0.0.1", port=port)
            serving = asyncio.create_task(served.serve())
            while not served.started:
                assert not serving.done(), serving
                await asyncio.sleep(0.02)
            started.set()
            await stop.wait()
            served.should_exit = True
            await serving

    life = asyncio.create_task(serve())
    await asyncio.wait([life, asyncio.create_task(started.wait())], return_when=asyncio.FIRST_COMPLETED)
    if life.done():
        life.result()
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop.set()
        await life


@pytest.fixture(params=["stdio", "http"])
async def connect(
    request: pytest.FixtureRequest,
    agents: DashboardAgents,
    upstream: Upstream,
    tmp_path: Path,
    artifacts_dir: Path,
) -> AsyncIterator[Connect]:
    """Opens an SDK client of the gateway over the transport (a stdio gateway's ``--session`` is
    ``s-stdio``; a 2026-07-28 HTTP client has no session of the transport's). What a stdio gateway
    writes to stderr is kept in the test's artifacts (``gateway-stderr.log``)."""
    config = tmp_path / "gateway.toml"
    if request.param == "stdio":
        # Both the gateway and its upstream are forked from the zygote (each a Python that imported
        # Django or the MCP SDK already), through the small process the SDK starts and stops.
        command = json.dumps(zygote.zygote.launcher([sys.executable, UPSTREAM, "--log", str(upstream.log)]))
        config.write_text(CONFIG.format(upstream=f"command = {command}", http_auth="none"))
        env = server.env_for(database_url(), redis_url=_redis_url())
        with (artifacts_dir / "gateway-stderr.log").open("a") as errlog:

            def over_stdio() -> AbstractAsyncContextManager[Client]:
                gateway = [sys.executable, server.MANAGE, "mcp_gateway", "--config", str(config)]
                command, *args = zygote.zygote.launcher([*gateway, "--session", "s-stdio"])
                launch = StdioServerParameters(command=command, args=args, env=env, cwd=server.ROOT)
                return Client(stdio_client(launch, errlog=errlog))

            yield over_stdio
        return
    port = _free_port()
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, waited for in a thread
        [sys.executable, UPSTREAM, "--log", str(upstream.log), "--http", str(port)]
    )
    try:
        await asyncio.to_thread(_wait_for_port, port, process)
        http_auth = "tokens" if request.param == "http-tokens" else "none"
        config.write_text(CONFIG.format(upstream=f'url = "http://127.0.0.1:{port}/mcp"', http_auth=http_auth))
        async with _http_gateway(config) as url:

            def over_http(token: str | None = None) -> AbstractAsyncContextManager[Client]:
                return Client(url) if token is None else _with_token(url, token)

            over_http.url = url  # type: ignore[attr-defined]
            over_http.upstream = process  # type: ignore[attr-defined]

            yield over_http
    finally:
        process.terminate()
        process.wait(timeout=15)


@asynccontextmanager
async def _with_token(url: str, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def _redis_url() -> str | None:
    from django.conf import settings

    return getattr(settings, "REDIS_URL", None) or None


@pytest.fixture
def reviewer_api(reviewer: User) -> Api:
    return Api(create_token(reviewer, name="test").plaintext)


async def parked(tool: str, count: int = 1) -> ApprovalRequest:
    """The ``count``-th request of ``tool``, once its run is parked (and its agent, which the gateway
    registered, served in this process too, as the desk's sweep would serve it)."""
    await sync_to_async(served.sync_external)()
    for _ in range(600):
        rows = [r async for r in ApprovalRequest.objects.filter(tool_name=tool).order_by("created_at", "id")]
        if len(rows) >= count and await RunRecord.objects.filter(run_id=rows[count - 1].run_id).aexists():
            return rows[count - 1]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no parked call of {tool}")


async def decide(api: Api, row: ApprovalRequest, action: str, body: dict[str, Any] | None = None) -> Any:
    path = f"/api/v1/agents/{AGENT}/runs/{row.run_id}/calls/request/{action}"
    return await api.post(path, body or {})


async def _within(seconds: float, answer: Awaitable[CallToolResult]) -> CallToolResult:
    """The gateway's answer, or a failure saying where the request stands (not a hang to the suite's
    timeout): its state, its execution, the gateway's stderr in the artifacts."""
    try:
        return await asyncio.wait_for(answer, seconds)
    except TimeoutError:
        asked = [r async for r in ApprovalRequest.objects.all()]
        rows = [(r.run_id, r.tool_call_id, r.args, await sync_to_async(requests.state_of)(r)) for r in asked]
        runs = [(e.request_id, e.finished_at, e.alive_at) async for e in RequestExecution.objects.all()]
        audit = [
            (e.run_id, e.tool_call_id, e.action, e.outcome, e.channel, e.username, e.created_at)
            async for e in AuditEntry.objects.order_by("id")
        ]
        raise AssertionError(
            f"no answer in {seconds} s: requests {rows}, executions {runs}, audit {audit}"
        ) from None


def meta(**keys: str) -> RequestParamsMeta:
    """A request's ``_meta`` with the gateway's keys (the SDK's type names only its own)."""
    return cast(RequestParamsMeta, keys)


def text(result: CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


async def test_tools_are_listed_under_the_prefix_hidden_ones_not_and_pass_through_calls_run(
    connect: Connect, upstream: Upstream
) -> None:
    async with connect() as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == {"files.echo", "files.delete_file", "files.write_file"}
        delete = listed["files.delete_file"]
        assert delete.description == "Delete a file (it only writes down that it would)."
        assert delete.input_schema["properties"]["path"]["type"] == "string"
        assert delete.input_schema["required"] == ["path"]

        echoed = await client.call_tool("files.echo", {"text": "hello"})
        assert (echoed.is_error, text(echoed)) == (False, "hello")
        # The condition does not hold: no approval asked.
        wrote = await client.call_tool("files.write_file", {"path": "/tmp/notes", "text": "hi"})
        assert (wrote.is_error, text(wrote)) == (False, "wrote 2 characters to /tmp/notes")
        hidden = await client.call_tool("files.shutdown", {})
        assert hidden.is_error and "Unknown tool" in text(hidden)
    assert upstream.calls("write_file") == [{"path": "/tmp/notes", "text": "hi"}]
    assert upstream.calls("shutdown") == []
    assert await ApprovalRequest.objects.acount() == 0


async def test_an_approved_call_runs_once_with_the_reviewers_edits(
    connect: Connect, upstream: Upstream, reviewer: User, reviewer_api: Api
) -> None:
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with connect() as client:
        call = asyncio.create_task(
            client.call_tool("files.delete_file", {"path": "/srv/a"}, progress_callback=on_progress)
        )
        row = await parked("files.delete_file")
        assert row.args == {"path": "/srv/a"}
        assert row.thread_id in ("s-stdio", None)  # stdio's --session; none over HTTP

        # The card shows the call's arguments from the upstream tool's schema.
        page = AsyncClient()
        await sync_to_async(page.force_login)(reviewer)
        card = (await page.get(f"/runs/{row.run_id}/")).content.decode()
        assert "files.delete_file" in card and "/srv/a" in card
        # An edit the tool's schema refuses changes nothing.
        refused = await decide(reviewer_api, row, "approve", {"editedArgs": {"path": 5}})
        assert refused.status_code == 400, refused.content
        # Progress notifications go on while it waits (every 0.3 s here; a loaded machine is slower).
        for _ in range(200):
            if len(seen) >= 2:
                break
            await asyncio.sleep(0.1)
        assert not call.done() and upstream.calls("delete_file") == []

        approved = await decide(reviewer_api, row, "approve", {"editedArgs": {"path": "/srv/b"}})
        assert approved.status_code == 200, approved.content
        result = await asyncio.wait_for(call, 30)
    assert (result.is_error, text(result)) == (False, "deleted /srv/b")
    assert upstream.calls("delete_file") == [{"path": "/srv/b", "force": False}]
    assert seen and seen[0][0] == 0 and f"/runs/{row.run_id}/" in (seen[0][1] or "")
    assert len(seen) >= 2 and [value for value, _ in seen] == sorted({value for value, _ in seen})

    # The run's record reads shown, decided, executed.
    actions = [
        (a, o)
        async for a, o in AuditEntry.objects.filter(run_id=row.run_id)
        .order_by("id")
        .values_list("action", "outcome")
    ]
    assert actions == [("approve", "completed"), ("execute", "recorded")]
    ended = await EndedRun.objects.aget(run_id=row.run_id)
    assert "Approved with edits" in ended.detail
    await row.arefresh_from_db()
    assert row.result_ok is True and row.result_output == "deleted /srv/b"


SEEN = re.compile(r'name="seen" value="([0-9a-f]+)"')


async def test_a_parked_call_shows_its_configured_preview_and_a_decision_is_bound_to_it(
    connect: Connect, upstream: Upstream, reviewer: User
) -> None:
    async with connect() as client:
        call = asyncio.create_task(client.call_tool("files.delete_file", {"path": "/srv/<b>p</b>"}))
        row = await parked("files.delete_file")
        # Filled in from the arguments: an argument the call lacks is marked, and str.format's
        # {0.__class__} is text as written, never evaluated.
        assert row.preview == {
            "sentence": "Deletes /srv/<b>p</b> {0.__class__}",
            "items": ["/srv/<b>p</b>", "⟨owner missing⟩"],
        }
        page = AsyncClient()
        await sync_to_async(page.force_login)(reviewer)
        card = (await page.get(f"/runs/{row.run_id}/")).content.decode()
        assert '<p class="preview-sentence">Deletes /srv/&lt;b&gt;p&lt;/b&gt; {0.__class__}</p>' in card
        assert "<li>/srv/&lt;b&gt;p&lt;/b&gt;</li><li>⟨owner missing⟩</li>" in card
        (seen,) = set(SEEN.findall(card))

        # A card shown without the preview (the arguments alone) is not what the reviewer decides on.
        url = f"/runs/{row.run_id}/calls/request/approve"
        stale = await page.post(
            url, {"agent": AGENT, "seen": fingerprint(row.args)}, headers={"HX-Request": "true"}
        )
        assert "The call changed since you saw it" in html.unescape(stale.content.decode())
        await asyncio.sleep(0.3)
        assert not call.done() and upstream.calls("delete_file") == []

        await page.post(url, {"agent": AGENT, "seen": seen}, headers={"HX-Request": "true"})
        result = await asyncio.wait_for(call, 30)
    assert (result.is_error, text(result)) == (False, "deleted /srv/<b>p</b>")
    # The audit row keeps the preview the card showed.
    entry = await AuditEntry.objects.aget(run_id=row.run_id, action="approve", outcome="completed")
    assert entry.preview is not None and entry.preview["sentence"] == "Deletes /srv/<b>p</b> {0.__class__}"
    assert entry.preview["items"] == ["/srv/<b>p</b>", "⟨owner missing⟩"]


async def test_declined_when_the_condition_holds_and_expired(
    connect: Connect, upstream: Upstream, reviewer_api: Api, agents: DashboardAgents
) -> None:
    async with connect() as client:
        call = asyncio.create_task(client.call_tool("files.write_file", {"path": "/etc/passwd", "text": "x"}))
        row = await parked("files.write_file")
        declined = await decide(reviewer_api, row, "decline", {"reason": "not the system files"})
        assert declined.status_code == 200, declined.content
        result = await asyncio.wait_for(call, 30)
        assert result.is_error
        assert text(result) == "files.write_file was declined by rita: not the system files"

        late = asyncio.create_task(client.call_tool("files.delete_file", {"path": "/srv/old"}))
        waiting = await parked("files.delete_file")
        assert waiting.deadline_at is not None
        assert await agents.runtime.expire_due(datetime.now(UTC) + timedelta(hours=2)) == 1
        expired = await asyncio.wait_for(late, 30)
        assert expired.is_error and "nobody decided before its deadline" in text(expired)
    assert upstream.calls("write_file") == [] and upstream.calls("delete_file") == []


async def test_a_client_that_disconnects_mid_wait_picks_the_decision_up_and_it_runs_once(
    connect: Connect, upstream: Upstream, reviewer_api: Api
) -> None:
    same_call = meta(**{"countersign/session": "conversation-7", "countersign/call": "delete-1"})
    async with connect() as client:
        call = asyncio.create_task(client.call_tool("files.delete_file", {"path": "/srv/x"}, meta=same_call))
        row = await parked("files.delete_file")
        await asyncio.sleep(0.3)
        # The client gives up on the call (its courtesy cancel goes out) before it disconnects.
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(call, 30)
    # Gone; a reviewer approves meanwhile; nothing runs until someone asks again.
    assert (await decide(reviewer_api, row, "approve")).status_code == 200
    await asyncio.sleep(0.5)
    assert upstream.calls("delete_file") == []

    async with connect() as client:
        again = await _within(60, client.call_tool("files.delete_file", {"path": "/srv/x"}, meta=same_call))
        assert (again.is_error, text(again)) == (False, "deleted /srv/x")
        # Asked once more (another retry): the kept answer, the upstream not called again.
        twice = await _within(60, client.call_tool("files.delete_file", {"path": "/srv/x"}, meta=same_call))
        assert text(twice) == "deleted /srv/x"
        # Under the same call id, other arguments are another request: refused, nothing runs.
        other = await _within(60, client.call_tool("files.delete_file", {"path": "/srv/y"}, meta=same_call))
        assert other.is_error and "Idempotency-Key" in text(other)
    assert upstream.calls("delete_file") == [{"path": "/srv/x", "force": False}]
    assert await ApprovalRequest.objects.acount() == 1
    assert row.thread_id == "conversation-7"
    execution = await RequestExecution.objects.aget(request=row)
    assert execution.finished_at is not None and execution.result is not None


async def test_a_standing_grant_lets_later_calls_through(
    connect: Connect, upstream: Upstream, reviewer: User
) -> None:
    thread = {"countersign/session": "conversation-g"}
    first_call, second_call = (
        meta(**thread, **{"countersign/call": "1"}),
        meta(**thread, **{"countersign/call": "2"}),
    )
    async with connect() as client:
        first = asyncio.create_task(
            client.call_tool("files.delete_file", {"path": "/tmp/a"}, meta=first_call)
        )
        row = await parked("files.delete_file")
        # Approve and allow, at the card: this thread, an hour, for paths under /tmp/.
        page = AsyncClient()
        await sync_to_async(page.force_login)(reviewer)
        terms = {
            "agent": AGENT,
            "grant-scope": "thread",
            "grant-lasts": "1h",
            "grant-uses": "",
            "grant-condition": 'path.startsWith("/tmp/")',
        }
        answer = await page.post(
            f"/runs/{row.run_id}/calls/request/approve", terms, headers={"HX-Request": "true"}
        )
        assert "Allowed from now on" in answer.content.decode()
        assert text(await asyncio.wait_for(first, 30)) == "deleted /tmp/a"
        # The grant approves the next one at once: no reviewer, and it runs.
        second = await asyncio.wait_for(
            client.call_tool("files.delete_file", {"path": "/tmp/b"}, meta=second_call),
            30,
        )
        assert (second.is_error, text(second)) == (False, "deleted /tmp/b")
    assert [c["path"] for c in upstream.calls("delete_file")] == ["/tmp/a", "/tmp/b"]
    later = await ApprovalRequest.objects.filter(args={"path": "/tmp/b"}).aget()
    entry = await AuditEntry.objects.filter(run_id=later.run_id, action="approve").aget()
    assert (entry.channel, entry.outcome) == ("grant", "completed")


@pytest.mark.parametrize("connect", ["http-tokens"], indirect=True)
async def test_over_http_a_persons_api_token_is_the_client_and_its_user_the_end_user(
    connect: Connect, upstream: Upstream, reviewer_api: Api
) -> None:
    url = connect.url  # type: ignore[attr-defined]

    def unauthenticated() -> int:
        ask = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(ask, timeout=10)
        except urllib.error.HTTPError as refused:
            return refused.code
        return 200

    assert await asyncio.to_thread(unauthenticated) == 401
    carl = await sync_to_async(make_user)("carl", "Reviewers")
    token = await sync_to_async(lambda: create_token(carl, name="mcp").plaintext)()
    async with connect(token) as client:
        assert text(await client.call_tool("files.echo", {"text": "hi"})) == "hi"
        call = asyncio.create_task(client.call_tool("files.delete_file", {"path": "/srv/c"}))
        row = await parked("files.delete_file")
        assert row.resource_id == "carl"
        assert (await decide(reviewer_api, row, "decline", {"reason": "no"})).status_code == 200
        assert (await asyncio.wait_for(call, 30)).is_error
    assert upstream.calls("delete_file") == []


@pytest.mark.parametrize("connect", ["http-tokens"], indirect=True)
async def test_over_http_only_a_person_who_may_ask_for_the_gateways_agent_may_call(
    connect: Connect, upstream: Upstream
) -> None:
    """As ``/api/v1/approval-requests`` asks: the token of someone who may not start the agent's
    runs is refused, and its calls reach no upstream, not even a pass-through tool's."""
    nora = await sync_to_async(make_user)("nora")  # signs in, in no group
    token = await sync_to_async(lambda: create_token(nora, name="mcp").plaintext)()
    url = connect.url  # type: ignore[attr-defined]

    def answer(bearer: str) -> int:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {bearer}"}
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=b"{}", headers=headers), timeout=10)
        except urllib.error.HTTPError as refused:
            return refused.code
        return 200

    assert await asyncio.to_thread(answer, token) == 401
    await sync_to_async(lambda: nora.groups.add(Group.objects.get(name="Reviewers")))()
    assert await asyncio.to_thread(answer, token) != 401  # (now let in: the request itself is bad)
    assert upstream.calls("echo") == []


@pytest.mark.parametrize("connect", ["http"], indirect=True)
async def test_an_upstream_that_fails_is_a_tool_error_and_an_approved_call_reports_it(
    connect: Connect, reviewer_api: Api
) -> None:
    async with connect() as client:
        assert text(await client.call_tool("files.echo", {"text": "up"})) == "up"
        upstream = connect.upstream  # type: ignore[attr-defined]
        upstream.terminate()
        await asyncio.to_thread(upstream.wait, 15)
        down = await client.call_tool("files.echo", {"text": "down?"})
        assert down.is_error and text(down).startswith("The upstream server failed")
        call = asyncio.create_task(client.call_tool("files.delete_file", {"path": "/srv/z"}))
        row = await parked("files.delete_file")
        assert (await decide(reviewer_api, row, "approve")).status_code == 200
        failed = await asyncio.wait_for(call, 60)
    assert failed.is_error and text(failed).startswith("The upstream server failed")
    await row.arefresh_from_db()
    assert row.result_ok is False and row.result_output.startswith("The upstream server failed")
    executed = await AuditEntry.objects.aget(run_id=row.run_id, action="execute")
    assert executed.outcome_detail.startswith("Ran with an error")


@pytest.mark.parametrize("connect", ["http-tokens"], indirect=True)
async def test_a_caller_keeps_at_most_its_open_waits_and_one_more_is_refused_unasked(
    connect: Connect, upstream: Upstream, reviewer_api: Api, settings: Any
) -> None:
    """``API_OPEN_WAITS_PER_CALLER``, as the HTTP API's long polls and AG-UI resumes count them:
    a call past it is a tool error and asks nothing; a call answered gives its place back."""
    settings.API_OPEN_WAITS_PER_CALLER = 1
    carl = await sync_to_async(make_user)("carl", "Reviewers")
    token = await sync_to_async(lambda: create_token(carl, name="mcp").plaintext)()
    async with connect(token) as client, connect(token) as other:
        waiting = asyncio.create_task(client.call_tool("files.delete_file", {"path": "/srv/a"}))
        row = await parked("files.delete_file")

        refused = await other.call_tool("files.delete_file", {"path": "/srv/b"})

        assert refused.is_error and "API_OPEN_WAITS_PER_CALLER" in text(refused)
        assert await ApprovalRequest.objects.acount() == 1
        assert (await decide(reviewer_api, row, "decline", {"reason": "no"})).status_code == 200
        assert (await _within(30, waiting)).is_error
        later = asyncio.create_task(other.call_tool("files.delete_file", {"path": "/srv/b"}))
        second = await parked("files.delete_file", 2)
        assert second.args == {"path": "/srv/b"}
        assert (await decide(reviewer_api, second, "decline", {"reason": "no"})).status_code == 200
        assert (await _within(30, later)).is_error
    assert upstream.calls("delete_file") == []
