"""The PostgreSQL pool's health check, passed as ``OPTIONS["pool"]["check"]`` (see settings)."""

from __future__ import annotations

import select
from typing import Any

from psycopg_pool import ConnectionPool


def check_connection(conn: Any) -> None:
    """psycopg's check of a connection about to be handed out; when it failed, check the idle ones too.

    A round trip to the server on every hand-out costs more than some requests' own queries, so it
    is made only when the connection's socket has something to read. An idle connection receives
    nothing (we do not LISTEN), and a server that drops it (restart, failover,
    ``pg_terminate_backend``) sends its farewell and closes the socket: either makes it readable.

    A server that dropped one connection usually dropped them all. psycopg's pool tries the next idle
    connection after a back-off that doubles every time (1 s, 2 s, 4 s...), so a pool full of dead
    connections made the next request time out. Checking every idle connection at once
    (``ConnectionPool.check``) discards the dead ones and has the pool open new ones, which the
    request gets on its next try.
    """
    if _quiet(conn):
        return
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        pool = getattr(conn, "_pool", None)  # set by the pool while it hands the connection out
        if isinstance(pool, ConnectionPool):
            pool.check()
        raise


def _quiet(conn: Any) -> bool:
    """Whether an idle connection is open with nothing waiting on its socket (a zero-wait poll)."""
    if conn.closed or conn.broken:
        return False
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except Exception:  # no socket (closed meanwhile) or a bad descriptor: check the slow way
        return False
    return not readable
