"""The PostgreSQL pool's figures reach the log: now and then, and with the error when the pool ran dry."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import pytest
from django.db import OperationalError, connections
from psycopg_pool import PoolTimeout

from approvals.server import database as db_pool


def _postgres() -> bool:
    return connections["default"].vendor == "postgresql"


@pytest.mark.django_db
def test_pool_stats_are_the_pools_figures_on_postgresql_and_none_without_a_pool() -> None:
    connections["default"].ensure_connection()
    stats = db_pool.pool_stats()
    if not _postgres():
        assert stats is None
        return
    assert stats is not None
    assert stats["pool_max"] == connections["default"].settings_dict["OPTIONS"]["pool"]["max_size"]
    assert {"pool_size", "pool_available", "requests_waiting"} <= set(stats)
    assert "requests_waiting=" in db_pool.describe(stats)


def _raise_pool_timeout() -> None:
    try:
        raise PoolTimeout("couldn't get a connection after 10.00 sec")
    except PoolTimeout as error:
        raise OperationalError(str(error)) from error


def test_a_request_that_got_no_connection_logs_the_pools_figures(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="approvals.server.database"):
        try:
            _raise_pool_timeout()
        except OperationalError:
            db_pool.log_exhaustion(sender=None, request=None)
        try:
            raise OperationalError("server closed the connection unexpectedly")
        except OperationalError:
            db_pool.log_exhaustion(sender=None, request=None)

    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "Database pool exhausted" in record.getMessage()
    assert "couldn't get a connection after 10.00 sec" in record.getMessage()


def test_the_figures_are_logged_at_most_once_per_interval(
    caplog: pytest.LogCaptureFixture, settings: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_pool, "pool_stats", lambda using="default": {"pool_size": 3, "pool_max": 10})
    # Long ago, whatever the clock: time.monotonic() may be under an hour on a freshly booted machine.
    monkeypatch.setattr(db_pool, "_last_logged", float("-inf"))
    settings.DATABASE_POOL_STATS_SECONDS = 3600  # type: ignore[attr-defined]
    with caplog.at_level(logging.INFO, logger="approvals.server.database"):
        for _ in range(5):
            db_pool.log_now_and_then()
        settings.DATABASE_POOL_STATS_SECONDS = 0  # type: ignore[attr-defined]
        monkeypatch.setattr(db_pool, "_last_logged", 0.0)
        db_pool.log_now_and_then()

    assert [r.getMessage() for r in caplog.records] == [
        "Database pool: pool_size=3 pool_available=0 pool_max=10 requests_waiting=0 requests_num=0 "
        "requests_queued=0 requests_wait_ms=0 requests_errors=0 usage_ms=0 connections_num=0 "
        "connections_lost=0 returns_bad=0"
    ]


def _blackhole() -> socket.socket:
    """A port that accepts connections and never answers (a database host that went away)."""
    return socket.create_server(("127.0.0.1", 0))


def test_a_request_learns_at_once_that_the_server_cannot_be_reached() -> None:
    with _blackhole() as hole:
        pool = db_pool.ConnectionPool(
            kwargs={"host": "127.0.0.1", "port": hole.getsockname()[1], "dbname": "x", "connect_timeout": 30},
            min_size=1,
            max_size=2,
            timeout=60,
            unreachable_after=0.2,
            open=False,
        )
        pool.open()
        try:
            with pytest.raises(db_pool.DatabaseUnreachable) as refused:
                pool.getconn()  # (not after the pool's 60 s, which are for a busy pool)
            assert db_pool.outage(refused.value) == "unreachable"
        finally:
            pool.close(timeout=0)


@pytest.mark.postgres
def test_a_busy_pool_keeps_its_requests_waiting_for_a_connection_to_come_back() -> None:
    settings = connections["default"].settings_dict
    pool = db_pool.ConnectionPool(
        kwargs={
            "host": settings["HOST"] or None,
            "port": settings["PORT"] or None,
            "user": settings["USER"] or None,
            "password": settings["PASSWORD"] or None,
            "dbname": settings["NAME"],
        },
        min_size=1,
        max_size=1,
        timeout=60,
        unreachable_after=0.1,
        open=False,
    )
    pool.open(wait=True)
    try:
        lent = pool.getconn()
        got: list[Any] = []
        waiting = threading.Thread(target=lambda: got.append(pool.getconn()))
        waiting.start()
        time.sleep(0.5)  # well past unreachable_after: the other request still waits
        pool.putconn(lent)
        waiting.join(timeout=30)
        assert len(got) == 1 and got[0] is lent
        pool.putconn(got[0])
    finally:
        pool.close()
