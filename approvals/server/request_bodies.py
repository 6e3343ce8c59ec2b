"""Daphne's requests without Twisted's own parse of their bodies, which held the event loop, and with
their bodies bounded, which nothing in Daphne or Twisted bounds.

Twisted's ``Request.requestReceived`` parses every url-encoded or multipart POST body into
``request.args`` before Daphne sees the request, on the event loop and whatever its size. Daphne
never reads ``args``: it hands the body on to the ASGI app, where Django parses it on a thread, within
``DATA_UPLOAD_MAX_MEMORY_SIZE`` and ``DATA_UPLOAD_MAX_NUMBER_FIELDS``. So one anonymous 15 MB form
(to the sign-in page, say) held every page, socket and decision of the process for seconds, and
each form's parse cost every decision a share of its CPU (docs/scaling.md). Twisted's ``Request``
takes ``parsePOSTFormSubmission=False`` for servers like this one; Daphne builds its requests without
it, so Daphne's request class is swapped, once at start-up, for a subclass that passes it. Delete that
part when Daphne passes it itself.

The same subclass bounds the body. Twisted takes a body of any length (with ``Content-Length`` or
chunked) into a temporary file; Daphne then reads all of it into memory, on the event loop, queued
for the app; Django copies it to a temporary file of its own before any view or limit of Django's
sees it. One anonymous 1.5 GB POST (chunked, to the sign-in page) cost the process 56 s of CPU, kept
1.7 GB of memory after it was answered, and held every page for seconds at a time; a larger one
exhausts memory. Nothing here takes a body longer than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (the app takes
no file uploads, so Django would refuse it anyway), nor a chunked body cut into pieces smaller than
``MIN_PIECE_BYTES`` on average: one 2.5 MB body sent one byte a chunk cost 8 s of CPU to decode.
Such a request is answered ``413`` as soon as it is over and its connection closed, before Daphne or
Django hear of it (nginx answers the same in production, ``deploy/nginx.conf``; ``make run`` has no
nginx). Delete that part when Daphne bounds request bodies itself (daphne has no such option in 4.2).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

#: A body may be cut into pieces (chunks, or the network's reads) of this many bytes on average, and
#: into ``MIN_PIECES`` pieces whatever their size.
MIN_PIECE_BYTES = 256
MIN_PIECES = 1024


def max_body_bytes() -> int | None:
    """The longest request body taken: Django's own limit on what it reads (None: no limit)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return None if limit is None else int(limit)


def over_the_limit(body_bytes: int, pieces: int) -> str | None:
    """Why a body of ``body_bytes`` so far, in ``pieces``, is refused (None: not refused yet)."""
    limit = max_body_bytes()
    if limit is None:
        return None
    if body_bytes > limit:
        return f"The request body is over {limit} bytes."
    if pieces > max(MIN_PIECES, limit // MIN_PIECE_BYTES):
        return f"The request body comes in pieces of under {MIN_PIECE_BYTES} bytes."
    return None


def _refusal(reason: str) -> bytes:
    body = f"{reason}\n".encode()
    head = (
        "HTTP/1.1 413 Content Too Large\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def leave_to_the_app() -> None:
    """Daphne's requests from now on skip Twisted's parse of their bodies and refuse bodies over the
    limit (nothing without Daphne)."""
    try:
        from daphne import http_protocol  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - another server
        return
    if getattr(http_protocol.WebRequest, "leaves_bodies_unparsed", False):
        return

    class WebRequest(http_protocol.WebRequest):  # type: ignore[misc]
        leaves_bodies_unparsed = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.body_bytes = 0
            self.body_pieces = 0
            self.refused = False
            super().__init__(*args, **kwargs, parsePOSTFormSubmission=False)

        def gotLength(self, length: int | None) -> None:
            """Headers read: a body announced over the limit is refused before any of it is read."""
            super().gotLength(length)
            reason = None if length is None else over_the_limit(length, 1)
            if reason is not None:
                # (No "100 Continue" after the refusal: Twisted sends it just after this call.)
                self.requestHeaders.removeHeader(b"Expect")
                self._refuse(reason)

        def handleContentChunk(self, data: bytes) -> None:
            if self.refused:
                return  # what the connection had read already before it closed
            self.body_bytes += len(data)
            self.body_pieces += 1
            reason = over_the_limit(self.body_bytes, self.body_pieces)
            if reason is not None:
                self._refuse(reason)
                return
            super().handleContentChunk(data)

        def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
            if self.refused:
                return  # answered already: nothing reaches Daphne or the app
            super().requestReceived(command, path, version)

        def _refuse(self, reason: str) -> None:
            self.refused = True
            self.channel.transport.write(_refusal(reason))
            self.channel.loseConnection()

    # ``HTTPFactory.buildProtocol`` reads the module's name for each connection it builds.
    http_protocol.WebRequest = WebRequest
