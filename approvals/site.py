"""The address the site is reached at, which links leaving it start with (notification messages,
webhook bodies).

``COUNTERSIGN_BASE_URL`` when it is set (production: the public address). Otherwise the address a
signed-in person's browser last loaded a page from: the middleware ``served_address`` tells ``seen``
(no I/O on the request), and the server's background sweep (``approvals.tasks``) keeps it in the
database (``save``: a write only when it changed), where a message built by another process (a
``db_worker``), or after a restart, reads it. So ``make run PORT=9000`` links to port 9000. Before
anyone has signed in: ``http://localhost:8000``, ``make run``'s default.

Only what cannot be forged from outside counts: the Host of a page served to a signed-in user,
which Django has checked against ``ALLOWED_HOSTS`` (``request.get_host``). Not the API's requests
(an agent may reach the server by an address of its network no person can open).
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest
from django.utils import timezone

from approvals.models import ServedAddress

logger = logging.getLogger(__name__)

#: Before anyone signed in, and with nothing set: ``make run``'s address.
DEFAULT = "http://localhost:8000"

_lock = threading.Lock()
#: The address this process last served a signed-in page at, and the one it last wrote.
_seen: str | None = None
_saved: str | None = None


def base_url() -> str:
    """Where links to the site start, without a trailing slash."""
    configured = str(getattr(settings, "COUNTERSIGN_BASE_URL", "") or "").rstrip("/")
    if configured:
        return configured
    if _seen is not None:
        return _seen
    served = ServedAddress.objects.order_by("-seen_at").values_list("url", flat=True).first()
    return served or DEFAULT


def origin_of(request: HttpRequest) -> str | None:
    """``scheme://host[:port]`` the request was made to (None: a host Django refuses)."""
    try:
        return f"{request.scheme}://{request.get_host()}"
    except DisallowedHost:
        return None


def seen(origin: str) -> None:
    """A signed-in page was served at ``origin`` (the middleware: no I/O)."""
    global _seen
    _seen = origin


def noted() -> str | None:
    """The address this process last served a signed-in page at (None: none yet)."""
    return _seen


def save() -> bool:
    """Keep the address seen in the database if it changed since this process last wrote it (the
    sweep, each round); whether it wrote."""
    global _saved
    with _lock:
        origin = _seen
        if origin is None or origin == _saved:
            return False
        ServedAddress.objects.update_or_create(pk=1, defaults={"url": origin, "seen_at": timezone.now()})
        _saved = origin
        return True


def forget() -> None:
    """As a process that has served nothing yet (tests: their database starts empty)."""
    global _seen, _saved
    with _lock:
        _seen = _saved = None
