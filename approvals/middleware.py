"""Middleware of the dashboard: htmx after a session ended, signed-in pages kept private, and times
shown in the viewer's time zone.

htmx requests of a session that has ended go to the login page, not into the page that sent them.

``login_required`` answers an anonymous request with a redirect to the login form. The browser follows
it inside htmx's request, and htmx would swap the whole login page into the card that was clicked
(and a reviewer could take it for an answer). For an htmx request that redirect becomes
``HX-Redirect``: htmx loads the login page as a page, with a message that nothing was decided, and
``next`` leads back to the page the reviewer was on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.shortcuts import resolve_url
from django.utils import timezone
from django.utils.cache import patch_cache_control
from django.utils.decorators import sync_and_async_middleware
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect

from approvals import times

SIGNED_OUT = "You were signed out. Nothing was decided."
SIGNED_OUT_READING = "You were signed out."

Handler = Callable[[HttpRequest], HttpResponseBase]
AsyncHandler = Callable[[HttpRequest], Awaitable[HttpResponseBase]]


@sync_and_async_middleware
def htmx_login_redirect(get_response: Handler | AsyncHandler) -> Handler | AsyncHandler:
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            return signed_out(request, await get_response(request))

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponseBase:
        return signed_out(request, get_response(request))  # type: ignore[arg-type]

    return middleware


def signed_out(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """``response``, unless it sends an htmx request to the login form (its session has ended)."""
    if request.headers.get("HX-Request") != "true" or response.status_code not in (301, 302, 303, 307, 308):
        return response
    login_path = urlsplit(resolve_url(settings.LOGIN_URL)).path
    if urlsplit(response.get("Location", "")).path != login_path:
        return response
    safe = request.method in ("GET", "HEAD", "OPTIONS")
    messages.warning(request, SIGNED_OUT_READING if safe else SIGNED_OUT)
    redirect = HttpResponseClientRedirect(redirect_to_login(_page(request))["Location"])
    redirect["Vary"] = "HX-Request"
    return redirect


def _page(request: HttpRequest) -> str:
    """The page the request came from (where to go after logging in), as a local path."""
    current = urlsplit(request.headers.get("HX-Current-URL", ""))
    if current.path and url_has_allowed_host_and_scheme(
        current.geturl(), allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return current.path + (f"?{current.query}" if current.query else "")
    return request.get_full_path() if request.method == "GET" else "/"


@sync_and_async_middleware
def private_pages(get_response: Handler | AsyncHandler) -> Handler | AsyncHandler:
    """A signed-in user's pages are never stored by the browser or a proxy (``private, no-store``).

    They show customers' data and pending calls; a shared machine's back button or a caching proxy
    must not bring them back after a logout.
    """
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            response = await get_response(request)
            # (request.user may not be loaded yet, and loading it reads the session: not on the loop.)
            auser = getattr(request, "auser", None)
            return _no_store(None if auser is None else await auser(), response)

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponseBase:
        return _no_store(getattr(request, "user", None), get_response(request))  # type: ignore[arg-type]

    return middleware


def _no_store(user: Any, response: HttpResponseBase) -> HttpResponseBase:
    if user is not None and user.is_authenticated:
        patch_cache_control(response, private=True, no_store=True)
    return response


@sync_and_async_middleware
def viewer_time_zone(get_response: Handler | AsyncHandler) -> Handler | AsyncHandler:
    """Activate the viewer's time zone for the request (``approvals.times``).

    The zone chosen in the profile menu comes first, then the one the browser reported (``time.js``
    writes it), each in a cookie, then the site's (UTC). Anything that is not a known zone name is
    ignored.
    """
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            _activate(request)
            try:
                response: HttpResponseBase = await get_response(request)
                return response
            finally:
                timezone.deactivate()

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponseBase:
        _activate(request)
        try:
            return get_response(request)  # type: ignore[return-value]
        finally:
            timezone.deactivate()

    return middleware


def _activate(request: HttpRequest) -> None:
    # Cookies only: read without the session's database query, so the async path never blocks.
    cookies = request.COOKIES
    zone = times.zone(cookies.get(times.CHOSEN_ZONE_COOKIE)) or times.zone(
        cookies.get(times.BROWSER_ZONE_COOKIE)
    )
    if zone is not None:
        timezone.activate(zone)
    else:
        timezone.deactivate()
