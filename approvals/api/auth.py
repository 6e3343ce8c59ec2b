"""Who an API request acts as: the user of its Bearer token, and nothing else.

Session cookies never authenticate the API: its POSTs are exempt from CSRF (a token is not sent by
a browser on its own), so a cookie that counted would let any site decide through a logged-in
reviewer's browser.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from approvals import agents
from approvals.access import Access, AgentAccess
from approvals.api.errors import ApiError
from approvals.services.tokens import InvalidToken, authenticate

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="countersign"'}


def _user(request: HttpRequest) -> Any:
    header = request.headers.get("Authorization", "")
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise ApiError(
            401,
            "Authentication required: send Authorization: Bearer <token>",
            "unauthenticated",
            headers=_CHALLENGE,
        )
    try:
        user = authenticate(raw.strip())
    except InvalidToken as exc:
        raise ApiError(401, f"Invalid API token ({exc})", "invalid_token", headers=_CHALLENGE) from None
    return user


def _access(request: HttpRequest, agent_id: str) -> AgentAccess:
    user = _user(request)
    try:
        return Access.of(user).for_agent(agent_id)
    except agents.UnknownAgent:
        # Mastra's words for an unknown agent.
        raise ApiError(404, f"Agent with id {agent_id} not found", "agent_not_found") from None
    except PermissionDenied as exc:
        raise ApiError(403, str(exc), "forbidden") from None


async def agent_access(request: HttpRequest, agent_id: str) -> AgentAccess:
    """The agent with the token's user's right to it: 401 without a valid token, 404 for an unknown
    agent, 403 for an agent the user may not see."""
    return await sync_to_async(_access)(request, agent_id)


def _user_access(request: HttpRequest) -> Access:
    return Access.of(_user(request))


async def user_access(request: HttpRequest) -> Access:
    """The token's user's rights (every agent they may see): 401 without a valid token."""
    return await sync_to_async(_user_access)(request)


def _require(access: AgentAccess, permission: str, to: str) -> None:
    try:
        access.access.require(permission, to=to)
    except PermissionDenied as exc:
        raise ApiError(403, str(exc), "permission_denied") from None


async def require(access: AgentAccess, permission: str, *, to: str) -> None:
    """403 unless the token's user holds ``permission`` (the refusal names the group to ask for)."""
    await sync_to_async(_require)(access, permission, to)
