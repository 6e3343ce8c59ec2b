"""A listing filtered by thread or by end user has its exact total, and on PostgreSQL the per-thread and
per-end-user waiting counters behind it (migration 0027, kept by triggers) stay equal to a count of
the waiting runs through every way a run changes, concurrent ones included, and keep no counter of a
thread or end user nothing waits on any more.

Runs on the database of ``DATABASE_URL``; the counters' own checks on PostgreSQL only (SQLite counts
a filtered listing's matches).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection, connections

from agents_runtime.store import RunQuery
from approvals.models import RunRecord
from approvals.store import DjangoRunStore
from tests.support.store_helpers import T0, Clock, approval, decision, suspension

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = {"thread_id": "approvals_waiting_thread", "resource_id": "approvals_waiting_resource"}


def _seed(store: DjangoRunStore) -> None:
    """24 runs of ``support`` over 3 threads and 4 end users (some without either), two of them a
    supervisor's inner runs; 3 runs of ``billing`` on the same thread and end user names."""
    for i in range(24):
        store.insert_suspended(
            suspension(
                f"run-{i:02d}",
                thread_id=None if i % 7 == 6 else f"t{i % 3}",
                resource_id=None if i % 5 == 4 else f"u{i % 4}",
                parent_run_id="boss-1" if i in (3, 8) else None,
                suspended_at=T0 + timedelta(minutes=i),
                calls=[approval(f"c{i}")],
            )
        )
    for i in range(3):
        store.insert_suspended(suspension(f"other-{i}", agent_id="billing", thread_id="t0", resource_id="u0"))


def _assert_exact(store: DjangoRunStore) -> None:
    """Every thread's and end user's listing total equals its runs listed whole, and (PostgreSQL) the
    counters equal a count of the waiting runs, with no counter left at zero."""
    for column in KEYS:
        values = set(RunRecord.objects.exclude(**{column: None}).values_list(column, flat=True))
        for agent_id in ("support", "billing"):
            for value in (*values, "nobody"):
                for delegated in (None, True, False):
                    query = RunQuery(agent_id=agent_id, delegated=delegated, **{column: value})
                    whole, total = store.list_suspended(query)
                    assert total == len(whole), (column, agent_id, value, delegated)
                    paged = store.list_suspended(replace(query, limit=2, offset=0))
                    assert paged[1] == total, (column, agent_id, value, delegated)
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for column, table in KEYS.items():
            cursor.execute(f"SELECT agent_id, {column}, delegated, n FROM {table} ORDER BY 1, 2, 3")
            kept = cursor.fetchall()
            cursor.execute(
                f"SELECT agent_id, {column}, parent_run_id IS NOT NULL, COUNT(*) FROM approvals_run"
                f" WHERE status = 'suspended' AND {column} IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
            )
            assert kept == cursor.fetchall(), table
            assert all(n > 0 for *_, n in kept), table


def _thread_total(store: DjangoRunStore, thread_id: str) -> int:
    return store.list_suspended(RunQuery(agent_id="support", thread_id=thread_id, limit=1))[1]


def test_totals_by_thread_and_end_user_stay_exact_through_every_change(
    store: DjangoRunStore, clock: Clock
) -> None:
    _seed(store)
    _assert_exact(store)
    assert _thread_total(store, "t0") == 7

    # A decision that does not complete its run leaves it waiting; a claim takes it off.
    calls = [approval("a"), approval("b")]
    store.insert_suspended(suspension("two-calls", thread_id="t0", resource_id="u1", calls=calls))
    store.decide(agent_id="support", run_id="two-calls", rule=lambda run: ("a", decision()))
    assert _thread_total(store, "t0") == 8
    store.decide(agent_id="support", run_id="run-00", rule=lambda run: ("c0", decision()))
    claimed = store.claim("run-03")  # an inner run
    assert claimed is not None and store.start_continuation("run-03", version=claimed.version)
    other = store.claim("run-08")  # the other, left to run out its lease
    assert other is not None and store.start_continuation("run-08", version=other.version)
    assert _thread_total(store, "t0") == 6
    _assert_exact(store)

    # Finished: gone; parked again: waiting again.
    assert store.finish("run-03", version=claimed.version)
    running = store.get_run("run-00")
    assert running is not None and store.start_continuation("run-00", version=running.version)
    again = replace(
        suspension("run-00", thread_id="t0", resource_id="u0"), suspended_at=T0 + timedelta(hours=1)
    )
    assert store.resuspend(again, expected_version=running.version) is not None
    _assert_exact(store)

    # run-08's lease runs out: the next listing reclaims it and counts it.
    clock.advance(seconds=31)
    ids = [r.run_id for r in store.list_suspended(RunQuery(agent_id="support", thread_id="t2"))[0]]
    assert "run-08" in ids
    _assert_exact(store)

    # Behind the store's back: deleted, moved to another thread, end user or agent.
    RunRecord.objects.filter(run_id__in=["run-01", "run-04"]).delete()
    RunRecord.objects.filter(run_id="run-02").update(thread_id="t9", resource_id=None)
    RunRecord.objects.filter(run_id="run-05").update(agent_id="billing")
    RunRecord.objects.filter(run_id="run-07").update(resource_id="u9")
    _assert_exact(store)


def test_a_thread_nothing_waits_on_any_more_has_no_counter_left(store: DjangoRunStore) -> None:
    store.insert_suspended(suspension("only", thread_id="lonely", resource_id="someone"))
    assert _thread_total(store, "lonely") == 1

    store.decide(agent_id="support", run_id="only", rule=lambda run: ("call-1", decision()))

    assert _thread_total(store, "lonely") == 0
    _assert_exact(store)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM approvals_waiting_thread")
            assert cursor.fetchone()[0] == 0


def test_reviewers_deciding_one_threads_runs_at_once_leave_it_counted_exactly(store: DjangoRunStore) -> None:
    # Eight runs of one thread and end user, decided (each claimed) by eight threads at once: every
    # decrement of the same counter row races the others, the thread's down to its deletion.
    for i in range(8):
        store.insert_suspended(suspension(f"busy-{i}", thread_id="busy", resource_id="crowd"))
    store.insert_suspended(suspension("stays", resource_id="crowd"))
    barrier = threading.Barrier(8)
    failures: list[BaseException] = []

    def decide(i: int) -> None:
        try:
            barrier.wait()
            store.decide(agent_id="support", run_id=f"busy-{i}", rule=lambda run: ("call-1", decision()))
        except BaseException as exc:  # reported below, not swallowed
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    assert _thread_total(store, "busy") == 0
    assert store.list_suspended(RunQuery(agent_id="support", resource_id="crowd"))[1] == 1
    _assert_exact(store)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the counters are PostgreSQL's")
def test_two_claims_of_a_threads_last_two_runs_interleaved_leave_no_counter(store: DjangoRunStore) -> None:
    # The interleaving the concurrent test above can only hope for, forced: A takes the thread's
    # counter from 2 to 1 and holds it; B, not yet seeing that, finds no counter at 1 to delete and
    # waits to decrement it; A commits; B takes it to 0 and must delete it.
    import psycopg

    store.insert_suspended(suspension("last-a", thread_id="pair"))
    store.insert_suspended(suspension("last-b", thread_id="pair"))
    params = connection.get_connection_params()
    dsn = {k: params[k] for k in ("dbname", "user", "password", "host", "port") if params.get(k) is not None}
    claim = "UPDATE approvals_run SET status = 'running' WHERE run_id = %s"
    with psycopg.connect(**dsn) as a, psycopg.connect(**dsn, autocommit=True) as b:
        a.execute(claim, ["last-a"])  # in a transaction, not committed
        b_pid = b.info.backend_pid
        waiting = threading.Thread(target=lambda: b.execute(claim, ["last-b"]))
        waiting.start()
        with psycopg.connect(**dsn, autocommit=True) as watch:
            for _ in range(500):  # until B waits on A's lock (at most ~5 s)
                state = watch.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [b_pid])
                if state.fetchone() == ("Lock",):
                    break
                threading.Event().wait(0.01)
            else:
                pytest.fail("the second claim never waited on the first")
        a.commit()
        waiting.join()

    assert _thread_total(store, "pair") == 0
    _assert_exact(store)
