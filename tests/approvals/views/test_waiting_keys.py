"""A listing filtered by thread, end user, tool or kind has its exact total, and on PostgreSQL the
waiting counters behind it (per thread and end user: migration 0027; per tool and kind of undecided
call: 0050; kept by triggers) stay equal to a count of the waiting runs through every way a run or
its calls change, concurrent ones included, and keep no counter of a key nothing waits on any more.

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
from approvals.models import ParkedCallRecord, RunRecord
from approvals.store import DjangoRunStore
from tests.support.store_helpers import T0, Clock, approval, decision, suspend_call, suspension

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


def _decide_at_once(store: DjangoRunStore, run_ids: list[str], tool_call_id: str) -> None:
    """Each run's call decided (and the run claimed) by a thread of its own, all released at once:
    every move of a counter row they share races the others'."""
    barrier = threading.Barrier(len(run_ids))
    failures: list[BaseException] = []

    def decide(run_id: str) -> None:
        try:
            barrier.wait()
            store.decide(agent_id="support", run_id=run_id, rule=lambda run: (tool_call_id, decision()))
        except BaseException as exc:  # reported below, not swallowed
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=decide, args=(run_id,)) for run_id in run_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def _total(store: DjangoRunStore, **filters: str) -> int:
    """The total of ``support``'s listing with ``filters``."""
    return store.list_suspended(RunQuery(agent_id="support", limit=1, **filters))[1]  # type: ignore[arg-type]


def test_totals_by_thread_and_end_user_stay_exact_through_every_change(
    store: DjangoRunStore, clock: Clock
) -> None:
    _seed(store)
    _assert_exact(store)
    assert _total(store, thread_id="t0") == 7

    # A decision that does not complete its run leaves it waiting; a claim takes it off.
    calls = [approval("a"), approval("b")]
    store.insert_suspended(suspension("two-calls", thread_id="t0", resource_id="u1", calls=calls))
    store.decide(agent_id="support", run_id="two-calls", rule=lambda run: ("a", decision()))
    assert _total(store, thread_id="t0") == 8
    store.decide(agent_id="support", run_id="run-00", rule=lambda run: ("c0", decision()))
    claimed = store.claim("run-03")  # an inner run
    assert claimed is not None and store.start_continuation("run-03", version=claimed.version)
    other = store.claim("run-08")  # the other, left to run out its lease
    assert other is not None and store.start_continuation("run-08", version=other.version)
    assert _total(store, thread_id="t0") == 6
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
    assert _total(store, thread_id="lonely") == 1

    store.decide(agent_id="support", run_id="only", rule=lambda run: ("call-1", decision()))

    assert _total(store, thread_id="lonely") == 0
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

    _decide_at_once(store, [f"busy-{i}" for i in range(8)], "call-1")

    assert _total(store, thread_id="busy") == 0
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

    assert _total(store, thread_id="pair") == 0
    _assert_exact(store)


# -- by tool and by kind (migration 0050) -------------------------------------------------------------

TOOLS = ("refund", "payout", "ask_details", "deploy", "nobody")
KINDS = ("approval", "input")


def _assert_exact_by_call(store: DjangoRunStore) -> None:
    """Every listing filtered by one tool or one kind has as its total the runs it lists whole, and
    (PostgreSQL) the counters equal a count of the waiting runs with an undecided call of each, with
    no counter left at zero."""
    for agent_id in ("support", "billing"):
        for filters in [{"tool_name": t} for t in TOOLS] + [{"kind": k} for k in KINDS]:
            for delegated in (None, True, False):
                query = RunQuery(agent_id=agent_id, delegated=delegated, **filters)
                whole, total = store.list_suspended(query)
                assert total == len(whole), (agent_id, filters, delegated, total, len(whole))
                assert store.list_suspended(replace(query, limit=1))[1] == total, (agent_id, filters)
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT agent_id, key, delegated, SUM(n) FROM approvals_waiting_call"
            " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        )
        kept = cursor.fetchall()
        cursor.execute(
            "SELECT r.agent_id, k.key, r.parent_run_id IS NOT NULL, COUNT(*) FROM approvals_run r JOIN ("
            " SELECT run_id, 'tool:' || tool_name AS key FROM approvals_parked_call WHERE action IS NULL"
            " UNION SELECT run_id, 'kind:' || kind FROM approvals_parked_call WHERE action IS NULL"
            ") k ON k.run_id = r.id WHERE r.status = 'suspended' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        )
        assert kept == cursor.fetchall()
        cursor.execute("SELECT COUNT(*) FROM approvals_waiting_call WHERE n <= 0")
        assert cursor.fetchone()[0] == 0


def test_totals_by_tool_and_kind_stay_exact_through_every_change(store: DjangoRunStore, clock: Clock) -> None:
    two_refunds = [approval("r1"), approval("r2")]
    store.insert_suspended(suspension("two-refunds", calls=two_refunds))
    store.insert_suspended(suspension("refund-and-ask", calls=[approval("r"), suspend_call("s")]))
    store.insert_suspended(suspension("payout", calls=[approval("p", tool_name="payout")]))
    store.insert_suspended(suspension("inner", parent_run_id="boss", calls=[approval("i")]))
    store.insert_suspended(suspension("theirs", agent_id="billing", calls=[approval("t")]))
    for i in range(3):
        store.insert_suspended(suspension(f"plain-{i}", suspended_at=T0 + timedelta(minutes=i)))
    _assert_exact_by_call(store)
    assert (_total(store, tool_name="refund"), _total(store, kind="input")) == (6, 1)

    # One of two refunds decided: the run still waits on a refund. The ask answered: it waits on
    # none. The second refund decided: the run is claimed (the call and the run in one statement).
    store.decide(agent_id="support", run_id="two-refunds", rule=lambda run: ("r1", decision()))
    assert _total(store, tool_name="refund") == 6
    store.decide(agent_id="support", run_id="refund-and-ask", rule=lambda run: ("s", decision()))
    assert (_total(store, tool_name="refund"), _total(store, kind="input")) == (6, 0)
    store.decide(agent_id="support", run_id="two-refunds", rule=lambda run: ("r2", decision()))
    assert _total(store, tool_name="refund") == 5
    _assert_exact_by_call(store)

    # Continued and finished; continued and parked again on other calls; a lease that runs out.
    running = store.get_run("two-refunds")
    assert running is not None and store.start_continuation("two-refunds", version=running.version)
    again = suspension("two-refunds", calls=[approval("p2", tool_name="payout"), suspend_call("s2")])
    assert store.resuspend(again, expected_version=running.version) is not None
    assert (_total(store, tool_name="payout"), _total(store, kind="input")) == (2, 1)
    claimed = store.claim("plain-0")
    assert claimed is not None and store.start_continuation("plain-0", version=claimed.version)
    assert store.finish("plain-0", version=claimed.version)
    other = store.claim("plain-1")
    assert other is not None and store.start_continuation("plain-1", version=other.version)
    assert _total(store, tool_name="refund") == 3
    clock.advance(seconds=31)  # plain-1's lease runs out: the next listing reclaims it
    assert _total(store, tool_name="refund") == 4
    _assert_exact_by_call(store)

    # Behind the store's back: two calls of one run decided in one statement, a call renamed, one
    # deleted, calls added, a run deleted with its calls, a run moved to another agent.
    store.insert_suspended(suspension("pair", calls=[approval("a"), approval("b")]))
    ParkedCallRecord.objects.filter(run__run_id="pair").update(action="approve", actor="x")
    ParkedCallRecord.objects.filter(run__run_id="plain-2").update(tool_name="deploy")
    ParkedCallRecord.objects.filter(run__run_id="refund-and-ask", tool_call_id="r").delete()
    run_pk = RunRecord.objects.get(run_id="payout").pk
    ParkedCallRecord.objects.bulk_create(
        [
            ParkedCallRecord(run_id=run_pk, position=5, tool_call_id="x1", tool_name="refund", kind="input"),
            ParkedCallRecord(run_id=run_pk, position=6, tool_call_id="x2", tool_name="refund", kind="input"),
        ]
    )
    RunRecord.objects.filter(run_id="inner").delete()
    RunRecord.objects.filter(run_id="plain-1").update(agent_id="billing")
    _assert_exact_by_call(store)
    assert (_total(store, tool_name="refund"), _total(store, tool_name="deploy")) == (1, 1)


def test_reviewers_deciding_one_tools_calls_at_once_leave_it_counted_exactly(store: DjangoRunStore) -> None:
    for i in range(8):
        store.insert_suspended(suspension(f"busy-{i}", calls=[approval("c", tool_name="payout")]))
    store.insert_suspended(suspension("stays", calls=[approval("c", tool_name="payout")]))

    _decide_at_once(store, [f"busy-{i}" for i in range(8)], "c")

    assert _total(store, tool_name="payout") == 1
    _assert_exact_by_call(store)
