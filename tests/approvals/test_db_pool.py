"""The PostgreSQL pool's figures reach the log: now and then, and with the error when the pool ran dry."""

from __future__ import annotations

import logging

import pytest
from django.db import OperationalError, connections
from psycopg_pool import PoolTimeout

from approvals.server import pool as db_pool


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
    with caplog.at_level(logging.WARNING, logger="approvals.server.pool"):
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
    with caplog.at_level(logging.INFO, logger="approvals.server.pool"):
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
