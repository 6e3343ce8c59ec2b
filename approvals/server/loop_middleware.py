"""Django's built-in middlewares, their hooks run on the event loop when they do no I/O.

Under ASGI Django runs every hook of a ``MiddlewareMixin`` middleware through ``sync_to_async``: a
hop to the request's thread and back for each ``process_request``, ``process_view`` and
``process_response``, a dozen per request in this stack, for hooks that mostly read and set headers.
That was about a quarter of an API request's time (``bench/api.py``). Django means to ship async
versions some day (django/new-features#102); until then these subclasses run a hook inline when it
cannot touch the database, and keep the thread for the cases that can (a session or messages to
save). Under WSGI they are Django's own, unchanged.

``settings.MIDDLEWARE`` names these in place of Django's classes, in the same order. Not here:
``SecurityMiddleware``, ``CsrfViewMiddleware`` and ``XFrameOptionsMiddleware``, whose deploy checks
(``manage.py check --deploy``) find them by their dotted names only and would go quiet.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.middleware import common, csp
from django.utils.deprecation import MiddlewareMixin


class OnTheLoop(MiddlewareMixin):
    """``MiddlewareMixin`` whose async path calls its hooks directly, unless the response's hook says
    it must write (``response_needs_thread``). (None of these has a ``process_view``.)"""

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
    """Sets ``request.user`` lazily: nothing is read until a view asks (``await request.auser()``)."""


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
