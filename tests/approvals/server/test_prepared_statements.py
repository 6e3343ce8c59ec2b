"""The run store's fixed statements are prepared on PostgreSQL (approvals/server/database.py): the
server plans a listing or a decision's read once per connection, not on every call; the setting turns
it off for proxies that cannot keep prepared statements. Needs ``DATABASE_URL=postgres://...``."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
from django.db import connection, transaction
from django.test import override_settings

from agents_runtime.store import RunQuery
from approvals.models import RunRecord
from approvals.server import database
from approvals.store import DjangoRunStore
from tests.support.store_helpers import T0, Clock, approval, decision, suspension

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's"),
]


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE from_sql = false")
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture
def store() -> DjangoRunStore:
    store = DjangoRunStore(timedelta(seconds=30), clock=Clock())
    for i in range(3):
        store.insert_suspended(
            suspension(f"run-{i}", suspended_at=T0 + timedelta(seconds=i), calls=[approval(f"c{i}")])
        )
    return store


def test_a_listing_and_a_decision_are_prepared_once_per_connection(store: DjangoRunStore) -> None:
    # In a transaction: the store keeps the one connection (outside one it gives it back to the pool
    # after each call, and the next may be another, with prepared statements of its own).
    with transaction.atomic():
        _prepared_once_per_connection(store)


def _prepared_once_per_connection(store: DjangoRunStore) -> None:
    for _ in range(3):
        runs, total = store.list_suspended(RunQuery(agent_id="support", limit=2, offset=0))
        assert ([r.run_id for r in runs], total) == (["run-2", "run-1"], 3)
    listed = _prepared()
    assert [s for s in listed if "approvals_waiting_count" in s and "LIMIT 2" in s]

    store.decide(agent_id="support", run_id="run-0", rule=lambda run: ("c0", decision()))
    decided = _prepared()
    assert [s for s in decided if s.startswith("WITH") and "UPDATE" in s and "approvals_parked_call" in s]
    # The same statements again with other values: prepared already, nothing new.
    store.decide(agent_id="support", run_id="run-1", rule=lambda run: ("c1", decision()))
    store.list_suspended(RunQuery(agent_id="support", limit=2, offset=0))
    assert set(_prepared()) == set(decided)


@override_settings(DATABASE_PREPARED_STATEMENTS=False)
def test_turned_off_nothing_is_prepared(store: DjangoRunStore) -> None:
    with transaction.atomic():
        before = _prepared()
        runs, total = store.list_suspended(RunQuery(agent_id="support", limit=2, offset=0))
        store.decide(agent_id="support", run_id="run-0", rule=lambda run: ("c0", decision()))
        assert (len(runs), total) == (2, 3)
        assert _prepared() == before


def _timestamptz_loader() -> str:
    from psycopg.adapt import PyFormat
    from psycopg.postgres import types

    with database.cursor("default") as cursor:
        oid = types["timestamptz"].oid
        return cursor.cursor.adapters.get_loader(oid, PyFormat.as_pq(PyFormat.TEXT)).__name__


def test_in_a_utc_session_timestamps_are_read_by_psycopg_alone_and_are_the_orms(
    store: DjangoRunStore,
) -> None:
    with transaction.atomic():
        runs, _ = store.list_suspended(RunQuery(agent_id="support", limit=3, offset=0))
        assert {r.run_id: r.suspended_at for r in runs} == dict(
            RunRecord.objects.values_list("run_id", "suspended_at")
        )
        assert all(r.suspended_at.tzinfo is UTC for r in runs)
        assert _timestamptz_loader() == "TimestamptzLoader"
        # In a session of another zone psycopg's loader would give that zone: Django's is kept.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL TIME ZONE 'Asia/Kolkata'")
        assert _timestamptz_loader() == "SpecificTzLoader"
