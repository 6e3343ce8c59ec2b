"""Middleware of the dashboard: htmx after a session ended, signed-in pages kept private, times
shown in the viewer's time zone, the address the site is reached at (``approvals.site``), and
requests the database could not serve.

htmx requests of a session that has ended go to the login page, not into the page that sent them.

``login_required`` answers an anonymous request with a redirect to the login form. The browser follows
it inside htmx's request, and htmx would swap the whole login page into the card that was clicked
(and a reviewer could take it for an answer). For an htmx request that redirect becomes
``HX-Redirect``: htmx loads the login page as a page, with a message that nothing was decided, and
``next`` leads back to the page the reviewer was on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync, iscoroutinefunction
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.db import DatabaseError, connections
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import resolve_url
from django.utils import timezone
from django.utils.cache import patch_cache_control
from django.utils.decorators import sync_and_async_middleware
from django.utils.deprecation import MiddlewareMixin
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect

from approvals import site, times
from approvals.api import errors as api_errors
from approvals.server import database

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
    must not bring them back after a logout. Nor are server errors (a 503 while the database is out of
    reach must not outlive the outage), which are answered without looking the user up.
    """
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            response = await get_response(request)
            if response.status_code >= 500:
                return _never_stored(response)
            # (request.user may not be loaded yet, and loading it reads the session: not on the loop.)
            auser = getattr(request, "auser", None)
            try:
                signed_in = auser is not None and (await auser()).is_authenticated
            except DatabaseError as error:
                return _unknown_user(error, response)
            return _never_stored(response) if signed_in else response

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = get_response(request)  # type: ignore[assignment]
        if response.status_code >= 500:
            return _never_stored(response)
        user = getattr(request, "user", None)
        try:
            signed_in = user is not None and user.is_authenticated
        except DatabaseError as error:
            return _unknown_user(error, response)
        return _never_stored(response) if signed_in else response

    return middleware


def _never_stored(response: HttpResponseBase) -> HttpResponseBase:
    patch_cache_control(response, private=True, no_store=True)
    return response


def _unknown_user(error: DatabaseError, response: HttpResponseBase) -> HttpResponseBase:
    """The database failed as the user was looked up, after the view answered: the answer stands,
    kept private as a signed-in user's would be."""
    if database.outage(error) is None:
        raise error
    return _never_stored(response)


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


@sync_and_async_middleware
def served_address(get_response: Handler | AsyncHandler) -> Handler | AsyncHandler:
    """Tell ``approvals.site`` the address a page was served at to a signed-in user: where links in
    messages point when ``COUNTERSIGN_BASE_URL`` is not set. No I/O (the sweep writes it down); a
    page at the address seen already costs a comparison."""
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            response: HttpResponseBase = await get_response(request)
            origin = _page_origin(request, response)
            auser = getattr(request, "auser", None)
            if origin is not None and auser is not None and (await auser()).is_authenticated:
                site.seen(origin)
            return response

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = get_response(request)  # type: ignore[assignment]
        origin = _page_origin(request, response)
        user = getattr(request, "user", None)
        if origin is not None and user is not None and user.is_authenticated:
            site.seen(origin)
        return response

    return middleware


def _page_origin(request: HttpRequest, response: HttpResponseBase) -> str | None:
    """The origin of a dashboard page served whole, when it is not the one noted (None otherwise)."""
    if request.method != "GET" or response.status_code != 200 or request.path.startswith("/api/"):
        return None
    if not response.get("Content-Type", "").startswith("text/html"):
        return None
    origin = site.origin_of(request)
    return origin if origin != site.noted() else None


#: When a client should try again after the database failed its request.
RETRY_AFTER_SECONDS = 5
_READS = ("GET", "HEAD", "OPTIONS")
#: Needs nothing the database holds (no template: its context would read the session and the user).
_UNAVAILABLE_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Countersign: try again shortly</title></head>
<body><h1>The database is not answering</h1>
<p>Try again in a few seconds. If you had just decided a call, its card says whether the decision was
recorded once the page loads again.</p></body></html>
"""


class DatabaseOutageMiddleware(MiddlewareMixin):
    """A request the database could not serve: a read is run once more, anything else answered 503
    with ``Retry-After``.

    A connection dropped under a request (a restart, a failover, ``pg_terminate_backend``) fails it
    halfway. A read (GET, HEAD, OPTIONS) changes nothing, so its view runs once more, on a connection
    the pool checks first. Anything else may have been recorded before the connection went: it is
    answered 503 and the client decides (a decision sent twice is decided once; the second is told
    who decided). When no connection could be had at all (``approvals.server.database``: the server is out
    of reach, or the pool is exhausted) nothing is run again. The API answers JSON
    (``approvals.api.errors``), the pages a plain page.
    """

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponseBase | None:
        kind = database.outage(exception)
        if kind is None:
            return None
        if kind == "dropped" and request.method in _READS and not getattr(request, "_read_again", False):
            request._read_again = True  # type: ignore[attr-defined]
            database.log_outage(exception, retried=True)
            try:
                return _run_view_again(request)
            except Exception as again:
                if database.outage(again) is None:
                    raise
                exception = again
        database.log_outage(exception, retried=False)
        return _unavailable(request)


def _run_view_again(request: HttpRequest) -> HttpResponseBase:
    # The lost connection goes back to its pool, which drops it; the view takes a checked one.
    connections.close_all()
    match = request.resolver_match
    assert match is not None  # (an exception of a view: the request was resolved)
    view = match.func
    if iscoroutinefunction(view):
        # (On the request's thread, as process_exception runs: the view's loop is the server's.)
        response: HttpResponseBase = async_to_sync(view)(request, *match.args, **match.kwargs)
        return response
    return view(request, *match.args, **match.kwargs)  # type: ignore[no-any-return]


def _unavailable(request: HttpRequest) -> HttpResponseBase:
    match = request.resolver_match
    if match is not None and "api" in match.namespaces:
        return api_errors.unavailable(RETRY_AFTER_SECONDS).response()
    response = HttpResponse(_UNAVAILABLE_PAGE, status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
