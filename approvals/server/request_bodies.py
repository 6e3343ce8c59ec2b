"""Daphne's requests without Twisted's own parse of their bodies, which held the event loop.

Twisted's ``Request.requestReceived`` parses every url-encoded or multipart POST body into
``request.args`` before Daphne sees the request, on the event loop and whatever its size. Daphne
never reads ``args``: it hands the body on to the ASGI app, where Django parses it on a thread, within
``DATA_UPLOAD_MAX_MEMORY_SIZE`` and ``DATA_UPLOAD_MAX_NUMBER_FIELDS``. So one anonymous 15 MB form
(to the sign-in page, say) held every page, socket and decision of the process for seconds, and
each form's parse cost every decision a share of its CPU (docs/scaling.md). Twisted's ``Request``
takes ``parsePOSTFormSubmission=False`` for servers like this one; Daphne builds its requests without
it, so Daphne's request class is swapped, once at start-up, for a subclass that passes it. Delete this
module when Daphne passes it itself.
"""

from __future__ import annotations

from typing import Any


def leave_to_the_app() -> None:
    """Daphne's requests from now on skip Twisted's parse of their bodies (nothing without Daphne)."""
    try:
        from daphne import http_protocol  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - another server
        return
    if getattr(http_protocol.WebRequest, "leaves_bodies_unparsed", False):
        return

    class WebRequest(http_protocol.WebRequest):  # type: ignore[misc]
        leaves_bodies_unparsed = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs, parsePOSTFormSubmission=False)

    # ``HTTPFactory.buildProtocol`` reads the module's name for each connection it builds.
    http_protocol.WebRequest = WebRequest
