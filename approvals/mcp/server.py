"""The gateway's MCP server (the SDK's low-level ``Server``) and its two transports: stdio and
streamable HTTP.

What the transport and the request tell of a call becomes its ``Caller``: the session is the client's
own (``_meta["countersign/session"]``) when it names one, else the transport's (the HTTP
``Mcp-Session-Id`` of a handshake-era client; on stdio, the gateway process's ``--session``); the call's
id is ``_meta["countersign/call"]`` when given, else the JSON-RPC request's id; the identity is the
user of the API token an HTTP request brought (``http_auth = "tokens"``, the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

import uvicorn
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import PermissionDenied
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.stdio import stdio_server
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams
from pydantic import AnyHttpUrl

from approvals import agents
from approvals.mcp.gateway import Caller, Gateway
from approvals.policy import Access
from approvals.services import tokens

SESSION_META = "countersign/session"
CALL_META = "countersign/call"
#: How long a stopping HTTP gateway lets calls in flight finish.
STOP_SECONDS = 3
#: The longest session name or call id a client may give.
MAX_ID_LENGTH = 200


def build(gateway: Gateway, *, stdio_session: str | None = None) -> Server[Any]:
    """The MCP server in front of ``gateway``'s upstreams."""

    async def list_tools(
        _ctx: ServerRequestContext[Any], _params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=gateway.tools())

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        return await gateway.call(params.name, params.arguments or {}, caller_of(ctx, stdio_session))

    return Server(
        gateway.config.agent,
        title=gateway.config.name,
        description=gateway.config.description or None,
        version="1",
        get_tool_input_schema=gateway.input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def caller_of(ctx: ServerRequestContext[Any], stdio_session: str | None) -> Caller:
    meta: Mapping[str, Any] = ctx.meta or {}
    request = ctx.request
    headers = getattr(request, "headers", None)
    session = _given(meta.get(SESSION_META)) or (
        headers.get("mcp-session-id") if headers is not None else stdio_session
    )
    call_id = _given(meta.get(CALL_META)) or (None if ctx.request_id is None else str(ctx.request_id))

    async def progress(value: float, message: str) -> None:
        await ctx.session.report_progress(value, None, message)

    return Caller(session=session, call_id=call_id, identity=_identity(request), progress=progress)


def _given(value: Any) -> str | None:
    if isinstance(value, str | int) and not isinstance(value, bool) and 0 < len(str(value)) <= MAX_ID_LENGTH:
        return str(value)
    return None


def _identity(request: Any) -> str | None:
    """The principal an HTTP request authenticated as (the SDK's bearer auth), if any."""
    scope = getattr(request, "scope", None) or {}
    user = scope.get("user")
    token = getattr(user, "access_token", None)
    if token is None:
        return None
    return str(getattr(token, "subject", None) or token.client_id)


async def serve_stdio(gateway: Gateway, *, session: str) -> None:
    """Serve one client over this process's stdin and stdout until it goes."""
    async with AsyncExitStack() as stack:
        await gateway.start(stack)
        server = build(gateway, stdio_session=session)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


class DeskTokens:
    """The SDK's ``TokenVerifier`` on the desk's API tokens: a person's token (not an external
    agent's, which only reaches its own requests) is the client, its user the calls' end user. Only
    a person who may ask for the gateway's agent, as ``/api/v1/approval-requests`` asks (who may
    start its runs): any other token is refused (401), its calls never reaching an upstream."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            found = await sync_to_async(tokens.authenticated)(token)
        except tokens.InvalidToken:
            return None
        if found.external_agent_id is not None or not await sync_to_async(_may_ask)(
            found.user, self.agent_id
        ):
            return None
        return AccessToken(token=token, client_id=found.user.get_username(), scopes=[])


def _may_ask(user: Any, agent_id: str) -> bool:
    try:
        Access.of(user).for_agent(agent_id).require_start()
    except (agents.UnknownAgent, PermissionDenied):
        return False
    return True


def http_server(gateway: Gateway, *, host: str, port: int, path: str = "/mcp") -> uvicorn.Server:
    """The HTTP server of a started ``gateway`` (``serve()`` it): streamable HTTP at ``path``."""
    auth: dict[str, Any] = {}
    if gateway.config.http_auth == "tokens":
        # Bearer tokens checked here; no OAuth routes (the desk issues tokens: manage.py api_token).
        issuer = settings.COUNTERSIGN_BASE_URL or f"http://{host}:{port}"
        auth = {
            "token_verifier": DeskTokens(gateway.config.agent),
            "auth": AuthSettings(issuer_url=AnyHttpUrl(issuer), resource_server_url=None),
        }
    app = build(gateway).streamable_http_app(streamable_http_path=path, host=host, **auth)
    # Calls waiting for a decision do not hold a stop for long: they stay parked, and the same call
    # asked again (after a restart) finds its request.
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=STOP_SECONDS
    )
    return uvicorn.Server(config)


async def serve_http(gateway: Gateway, *, host: str, port: int) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until stopped."""
    async with AsyncExitStack() as stack:
        await gateway.start(stack)
        await http_server(gateway, host=host, port=port).serve()
