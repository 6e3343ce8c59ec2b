"""Decisions per API token (or signed-in user) in a sliding window; past the limit a 429 with ``Retry-After``.

``API_DECISION_RATE_LIMIT`` is ``"<count>/<seconds>"`` ("0" turns it off; ``config/settings.py``
refuses any other shape at start-up). The counters live in Django's cache, keyed by a digest of the
token (never the token itself): per process with the default local-memory cache, shared by every
process when the cache is (Redis, database). Only requests that would decide count, after
authentication and body validation: a client fixing a 400 is not slowed down, and a refused decision
is taken back.

The window slides: a decision goes through while the last ``seconds`` hold fewer than ``count``. They
are counted in ``SLICES`` slices a window, one cache counter each, the oldest slice in proportion to
the part of it still within the last ``seconds``; so the count is off by at most a slice's share, where
a fixed window let twice the limit through across its edge.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from approvals.api.errors import try_later

#: Counters a window is counted in (fewer for a window shorter than that many seconds).
SLICES = 6
#: The time the windows slide by (a test moves it).
clock: Callable[[], float] = time.time


def _limit() -> tuple[int, int] | None:
    raw = str(getattr(settings, "API_DECISION_RATE_LIMIT", "") or "0").strip()
    count, _, window = raw.partition("/")
    if int(count or 0) <= 0:
        return None
    return int(count), max(1, int(window or 60))


async def limit_decisions(request: HttpRequest, user: Any) -> None:
    """Count this decision against its token (or, signed in, its user); ``ApiError(429)`` when the
    last window already holds ``count`` of them."""
    limit = _limit()
    if limit is None:
        return
    count, window = limit
    token = request.headers.get("Authorization", "").partition(" ")[2].strip()
    caller = token or f"session-user:{user.pk}"
    key = f"countersign:api-rate:{hashlib.sha256(caller.encode()).hexdigest()[:32]}:"
    slices = min(SLICES, window)
    width = window / slices
    now = clock()
    slot = int(now // width)
    kept = math.ceil(window + width) + 1  # (a slice is read until it has slid out)
    used = await _count_one(f"{key}{slot}", kept)
    older = await cache.aget_many([f"{key}{s}" for s in range(slot - slices, slot)])
    # Oldest first: the slice ``window`` ago (partly within it), then the whole ones, then this one.
    counts = [int(older.get(f"{key}{s}", 0)) for s in range(slot - slices, slot)] + [used]
    within = 1 - (now - slot * width) / width
    if counts[0] * within + sum(counts[1:]) <= count:
        return
    with suppress(ValueError):  # (the counter expired meanwhile: nothing left to take back)
        await cache.adecr(f"{key}{slot}")
    counts[-1] -= 1
    retry = _retry_after(counts, count, width, now - window - (slot - slices) * width)
    message = f"Too many decisions with this token: at most {count} every {window} s"
    raise try_later(429, message, "rate_limited", retry)


async def _count_one(key: str, kept: int) -> int:
    """Add one to the slice's counter; its count now."""
    # ``add`` starts the counter (atomic in every cache backend), ``incr`` counts on.
    if await cache.aadd(key, 1, timeout=kept):
        return 1
    try:
        return int(await cache.aincr(key))
    except ValueError:  # expired between the two calls
        await cache.aset(key, 1, timeout=kept)
        return 1


def _retry_after(counts: list[int], count: int, width: float, into: float) -> int:
    """Whole seconds until one more decision fits, given the slices' ``counts`` (oldest first) and
    how far (``into``, seconds) the window's start is into the oldest of them.

    As the window slides, the slice its start is in counts in proportion to what is left of it, and
    the slices before it not at all: the first place where what is left plus one fits is the wait."""
    for i, partial in enumerate(counts):
        whole_after = sum(counts[i + 1 :])
        room = count - 1 - whole_after
        if room < 0:
            continue  # (not even with this slice gone)
        end = (i + 1) * width
        fits = end - width * room / partial if partial else i * width
        return max(1, math.ceil(max(fits, into) - into))
    raise AssertionError("the newest slice alone fits once it has slid out")  # (count >= 1)
