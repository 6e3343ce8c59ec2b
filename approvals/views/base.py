"""What every dashboard view shares: the htmx request type, permission guards, partial rendering and
agent lookup.

Views are plain functions with a method guard each and thin bodies: reads come from
``approvals.queries``, changes go through ``approvals.services``. An htmx request gets the named
partial it swaps in; the same URL without htmx gets the whole page (decisions: a redirect back with a
message), so everything works without JavaScript. htmx 2 does not swap 4xx responses, so errors
meant to be shown in place are answered with 200 to htmx and with 400 otherwise. What the user may
see and do is resolved once per request (``access_of``) and handed to the services and templates.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.middleware import HtmxDetails

from approvals import agents
from approvals.access import Access, AgentAccess


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def permission_required(permission: str, *, to: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Like Django's, but the 403 page says which permission is missing (and never redirects)."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            access_of(request).require(permission, to=to)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def is_partial(request: HtmxHttpRequest) -> bool:
    """An htmx request that swaps a fragment (a history restore needs the whole page)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def render_page(
    request: HtmxHttpRequest,
    page: str,
    partial: str,
    context: dict[str, Any],
    *,
    status: int = 200,
) -> HttpResponse:
    template = f"{page}#{partial}" if is_partial(request) else page
    response = render(request, template, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


_ACCESS_ATTRIBUTE = "countersign_access"


def access_of(request: HttpRequest) -> Access:
    """The user's rights, resolved on first use and kept for the rest of the request."""
    access: Access | None = getattr(request, _ACCESS_ATTRIBUTE, None)
    if access is None or access.user is not request.user:
        access = Access.of(request.user)
        setattr(request, _ACCESS_ATTRIBUTE, access)
    return access


def visible_agent(request: HttpRequest, agent_id: str) -> AgentAccess:
    """The agent ``agent_id`` with the user's right to it: 404 when unknown, 403 when not theirs."""
    try:
        return access_of(request).for_agent(agent_id)
    except agents.UnknownAgent:
        raise Http404(f"No agent “{agent_id}” is registered.") from None


def next_url(request: HttpRequest, target: str, run_id: str) -> str:
    """Where a card's forms return without JavaScript: ``target`` if it is this site's, else the run."""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("approvals:run", args=[run_id])
