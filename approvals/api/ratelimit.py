"""Decisions per API token (or signed-in user), in a fixed window: past the limit a 429 with ``Retry-After``.

``API_DECISION_RATE_LIMIT`` is ``"<count>/<seconds>"`` ("0" turns it off). The counter lives in
Django's cache, keyed by a digest of the token (never the token itself): per process with the
default local-memory cache, shared by every process when the cache is (Redis, database).
Only requests that would decide count, after authentication and body validation: a client
fixing a 400 is not slowed down.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from approvals.api.errors import ApiError


def _limit() -> tuple[int, int] | None:
    raw = str(getattr(settings, "API_DECISION_RATE_LIMIT", "") or "0").strip()
    count, _, window = raw.partition("/")
    if int(count or 0) <= 0:
        return None
    return int(count), max(1, int(window or 60))


async def limit_decisions(request: HttpRequest, user: Any) -> None:
    """Count this decision against its token (or, signed in, its user); ``ApiError(429)`` when the
    window is full."""
    limit = _limit()
    if limit is None:
        return
    count, window = limit
    token = request.headers.get("Authorization", "").partition(" ")[2].strip()
    caller = token or f"session-user:{user.pk}"
    digest = hashlib.sha256(caller.encode()).hexdigest()[:32]
    now = time.time()
    slot = int(now // window)
    key = f"countersign:api-rate:{digest}:{slot}"
    # ``add`` starts the window's counter (atomic in every cache backend), ``incr`` counts on.
    if await cache.aadd(key, 1, timeout=window + 1):
        used = 1
    else:
        try:
            used = await cache.aincr(key)
        except ValueError:  # expired between the two calls: a new window
            await cache.aset(key, 1, timeout=window + 1)
            used = 1
    if used > count:
        retry = max(1, math.ceil((slot + 1) * window - now))
        raise ApiError(
            429,
            f"Too many decisions with this token: at most {count} every {window} s",
            "rate_limited",
            headers={"Retry-After": str(retry)},
            retryAfter=retry,
        )
