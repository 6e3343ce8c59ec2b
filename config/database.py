"""The PostgreSQL pool's health check, passed as ``OPTIONS["pool"]["check"]`` (see settings)."""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool


def check_connection(conn: Any) -> None:
    """psycopg's check of a connection about to be handed out; when it failed, check the idle ones too.

    A server that dropped one connection (restart, failover, ``pg_terminate_backend``) usually dropped
    them all. psycopg's pool tries the next idle connection after a back-off that doubles every time
    (1 s, 2 s, 4 s...), so a pool full of dead connections made the next request time out. Checking
    every idle connection at once (``ConnectionPool.check``) discards the dead ones and has the pool
    open new ones, which the request gets on its next try.
    """
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        pool = getattr(conn, "_pool", None)  # set by the pool while it hands the connection out
        if isinstance(pool, ConnectionPool):
            pool.check()
        raise
