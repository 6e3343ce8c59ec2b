"""The PostgreSQL connection pool's figures: in the log now and then, and when the pool ran dry.

psycopg's pool keeps its own figures (``get_stats()``): its size and idle connections, requests
waiting for one now, how many waited and how long in all, how many timed out, connections lost. This
module logs them at INFO at most every ``DATABASE_POOL_STATS_SECONDS`` of traffic (from the end of a
request; 0 turns it off), and at WARNING with the error when a request failed because no connection
came within the pool's ``timeout`` (``DATABASE_POOL_TIMEOUT``). ``pool_stats()`` hands them to anyone
else who wants them. SQLite has no pool: nothing is logged.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connections

logger = logging.getLogger(__name__)

#: The figures worth a log line, in this order (``get_stats`` has a few more).
_SHOWN = (
    "pool_size",
    "pool_available",
    "pool_max",
    "requests_waiting",
    "requests_num",
    "requests_queued",
    "requests_wait_ms",
    "requests_errors",
    "usage_ms",
    "connections_num",
    "connections_lost",
    "returns_bad",
)

_lock = threading.Lock()
_last_logged = time.monotonic()


def pool_stats(using: str = "default") -> dict[str, int] | None:
    """The pool's figures (cumulative counters and current sizes), or None when there is no pool."""
    pool = getattr(connections[using], "pool", None)
    if pool is None:
        return None
    stats: dict[str, int] = pool.get_stats()
    return stats


def describe(stats: dict[str, int]) -> str:
    return " ".join(f"{name}={stats.get(name, 0)}" for name in _SHOWN)


def log_now_and_then(sender: Any = None, **kwargs: Any) -> None:
    """``request_finished``: the pool's figures at INFO, at most every ``DATABASE_POOL_STATS_SECONDS``."""
    global _last_logged
    interval = float(getattr(settings, "DATABASE_POOL_STATS_SECONDS", 60))
    if interval <= 0:
        return
    now = time.monotonic()
    with _lock:
        if now - _last_logged < interval:
            return
        _last_logged = now
    stats = pool_stats()
    if stats is not None:
        logger.info("Database pool: %s", describe(stats))


def log_exhaustion(sender: Any = None, **kwargs: Any) -> None:
    """``got_request_exception``: a request that got no connection in time logs the pool's figures."""
    error = sys.exc_info()[1]
    if not _timed_out(error):
        return
    stats = pool_stats()
    logger.warning(
        "Database pool exhausted: no connection within the pool's timeout (%s). %s",
        error,
        describe(stats) if stats is not None else "",
    )


def _timed_out(error: BaseException | None) -> bool:
    """Whether ``error`` is (or was caused by) psycopg's ``PoolTimeout``."""
    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # pragma: no cover - psycopg[pool] is a dependency
        return False
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, PoolTimeout):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False
