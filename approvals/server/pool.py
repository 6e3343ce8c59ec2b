"""The PostgreSQL connection pool: psycopg's, told when the server cannot be reached; its figures
in the log now and then, and when the pool ran dry; which errors mean the database is out of reach.

**Unreachable server.** psycopg's pool makes a request wait out its whole ``timeout`` for a
connection, whatever the reason none comes. That is right when the pool is busy (every connection is
lent to a request that will give it back) and wrong when the server does not answer: a request then
failed after 10 s, so a client retrying three times waited 40. ``ConnectionPool`` gives a request at
most ``unreachable_after`` seconds (``DATABASE_UNREACHABLE_SECONDS``) while the pool is *making* a
connection, or when its last attempt failed: past that it raises ``DatabaseUnreachable`` (a
``PoolTimeout``). A busy pool, with nothing to make, keeps the whole ``timeout``. Delete it when
psycopg's pool can fail its waiting clients on connection errors (not as of psycopg_pool 3.3).

**Figures.**

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
from psycopg import OperationalError as PsycopgOperationalError
from psycopg_pool import ConnectionPool as PsycopgPool
from psycopg_pool import PoolTimeout

logger = logging.getLogger(__name__)


class DatabaseUnreachable(PoolTimeout):
    """No connection: the pool could not make one (its attempt failed, or has not answered)."""


class ConnectionPool(PsycopgPool):
    """psycopg's pool, whose requests learn within ``unreachable_after`` seconds that the server
    cannot be reached (see the module's docstring)."""

    def __init__(self, *args: Any, unreachable_after: float = 1.0, **kwargs: Any) -> None:
        self.unreachable_after = unreachable_after
        self._attempts_lock = threading.Lock()
        self._connecting = 0
        self._last_attempt_failed = False
        super().__init__(*args, **kwargs)

    def _connect(self, timeout: float | None = None) -> Any:
        with self._attempts_lock:
            self._connecting += 1
        failed = True
        try:
            conn = super()._connect(timeout)
            failed = False
            return conn
        finally:
            with self._attempts_lock:
                self._connecting -= 1
                self._last_attempt_failed = failed

    def cannot_connect(self) -> bool:
        """Whether the pool is failing to make connections: its last attempt failed, or one is
        still going (asked when a request has waited ``unreachable_after``: far longer than a
        connection takes to make)."""
        return self._last_attempt_failed or self._connecting > 0

    def getconn(self, timeout: float | None = None) -> Any:
        whole = self.timeout if timeout is None else timeout
        first = min(whole, self.unreachable_after)
        started = time.monotonic()
        try:
            return super().getconn(first)
        except PoolTimeout:
            if self.cannot_connect():
                raise DatabaseUnreachable(
                    f"cannot reach the database server: no connection made within {first:g} s"
                ) from None
            if first >= whole:
                raise
        # Busy: every connection is lent to a request, which will give it back.
        return super().getconn(max(0.0, whole - (time.monotonic() - started)))


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
    unreachable = any(isinstance(e, DatabaseUnreachable) for e in _causes(error))
    logger.warning(
        "Database unreachable: %s. %s"
        if unreachable
        else "Database pool exhausted: no connection within the pool's timeout (%s). %s",
        error,
        describe(stats) if stats is not None else "",
    )


def _causes(error: BaseException | None) -> list[BaseException]:
    """``error`` and what caused it, nearest first (Django wraps psycopg's errors in its own)."""
    found: list[BaseException] = []
    while error is not None and len(found) < 10:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


def _timed_out(error: BaseException | None) -> bool:
    """Whether ``error`` is (or was caused by) psycopg's ``PoolTimeout``."""
    return any(isinstance(e, PoolTimeout) for e in _causes(error))


#: SQLSTATE classes of a lost or refused connection: 08 connection exception, 57P operator
#: intervention (admin shutdown: ``pg_terminate_backend``, crash shutdown, cannot connect now).
_CONNECTION_LOST = ("08", "57P")


def outage(error: BaseException) -> str | None:
    """How the database failed a request: ``"unreachable"`` (no connection could be had: nothing
    to retry at once), ``"dropped"`` (the connection was lost under it), or None (another error)."""
    for cause in _causes(error):
        if isinstance(cause, PoolTimeout):
            return "unreachable"
        if isinstance(cause, PsycopgOperationalError):
            state = cause.sqlstate
            # (No SQLSTATE: the client lost the server, "server closed the connection unexpectedly".)
            if state is None or state.startswith(_CONNECTION_LOST):
                return "dropped"
            return None
    return None


def log_outage(error: BaseException, *, retried: bool) -> None:
    """A request the database failed, answered 503 (or, ``retried``, read again)."""
    stats = pool_stats()
    figures = describe(stats) if stats is not None else ""
    if retried:
        logger.warning("Database connection lost under a read: reading again (%s). %s", error, figures)
    else:
        logger.warning("Database unavailable: answered 503 (%s). %s", error, figures)
