"""The gateway's upstream MCP servers: one client each, held open while the gateway serves.

A stdio upstream is a child process of the gateway (its command from the configuration); an HTTP one
is reached at its URL with the configuration's headers. Each is a ``mcp.Client`` of the official SDK:
the gateway lists its tools once at start and calls them as its own clients' calls arrive (one
session carries many calls at once).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from contextlib import AsyncExitStack
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CallToolResult, Tool

from approvals.mcp.config import UpstreamConfig

logger = logging.getLogger(__name__)

#: Most pages of tools read from one upstream (a paginator that never ends cannot hang the start).
MAX_TOOL_PAGES = 100


class Upstream:
    """One upstream server, connected by ``connect`` (inside the gateway's exit stack)."""

    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self.name = config.name
        self._client: Client | None = None
        self._stop = asyncio.Event()
        self._held: asyncio.Task[None] | None = None

    def _target(self, stack: AsyncExitStack) -> Any:
        config = self.config
        if config.url is not None:
            http = create_mcp_http_client(headers=dict(config.headers))
            stack.push_async_callback(http.aclose)
            return streamable_http_client(config.url, http_client=http)
        env = None if config.env is None else {**os.environ, **config.env}
        # "python" is the gateway's own interpreter (a virtual environment's, with the SDK in it).
        program = sys.executable if config.command[0] == "python" else config.command[0]
        return StdioServerParameters(command=program, args=list(config.command[1:]), env=env, cwd=config.cwd)

    async def connect(self, stack: AsyncExitStack) -> None:
        """Connect, and stay connected until ``stack`` closes. The client lives in a task of its own:
        the SDK's client cancels the task it was entered in when its connection fails, and an
        upstream that goes away must not stop the gateway (its calls become tool errors)."""
        ready, self._stop = asyncio.Event(), asyncio.Event()
        self._held = asyncio.create_task(self._hold(ready), name=f"mcp-upstream-{self.name}")
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait([self._held, waiting], return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if not ready.is_set():
            self._held.result()  # (how it failed to connect)
        stack.push_async_callback(self._release)

    async def _hold(self, ready: asyncio.Event) -> None:
        try:
            async with AsyncExitStack() as own:
                self._client = await own.enter_async_context(Client(self._target(own), client_info=None))
                ready.set()
                await self._stop.wait()
        except Exception as exc:
            if not ready.is_set():
                raise
            logger.warning("Upstream %r: its connection ended with an error: %s", self.name, exc)
        except asyncio.CancelledError:
            if not ready.is_set() or self._stop.is_set():
                raise
            logger.warning("Upstream %r: its connection ended", self.name)

    async def _release(self) -> None:
        self._stop.set()
        if self._held is not None:
            await asyncio.gather(self._held, return_exceptions=True)

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError(f"upstream {self.name!r} is not connected")
        return self._client

    async def tools(self) -> list[Tool]:
        """Every tool the upstream lists, all pages."""
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await self.client.list_tools(cursor=cursor)
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """The upstream's answer to one call, as the gateway hands it on (without the upstream's own
        ``_meta``: the gateway's server stamps its own)."""
        result = await self.client.call_tool(tool, arguments)
        return CallToolResult(
            content=result.content, structured_content=result.structured_content, is_error=result.is_error
        )
