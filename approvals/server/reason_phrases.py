"""Every status's reason phrase in Daphne's status lines (fills the gaps in Twisted's table).

ASGI hands the server a status code only; Daphne passes it to Twisted, whose table of phrases
(``twisted.web.http.RESPONSES``) stops at the codes of RFC 2616: a 429 went out as
``429 Unknown Status``, which some clients and proxies show as the error. Python's ``HTTPStatus``
knows every registered code; the ones Twisted lacks are copied into its table once, at start-up.
Delete this module when Twisted's table has 429 (and the other codes this app sends: 422).
"""

from __future__ import annotations

from http import HTTPStatus


def complete() -> None:
    """Add to Twisted's table the phrases it lacks (nothing without Twisted: another server)."""
    try:
        from twisted.web import http as twisted_http
    except ImportError:  # pragma: no cover - Daphne brings Twisted
        return
    for status in HTTPStatus:
        twisted_http.RESPONSES.setdefault(status.value, status.phrase.encode("ascii"))
