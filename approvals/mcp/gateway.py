"""The gateway's work, whatever the transport: list the upstreams' tools, and call them, asking first.

A call to a tool that needs approval becomes an approval request of the gateway's external agent
(``approvals.services.requests.create``: the same queue, policy, grants, deadlines and audit as any
request; its tool's configured preview, filled in from its arguments, goes with it), keyed by the
caller's session and the call's id so that asking again (a reconnect) finds it. The gateway waits
for the decision (``requests.wait``), telling the client it waits (``Caller.progress``), in one of
the caller's open waits (``waits``: past its limit, a tool error and nothing asked); approved, it
calls the upstream once with the approved arguments (``executions.claim``) and answers its result;
declined, expired or cancelled, it answers a tool error with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import anyio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone
from mcp_types import CallToolResult, TextContent, Tool

from agents_runtime.conditions import InvalidCondition, check_against_schema
from agents_runtime.schema_check import schema_problems
from agents_runtime.untrusted import describe, problems
from approvals.mcp.config import ConfigError, GatewayConfig, ToolPolicy
from approvals.mcp.upstream import Upstream
from approvals.models import ApprovalRequest, RequestExecution
from approvals.services import executions, requests, waits

logger = logging.getLogger(__name__)

#: The longest an upstream call may take (an approved one runs on if its client goes).
UPSTREAM_TIMEOUT = 300.0
#: How often a second asker of a call already running looks whether it has answered.
RECHECK_RUNNING = 0.2
#: How often the gateway running an approved call says it still runs it; a claim not renewed for
#: ``STALE_AFTER`` is a gateway that died during the call.
HEARTBEAT_SECONDS = 2.0
STALE_AFTER = timedelta(seconds=4 * HEARTBEAT_SECONDS)
_KEY_LIMIT = 255

Progress = Callable[[float, str], Awaitable[None]]


async def _no_progress(_progress: float, _message: str) -> None:
    return None


@dataclass(frozen=True)
class Caller:
    """Who calls and from where, as far as the transport and the request tell."""

    #: The MCP session (or the client's own session name): the run's thread.
    session: str | None = None
    #: The call's id within the session (the client's own, else the JSON-RPC request's).
    call_id: str | None = None
    #: The client's identity, when the transport authenticated one: the run's end user.
    identity: str | None = None
    progress: Progress = field(default=_no_progress)

    def idempotency_key(self) -> str | None:
        """What finds the request again when the same call is asked again in the same session."""
        if self.session is None or self.call_id is None:
            return None
        key = f"mcp:{self.session}:{self.call_id}"
        if len(key) > _KEY_LIMIT:
            key = "mcp:sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return key


@dataclass(frozen=True)
class Route:
    """One tool as the gateway lists it, and where it goes."""

    upstream: Upstream
    tool: Tool
    policy: ToolPolicy
    listed: Tool
    #: The schema a parked call carries (the upstream's inputSchema when the desk can use it).
    args_schema: dict[str, Any] | None


def tool_error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=message)], is_error=True)


class Gateway:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.upstreams = [Upstream(u) for u in config.upstreams]
        self.routes: dict[str, Route] = {}

    # -- start ------------------------------------------------------------------------------------

    async def start(self, stack: AsyncExitStack) -> None:
        """Connect the upstreams, list their tools, and serve the gateway's external agent."""
        for upstream in self.upstreams:
            await upstream.connect(stack)
            for tool in await upstream.tools():
                route = _route(upstream, tool)
                if route is not None:
                    self.routes[route.listed.name] = route
        rules = {
            name: r.policy.rules.to_json() for name, r in self.routes.items() if r.policy.mode == "approve"
        }
        await sync_to_async(requests.register)(
            self.config.agent, name=self.config.name, description=self.config.description, tools=rules
        )

    def tools(self) -> list[Tool]:
        return [route.listed for route in self.routes.values()]

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        route = self.routes.get(name)
        return None if route is None else route.listed.input_schema

    # -- a call -----------------------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any], caller: Caller) -> CallToolResult:
        route = self.routes.get(name)
        if route is None:
            return tool_error(f"Unknown tool: {name}")
        if not needs_approval(route.policy, arguments):
            return await _call_upstream(route, arguments)
        try:
            # One of the caller's open-wait slots, taken before asking: refused, nothing is asked.
            async with waits.held(caller.identity) as slot:
                row, refusal = await self._ask(route, name, arguments, caller)
                if row is None:
                    return tool_error(refusal)
                state = await self._wait(row, caller, slot)
        except waits.TooManyWaits as refused:
            return tool_error(str(refused))
        if state.status != "approved" or state.approved_args is None:
            return tool_error(_not_approved(name, state))
        return await self._execute(route, row, state.approved_args, caller)

    async def _ask(
        self, route: Route, name: str, arguments: dict[str, Any], caller: Caller
    ) -> tuple[ApprovalRequest | None, str]:
        config = self.config
        asked = requests.Asked(
            agent_id=config.agent,
            tool_name=name,
            args=arguments,
            args_schema=route.args_schema,
            preview=route.policy.preview.render(arguments) if route.policy.preview is not None else None,
            thread_id=caller.session,
            resource_id=caller.identity,
            deadline_in=config.deadline_seconds,
            deadline_default=config.deadline_default,
            deadline_given=config.deadline_seconds is not None,
        )
        started_by = caller.identity or f"external:{config.agent}"
        try:
            row, _made = await requests.create(
                asked, started_by=started_by, idempotency_key=caller.idempotency_key()
            )
        except requests.RequestRefused as exc:
            issues = "; ".join(f"{i['field']}: {i['message']}" for i in exc.issues or [])
            return None, f"{exc.message}{' (' + issues + ')' if issues else ''}"
        return row, ""

    async def _wait(self, row: ApprovalRequest, caller: Caller, slot: waits.Slot) -> requests.RequestState:
        """The request's state once decided, telling the client it waits every ``progress_seconds``
        (and keeping the caller's open-wait ``slot``, as long as it waits)."""
        state = await requests.wait(row, 0)
        if state.status != "pending":  # decided already: a grant, or asked again after the decision
            return state
        where = _desk_link(row)
        await caller.progress(0, f"Waiting for a reviewer's decision on {row.tool_name}: {where}")
        loop, started, beat = asyncio.get_running_loop(), asyncio.get_running_loop().time(), 0
        while state.status == "pending":
            state = await requests.wait(row, self.config.progress_seconds)
            if state.status == "pending":
                await slot.renew()
                beat += 1
                waited = round(loop.time() - started)
                await caller.progress(beat, f"Still waiting for a reviewer ({waited} s): {where}")
        return state

    async def _execute(
        self, route: Route, row: ApprovalRequest, args: dict[str, Any], caller: Caller
    ) -> CallToolResult:
        execution, mine = await sync_to_async(executions.claim)(row)
        if not mine:
            return await _answered(execution)
        # Claimed: the call runs and its answer is kept even if this client goes away meanwhile.
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as running:
                running.start_soon(_keep_alive, execution)
                result = await _call_upstream(route, args)
                running.cancel_scope.cancel()
            kept = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            await sync_to_async(executions.finish)(
                execution,
                result=kept,
                ok=not result.is_error,
                output=_text_of(result),
                actor=caller.identity or f"external:{self.config.agent}",
            )
        return result


async def _call_upstream(route: Route, args: dict[str, Any]) -> CallToolResult:
    """The upstream's answer; a failure to get one (the server gone, too slow) is a tool error."""
    try:
        with anyio.fail_after(UPSTREAM_TIMEOUT):
            return await route.upstream.call(route.tool.name, args)
    except Exception as exc:
        logger.warning("Upstream call %s failed: %s", route.listed.name, exc)
        return tool_error(f"The upstream server failed: {exc or type(exc).__name__}")


async def _keep_alive(execution: RequestExecution) -> None:
    while True:
        await anyio.sleep(HEARTBEAT_SECONDS)
        await sync_to_async(executions.alive)(execution)


def needs_approval(policy: ToolPolicy, arguments: Mapping[str, Any]) -> bool:
    """Whether a call waits for a human: its tool's mode, and its condition when it has one. A
    condition that cannot be evaluated (an error, a missing argument, over its budget) asks."""
    if policy.mode != "approve":
        return False
    if policy.when is None:
        return True
    verdict = policy.when.evaluate(arguments)
    return verdict.holds or verdict.error is not None


def _route(upstream: Upstream, tool: Tool) -> Route | None:
    policy = upstream.config.policy(tool.name)
    if policy.mode == "hide":
        return None
    name = f"{upstream.name}.{tool.name}"
    listed = tool.model_copy(update={"name": name})
    if policy.when is not None:
        try:
            check_against_schema(policy.when, tool.input_schema)
        except InvalidCondition as exc:
            raise ConfigError(f"[upstreams.{upstream.name}] tools.{tool.name} when: {exc}") from None
    return Route(upstream, tool, policy, listed, _usable_schema(name, tool.input_schema))


def _usable_schema(name: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The upstream's inputSchema, if the desk can check edits with it; else None (with a warning:
    the card then shows the arguments as they are)."""
    found = problems(schema) or [{"loc": (), "msg": p} for p in schema_problems(schema)]
    if found:
        logger.warning("Tool %s: its inputSchema is not used at the desk: %s", name, describe(found))
        return None
    return schema


async def _answered(execution: RequestExecution) -> CallToolResult:
    """The answer of a call someone else claimed: kept, or awaited while its claimer still runs it
    (it renews ``alive_at`` every ``HEARTBEAT_SECONDS`` until the call ends)."""
    while execution.finished_at is None and timezone.now() - execution.alive_at < STALE_AFTER:
        await asyncio.sleep(RECHECK_RUNNING)
        execution = await sync_to_async(executions.kept)(execution)
    if execution.finished_at is None or execution.result is None:
        return tool_error(
            "This call was approved and started by an earlier connection, which did not finish it: "
            "whether the upstream ran it is not known, so it is not run again."
        )
    return CallToolResult.model_validate(execution.result)


def _not_approved(name: str, state: requests.RequestState) -> str:
    by = f" by {state.decided_by}" if state.decided_by else ""
    reason = f": {state.reason}" if state.reason else ""
    if state.status == "expired":
        return f"{name} was not approved: nobody decided before its deadline{reason}"
    return f"{name} was {state.status}{by}{reason}"


def _desk_link(row: ApprovalRequest) -> str:
    return f"{settings.COUNTERSIGN_BASE_URL.rstrip('/')}/runs/{row.run_id}/"


def _text_of(result: CallToolResult) -> str:
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    return "\n".join(texts) or f"({len(result.content)} content blocks)"
