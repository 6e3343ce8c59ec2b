"""Deep pages start at their day (approvals/store.py, migration 0026): on PostgreSQL a deep page of an
agent's listing is found from per-day waiting counters instead of skipping every run before it. Every
page must still be exactly the slice of the whole listing, and the counters must stay exact through
every way a run changes. Here every page counts as deep (``DEEP_OFFSET`` 0, and none is near the start:
``NEAR_THE_START`` 0); on SQLite the same checks run through OFFSET.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection

from agents_runtime.store import RunQuery
from approvals.models import RunRecord
from approvals.store import DjangoRunStore
from tests.support.store_helpers import T0, Clock, approval, decision, suspension

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def store(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> DjangoRunStore:
    monkeypatch.setattr("approvals.store.DEEP_OFFSET", 0)
    monkeypatch.setattr("approvals.store.NEAR_THE_START", 0)
    return DjangoRunStore(timedelta(seconds=30), clock=clock)


def _seed(store: DjangoRunStore) -> None:
    """30 runs of ``support`` over six days, some on the stroke of midnight and some sharing a time,
    three of them a supervisor's inner runs; 5 runs of another agent on the same days."""
    for i in range(30):
        at = T0 + timedelta(hours=(i // 2) * 9)  # pairs share a time; every 8th pair on midnight
        store.insert_suspended(
            suspension(
                f"run-{i:02d}",
                parent_run_id="boss-1" if i in (4, 11, 23) else None,
                suspended_at=at,
                calls=[approval(f"c{i}")],
            )
        )
    for i in range(5):
        store.insert_suspended(
            suspension(f"other-{i}", agent_id="billing", suspended_at=T0 + timedelta(days=i))
        )


def _ids(store: DjangoRunStore, query: RunQuery) -> tuple[list[str], int]:
    runs, total = store.list_suspended(query)
    return [r.run_id for r in runs], total


def _assert_pages_are_slices(store: DjangoRunStore) -> None:
    for oldest_first in (False, True):
        for delegated in (None, True, False):
            base = RunQuery(agent_id="support", oldest_first=oldest_first, delegated=delegated)
            whole, total = _ids(store, base)
            assert total == len(whole)
            for per_page in (1, 4, 7):
                pages = [
                    _ids(store, replace(base, limit=per_page, offset=page * per_page))
                    for page in range(total // per_page + 2)  # past the end too
                ]
                assert {counted for _, counted in pages} == {total}
                assert [i for ids, _ in pages for i in ids] == whole, (oldest_first, delegated, per_page)
                assert pages[-1][0] == []
    _assert_days_exact()


def _assert_days_exact() -> None:
    """The day counters (PostgreSQL) equal a count of the waiting runs per agent, kind and day."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT agent_id, delegated, day, SUM(n) FROM approvals_waiting_day"
            " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        )
        kept = cursor.fetchall()
        cursor.execute(
            "SELECT agent_id, parent_run_id IS NOT NULL, (suspended_at AT TIME ZONE 'UTC')::date, COUNT(*)"
            " FROM approvals_run WHERE status = 'suspended' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        )
        assert kept == cursor.fetchall()
        cursor.execute("SELECT COUNT(*) FROM approvals_waiting_day WHERE n <= 0")
        assert cursor.fetchone()[0] == 0  # a day no run waits on any more is gone


def test_every_deep_page_is_the_slice_of_the_whole_listing(store: DjangoRunStore) -> None:
    _seed(store)
    _assert_pages_are_slices(store)


def test_deep_pages_stay_exact_through_claim_finish_resuspend_reclaim_and_delete(
    store: DjangoRunStore, clock: Clock
) -> None:
    _seed(store)

    store.decide(agent_id="support", run_id="run-07", rule=lambda run: ("c7", decision()))
    claimed = store.claim("run-16")
    assert claimed is not None and store.start_continuation("run-16", version=claimed.version)
    inner = store.claim("run-11")  # an inner run, left to run out its lease
    assert inner is not None and store.start_continuation("run-11", version=inner.version)
    _assert_pages_are_slices(store)

    assert store.finish("run-16", version=claimed.version)
    running = store.get_run("run-07")
    assert running is not None and store.start_continuation("run-07", version=running.version)
    # Parked again on another day than the one it was first parked on.
    again = replace(suspension("run-07"), suspended_at=T0 + timedelta(days=9))
    assert store.resuspend(again, expected_version=running.version) is not None
    _assert_pages_are_slices(store)

    clock.advance(seconds=31)  # run-11's lease ran out: the next listing reclaims it
    assert "run-11" in _ids(store, RunQuery(agent_id="support"))[0]
    _assert_pages_are_slices(store)

    # Behind the store's back: deleted, moved to another agent, re-dated in place.
    RunRecord.objects.filter(run_id__in=["run-00", "run-01", "run-02"]).delete()
    RunRecord.objects.filter(run_id="run-20").update(agent_id="billing")
    RunRecord.objects.filter(run_id="run-21").update(suspended_at=T0 - timedelta(days=3))
    _assert_pages_are_slices(store)
    assert _ids(store, RunQuery(agent_id="support", oldest_first=True, limit=1, offset=0))[0] == ["run-21"]


def test_a_page_past_the_end_is_empty_with_the_total(store: DjangoRunStore) -> None:
    _seed(store)
    assert _ids(store, RunQuery(agent_id="support", limit=10, offset=30)) == ([], 30)
    assert _ids(store, RunQuery(agent_id="support", limit=10, offset=10**9)) == ([], 30)
    assert _ids(store, RunQuery(agent_id="nobody", limit=10, offset=5)) == ([], 0)
