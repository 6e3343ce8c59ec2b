"""Django's built-in middlewares, their hooks run on the event loop when they do no I/O.

Under ASGI Django runs every hook of a ``MiddlewareMixin`` middleware through ``sync_to_async``: a
hop to the request's thread and back for each ``process_request``, ``process_view`` and
``process_response``, a dozen per request in this stack, for hooks that mostly read and set headers:
a good part of an API request's and of a decision's CPU (``bench/api.py``,
``bench/decide_throughput.py``; docs/scaling.md). Django means to ship async versions some day
(django/new-features#102); until then these subclasses run a hook inline when it cannot touch the
database, and keep the thread for the cases that can (a session or messages to save, a CSRF refusal's
page). Under WSGI they are Django's own, unchanged. Delete each when Django's own runs on the loop.

``settings.MIDDLEWARE`` names these in place of Django's classes, in the same order. Django's deploy
checks (``manage.py check --deploy``) look for the security, CSRF and X-Frame-Options middlewares by
their dotted names; ``config.settings.Middleware`` has them find these subclasses too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import django.contrib.auth as contrib_auth
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.http import HttpRequest, HttpResponseForbidden
from django.http.response import HttpResponseBase
from django.middleware import clickjacking, common, csp, csrf, security
from django.utils.deprecation import MiddlewareMixin
from django.utils.functional import SimpleLazyObject


class OnTheLoop(MiddlewareMixin):
    """``MiddlewareMixin`` whose async path calls its hooks directly, unless the response's hook says
    it must write (``response_needs_thread``). (``process_view``: see ``CsrfViewMiddleware``.)"""

    def response_needs_thread(self, request: HttpRequest, response: HttpResponseBase) -> bool:
        return False

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase | None = None
        process_request = getattr(self, "process_request", None)
        if process_request is not None:
            response = process_request(request)
        if response is None:
            get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = self.get_response  # type: ignore[assignment]
            response = await get_response(request)
        process_response = getattr(self, "process_response", None)
        if process_response is None:
            return response
        if self.response_needs_thread(request, response):
            processed: HttpResponseBase = await sync_to_async(process_response, thread_sensitive=True)(
                request, response
            )
        else:
            processed = process_response(request, response)
        return processed


class CommonMiddleware(OnTheLoop, common.CommonMiddleware):
    pass


class ContentSecurityPolicyMiddleware(OnTheLoop, csp.ContentSecurityPolicyMiddleware):
    pass


class AuthenticationMiddleware(OnTheLoop, auth.AuthenticationMiddleware):
    """Sets ``request.user`` lazily: nothing is read until a view asks (``await request.auser()``).

    ``request.user`` and ``await request.auser()`` are one user, read once: Django caches each apart,
    so a synchronous view's user and an async middleware's after it (``private_pages``) were two reads
    of the session's user a request."""

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        super().__init__(get_response)
        if self.async_mode:  # (under WSGI nothing awaits ``auser``: Django's, untouched)
            self.process_request = self._process_request_on_the_loop  # type: ignore[method-assign]

    def _process_request_on_the_loop(self, request: HttpRequest) -> None:
        super().process_request(request)
        request.auser = partial(_the_request_user, request)


async def _the_request_user(request: HttpRequest) -> Any:
    user = request.user  # (the lazy object itself: reading the attribute loads nothing)
    if not isinstance(user, SimpleLazyObject):
        return user  # set by login() or logout() during the request
    if not hasattr(request, "_cached_user"):
        # The cache ``request.user`` fills (Django's ``get_user``), filled here off the loop.
        request._cached_user = await contrib_auth.aget_user(request)  # type: ignore[attr-defined]
    return request._cached_user  # type: ignore[attr-defined]


class SessionMiddleware(OnTheLoop, sessions.SessionMiddleware):
    """The session is loaded lazily; only saving a changed one writes."""

    def response_needs_thread(self, request: HttpRequest, response: HttpResponseBase) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class MessageMiddleware(OnTheLoop, messages.MessageMiddleware):
    """Messages are stored only if some were shown or added, and may load the session to be."""

    def response_needs_thread(self, request: HttpRequest, response: HttpResponseBase) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and bool(storage.used or storage.added_new)


class SecurityMiddleware(OnTheLoop, security.SecurityMiddleware):
    """The redirect to HTTPS and the security headers: the request read, headers set."""


class XFrameOptionsMiddleware(OnTheLoop, clickjacking.XFrameOptionsMiddleware):
    """The ``X-Frame-Options`` header."""


#: Django's refusal: the CSRF failure view's page (private in Django, absent from its type stubs).
_refusal_page: Callable[..., HttpResponseBase] = csrf.CsrfViewMiddleware._reject  # type: ignore[attr-defined]


class _Refusal(HttpResponseForbidden):
    """A refusal decided on the loop, whose page is yet to be made (on the request's thread)."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class CsrfViewMiddleware(OnTheLoop, csrf.CsrfViewMiddleware):
    """The token read from its cookie and checked on the loop (a url-encoded form of up to
    ``LOOP_FORM_BYTES`` is parsed there; a bigger one, or a multipart one, on the thread); a refusal's
    page is made on the request's thread, as the CSRF failure view may read the user. With
    ``CSRF_USE_SESSIONS`` the token lives in the session, which the loop may not load: every hook then
    goes to the thread, as in Django."""

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        super().__init__(get_response)
        self._on_the_loop = self.async_mode and not settings.CSRF_USE_SESSIONS
        if self._on_the_loop:
            # The handler takes each middleware's ``process_view`` as the instance has it, and awaits
            # a coroutine function as it is (Django's ``adapt_method_mode``).
            self.process_view = self._process_view_on_the_loop  # type: ignore[method-assign,assignment]

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        if not self._on_the_loop:
            return await MiddlewareMixin.__acall__(self, request)
        return await super().__acall__(request)

    async def _process_view_on_the_loop(
        self, request: HttpRequest, callback: Any, callback_args: Any, callback_kwargs: Any
    ) -> HttpResponseBase | None:
        check = partial(
            csrf.CsrfViewMiddleware.process_view, self, request, callback, callback_args, callback_kwargs
        )
        if _form_parsed_on_the_loop(request):
            verdict = check()
        else:
            verdict = await sync_to_async(check, thread_sensitive=True)()
        if isinstance(verdict, _Refusal):
            page: HttpResponseBase = await sync_to_async(_refusal_page, thread_sensitive=True)(
                self, request, verdict.reason
            )
            return page
        return verdict

    def _reject(self, request: HttpRequest, reason: str) -> HttpResponseBase:
        if self._on_the_loop:
            return _Refusal(reason)
        return _refusal_page(self, request, reason)


#: The largest url-encoded form whose CSRF token is read on the loop (bytes). Reading the token parses
#: the whole form, and a form of ``DATA_UPLOAD_MAX_MEMORY_SIZE`` made of percent-escapes held the
#: loop, every page, socket and decision of the process, for anyone with a CSRF cookie (the sign-in
#: page hands one out; figures in docs/scaling.md). The dashboard's forms are a few hundred bytes; a
#: bigger one is parsed on the request's thread, where its view would have parsed it.
LOOP_FORM_BYTES = 16 * 1024
#: The content types Django reads into ``request.POST``.
_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def _form_parsed_on_the_loop(request: HttpRequest) -> bool:
    """Whether reading the request's CSRF token (``request.POST``) costs the loop little: nothing to
    parse, or a small url-encoded form. Not a multipart form (its files go to temporary files: disk
    writes of any size), nor a url-encoded one over ``LOOP_FORM_BYTES`` or of no stated length."""
    if request.method != "POST" or request.content_type not in _FORMS:
        return True  # (Django reads the body of no other type into ``request.POST``)
    if request.content_type == "multipart/form-data":
        return False
    try:
        length = int(request.META.get("CONTENT_LENGTH") or -1)
    except ValueError:
        return False
    return 0 <= length <= LOOP_FORM_BYTES
