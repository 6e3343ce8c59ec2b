"""The address the site is reached at, which links leaving it start with (notification messages,
webhook bodies).

``COUNTERSIGN_BASE_URL`` when it is set (production: the public address). Otherwise the address a
signed-in person's browser last loaded a page from (``note``, called by the middleware
``served_address``), so that ``make run PORT=9000`` links to port 9000; it is kept in the database
(``ServedAddress``), where a message sent by another process, or after a restart, reads it. Before
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
from django.db import DatabaseError
from django.http import HttpRequest
from django.utils import timezone

from approvals.models import ServedAddress

logger = logging.getLogger(__name__)

#: Before anyone signed in, and with nothing set: ``make run``'s address.
DEFAULT = "http://localhost:8000"

#: What this process last wrote (a page's address changes rarely: one write per change, not per page).
_noted: str | None = None
_lock = threading.Lock()


def base_url() -> str:
    """Where links to the site start, without a trailing slash."""
    configured = str(getattr(settings, "COUNTERSIGN_BASE_URL", "") or "").rstrip("/")
    if configured:
        return configured
    served = ServedAddress.objects.order_by("-seen_at").values_list("url", flat=True).first()
    return served or DEFAULT


def origin_of(request: HttpRequest) -> str | None:
    """``scheme://host[:port]`` the request was made to (None: a host Django refuses)."""
    try:
        return f"{request.scheme}://{request.get_host()}"
    except DisallowedHost:
        return None


def note(origin: str) -> None:
    """Remember ``origin`` as the site's address, unless this process wrote it last already."""
    global _noted
    with _lock:
        if origin == _noted:
            return
        try:
            ServedAddress.objects.update_or_create(pk=1, defaults={"url": origin, "seen_at": timezone.now()})
        except DatabaseError:
            logger.warning("Could not record the address %s the site is reached at", origin, exc_info=True)
            return
        _noted = origin


def noted() -> str | None:
    """What this process last wrote (the middleware skips the user check when a page says the same)."""
    return _noted


def forget() -> None:
    """This process writes again on the next page (tests: their database starts empty)."""
    global _noted
    with _lock:
        _noted = None
