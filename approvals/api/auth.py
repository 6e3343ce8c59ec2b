"""Who an API request acts as: the user of its Bearer token, or of its session with a CSRF token.

A Bearer token is what services and scripts send; a browser never sends one on its own, so requests
carrying one skip Django's CSRF check (the API's views are exempt from the middleware's). A
same-origin script in a reviewer's signed-in browser may instead use the session cookie, which a
browser does send on its own: such a request is checked for CSRF here as a dashboard form would be
(``X-CSRFToken`` header, and the Origin/Referer checks), or refused with 403. A request with an
``Authorization`` header is judged by that header alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware

from approvals import agents
from approvals.api.errors import ApiError
from approvals.policy import Access, AgentAccess
from approvals.services.tokens import InvalidToken, authenticated

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="countersign"'}


class _CsrfCheck(CsrfViewMiddleware):
    """Django's CSRF check of one request, answering the refusal's reason rather than a page."""

    def _reject(self, request: HttpRequest, reason: str) -> Any:
        return reason


def _not_exempt(request: HttpRequest) -> HttpResponse:  # (a view the check does not skip)
    return HttpResponse()


def _session_user(request: HttpRequest) -> Any:
    """The signed-in user of the request's session, its CSRF token checked; None without one."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    refusal = _CsrfCheck(lambda _: HttpResponse()).process_view(request, _not_exempt, (), {})
    if refusal is not None:
        raise ApiError(
            403,
            f"CSRF check failed ({refusal}): send the X-CSRFToken header, or a Bearer token",
            "csrf_failed",
        )
    return user


def _user(request: HttpRequest) -> Any:
    token = _token(request)
    if token is None:
        return request.user
    if token.external_agent is not None:
        raise ApiError(
            403,
            "This token is an external agent's: it may only create and read that agent's approval "
            "requests (/api/v1/approval-requests)",
            "external_agent_token",
        )
    return token.user


def _token(request: HttpRequest) -> Any:
    """The request's Bearer token (None: a signed-in session, its CSRF token checked); 401 without."""
    header = request.headers.get("Authorization", "")
    if not header:
        user = _session_user(request)
        if user is not None:
            return None
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise ApiError(
            401,
            "Authentication required: send Authorization: Bearer <token>",
            "unauthenticated",
            headers=_CHALLENGE,
        )
    try:
        return authenticated(raw.strip())
    except InvalidToken as exc:
        raise ApiError(401, f"Invalid API token ({exc})", "invalid_token", headers=_CHALLENGE) from None


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
    if access.access.holds(permission):
        return  # (resolved with the request's rights: no query, so no trip to the thread)
    await sync_to_async(_require)(access, permission, to)


@dataclass(frozen=True)
class Requester:
    """Who asks for approval requests: an external agent's token (it acts for that agent alone), or
    a person (token or session) with their rights."""

    username: str
    #: An external agent's token: its agent's id. None: a person's.
    agent_id: str | None
    access: Access | None

    def may_ask_for(self, agent_id: str) -> AgentAccess | None:
        """Whether this requester may create, read, cancel and report on ``agent_id``'s requests:
        its own agent's token, or a person who may start that agent's runs (403 otherwise; None
        for an agent's token, which has no desk rights)."""
        if self.access is None:
            if agent_id != self.agent_id:
                raise ApiError(403, "This token may only ask for its own agent's requests", "forbidden")
            return None
        try:
            agent = self.access.for_agent(agent_id)
            agent.require_start()
        except agents.UnknownAgent:
            raise ApiError(404, f"No agent {agent_id!r}", "agent_not_found") from None
        except PermissionDenied as exc:
            raise ApiError(403, str(exc), "forbidden") from None
        return agent


def _requester(request: HttpRequest) -> Requester:
    token = _token(request)
    if token is not None and token.external_agent is not None:
        return Requester(token.user.get_username(), token.external_agent.agent_id, None)
    user = request.user if token is None else token.user
    return Requester(user.get_username(), None, Access.of(user))


async def requester(request: HttpRequest) -> Requester:
    """Who asks (``Requester``): 401 without a valid token or signed-in session."""
    return await sync_to_async(_requester)(request)
