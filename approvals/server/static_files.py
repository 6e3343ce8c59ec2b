"""Static files: collected with hashed, compressed names, and served by the ASGI app itself.

One server process with ``DEBUG`` off serves a styled app, no proxy needed. WhiteNoise does the file
work: its storage writes ``collectstatic``'s output (hashed names, a manifest, ``.gz`` variants) and
its index finds a file and builds its headers (content type, ETag, ``Cache-Control: immutable`` for
hashed names, the compressed variant the client accepts, ranges, 304s).

WhiteNoise 6.12's Django middleware is sync-only. One sync middleware in the chain makes Django run
the whole chain adapted, each request's middleware hopping to a thread and back around the async
views. So ``StaticFiles`` answers ``/static/`` before Django, as ASGI middleware, on the event loop,
and every other request goes to Django untouched (and without a request thread of its own).

``DEBUG`` on (``make run``): files come from the finders (``static/``, the apps'), looked up at each
request, under plain names. ``DEBUG`` off: only what ``collectstatic`` wrote to ``STATIC_ROOT``,
indexed once at start-up; without its manifest every request is answered 503 with what to run
(``require_collected_static``) rather than serve pages whose styles and scripts all 404.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from whitenoise.middleware import WhiteNoiseMiddleware
from whitenoise.storage import CompressedManifestStaticFilesStorage

Scope = dict[str, Any]

CHUNK_SIZE = 64 * 1024
# Request headers WhiteNoise reads, by the WSGI names it reads them under.
_REQUEST_HEADERS = {
    b"accept-encoding": "HTTP_ACCEPT_ENCODING",
    b"if-none-match": "HTTP_IF_NONE_MATCH",
    b"if-modified-since": "HTTP_IF_MODIFIED_SINCE",
    b"range": "HTTP_RANGE",
}
# Django's SecurityMiddleware never sees these responses; the header that matters for a file is this.
logger = logging.getLogger(__name__)

_EXTRA_HEADERS = [(b"x-content-type-options", b"nosniff")]


class CollectedStaticStorage(CompressedManifestStaticFilesStorage):  # type: ignore[misc]  # untyped
    """WhiteNoise's storage, using plain names until ``collectstatic`` has written a manifest.

    With a manifest, ``{% static %}`` gives the hashed name and a file missing from it is an error.
    Without one (a fresh clone, the test suite), Django's storage would fail every page; plain names
    keep them working. A server with ``DEBUG`` off never gets that far without the manifest
    (``require_collected_static``), and in ``DEBUG`` Django uses plain names anyway.
    """

    def stored_name(self, name: str) -> str:
        if not self.hashed_files:
            return name
        return str(super().stored_name(name))


def manifest_path() -> Path:
    return Path(settings.STATIC_ROOT) / str(CollectedStaticStorage.manifest_name)


def require_collected_static() -> None:
    """Refuse to serve with ``DEBUG`` off before ``collectstatic`` has run (unstyled pages otherwise)."""
    if settings.DEBUG:
        return
    manifest = manifest_path()
    if not manifest.is_file():
        raise ImproperlyConfigured(
            f"DEBUG is off and there are no collected static files ({manifest} is missing). "
            "Run `python manage.py collectstatic --noinput` (STATIC_ROOT sets where they go) and restart, "
            "or set DEBUG=true for development."
        )


class StaticFiles:
    """ASGI middleware: answer ``GET``/``HEAD`` for static files; pass everything else to ``app``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        # Configured from settings exactly as the middleware would be (WHITENOISE_* settings apply).
        with warnings.catch_warnings():
            # STATIC_ROOT does not exist before the first collectstatic: fine with DEBUG on (files
            # come from the finders); with DEBUG off requests are answered 503 until collectstatic has run.
            warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
            self.whitenoise = WhiteNoiseMiddleware(get_response=None)
        self.prefix: str = self.whitenoise.static_prefix
        self.ready = False
        self.missing: str | None = None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self._collected():
            await _send_text(send, 503, f"Countersign cannot serve: {self.missing}")
            return
        if scope["type"] == "http" and scope["path"].startswith(self.prefix):
            static_file = self._find(scope["path"])
            if static_file is not None:
                await self._serve(static_file, scope, send)
                return
        await self.app(scope, receive, send)

    def _collected(self) -> bool:
        """With ``DEBUG`` off, whether ``collectstatic`` has run: every page would be unstyled (and
        name files that do not exist) otherwise, so the server answers what to run instead.
        Checked on requests, not at import: importing the app has no side effects."""
        if self.ready:
            return True
        try:
            require_collected_static()
        except ImproperlyConfigured as error:
            if self.missing is None:
                logger.error("Countersign cannot serve: %s", error)
            self.missing = str(error)
            return False
        self.ready = not settings.DEBUG  # in DEBUG, look again once it is turned off (tests)
        return True

    def _find(self, path: str) -> Any:
        if self.whitenoise.autorefresh:
            return self.whitenoise.find_file(path)
        return self.whitenoise.files.get(path)

    async def _serve(self, static_file: Any, scope: Scope, send: Any) -> None:
        request_headers = {
            _REQUEST_HEADERS[name.lower()]: value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name.lower() in _REQUEST_HEADERS
        }
        response = static_file.get_response(scope["method"], request_headers)
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
        await send(
            {
                "type": "http.response.start",
                "status": int(response.status),
                "headers": headers + _EXTRA_HEADERS,
            }
        )
        if response.file is None:
            await send({"type": "http.response.body", "body": b""})
            return
        with response.file as file:
            # Off the event loop: a read may wait on the disk.
            while chunk := await asyncio.to_thread(file.read, CHUNK_SIZE):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


async def _send_text(send: Any, status: int, text: str) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), *_EXTRA_HEADERS]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": text.encode()})
