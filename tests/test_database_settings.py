"""The PostgreSQL pool's settings come from the environment, with health-checked connections."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import pytest

from tests.support import services, zygote

_READ = (
    "import json; from config import settings; db = settings.DATABASES['default']; "
    "pool = db['OPTIONS'].get('pool'); check = pool and pool.pop('check'); "
    "print(json.dumps({'pool': pool, 'check': check and f'{check.__module__}.{check.__name__}', "
    "'max_age': db.get('CONN_MAX_AGE'), 'stats_seconds': settings.DATABASE_POOL_STATS_SECONDS}))"
)


def _database_settings(**env: str) -> dict[str, Any]:
    names = ("DATABASE_URL", "DATABASE_POOL_MAX_SIZE", "DATABASE_POOL_TIMEOUT", "DATABASE_POOL_STATS_SECONDS")
    clean = {k: v for k, v in os.environ.items() if k not in names}
    done = zygote.zygote.run([sys.executable, "-c", _READ], env={**clean, **env})
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_postgresql_gets_a_bounded_health_checked_pool_by_default() -> None:
    found = _database_settings(DATABASE_URL="postgres://root@127.0.0.1:5432/countersign")
    assert found == {
        "pool": {"min_size": 2, "max_size": 10, "timeout": 10.0},
        "check": "config.database.check_connection",
        "max_age": 0,
        "stats_seconds": 60.0,
    }


def test_the_pool_is_sized_and_timed_from_the_environment() -> None:
    found = _database_settings(
        DATABASE_URL="postgres://root@127.0.0.1:5432/countersign",
        DATABASE_POOL_MAX_SIZE="25",
        DATABASE_POOL_TIMEOUT="2.5",
        DATABASE_POOL_STATS_SECONDS="0",
    )
    assert found["pool"] == {"min_size": 2, "max_size": 25, "timeout": 2.5}
    assert found["stats_seconds"] == 0
    assert _database_settings(
        DATABASE_URL="postgres://root@127.0.0.1:5432/countersign", DATABASE_POOL_MAX_SIZE="1"
    )["pool"] == {"min_size": 1, "max_size": 1, "timeout": 10.0}


def test_sqlite_has_no_pool() -> None:
    assert _database_settings(DATABASE_URL="sqlite:////tmp/countersign-settings-test.sqlite3")["pool"] is None


@pytest.mark.postgres
def test_a_pool_whose_connections_the_server_dropped_hands_out_a_live_one_at_once() -> None:
    import psycopg
    from psycopg_pool import ConnectionPool

    from config.database import check_connection

    url = services.require_postgres()
    with ConnectionPool(url, min_size=4, max_size=4, timeout=5, check=check_connection, open=True) as pool:
        pool.wait(timeout=10)
        held = [pool.getconn() for _ in range(4)]
        pids = [conn.info.backend_pid for conn in held]
        for conn in held:
            pool.putconn(conn)
        with psycopg.connect(url, autocommit=True) as admin:
            # (The timeout waits for each backend to end: before that its socket may not say so yet.)
            admin.execute("SELECT pg_terminate_backend(pid, 5000) FROM unnest(%s::int[]) AS pid", [pids])

        started = time.monotonic()
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        # psycopg's own check alone backs off 1 s, 2 s, 4 s... per dead connection: a timeout here.
        assert time.monotonic() - started < 3
        assert pool.get_stats()["connections_lost"] >= 3


@pytest.mark.postgres
def test_a_live_idle_connection_is_handed_out_without_a_round_trip() -> None:
    """The check costs a round trip only when the socket says the server spoke (or hung up)."""
    import psycopg
    from psycopg_pool import ConnectionPool

    from config.database import check_connection

    statements: list[str] = []

    class CountingCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            statements.append(str(query))
            return super().execute(query, *args, **kwargs)

    url = services.require_postgres()
    counting = {"cursor_factory": CountingCursor}
    with ConnectionPool(url, min_size=1, max_size=1, check=check_connection, kwargs=counting) as pool:
        pool.wait(timeout=10)
        for _ in range(5):
            with pool.connection() as conn:
                conn.execute("SELECT 1")
        assert statements == ["SELECT 1"] * 5

        # Dropped by the server: the socket is readable, so the check runs and the pool reconnects.
        with pool.connection() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        with pool.connection() as conn:
            assert conn.info.backend_pid != pid
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert "" in statements  # the slow check ran for the dropped connection
