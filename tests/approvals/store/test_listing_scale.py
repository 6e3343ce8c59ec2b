"""The database store's listing at scale: pages picked by id equal slices of the whole listing, and the
waiting counters (migration 0025, kept by triggers) stay exact through every way a run changes.

Runs on the database of ``DATABASE_URL`` (SQLite by default; PostgreSQL with
``DATABASE_URL=postgres://...``).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from agents_runtime.store import RunQuery
from approvals.models import ParkedCallRecord, RunRecord
from approvals.store import DjangoRunStore, QueueQuery, queue_page
from tests.support.store_helpers import T0, Clock, approval, decision, suspend_call, suspension

pytestmark = pytest.mark.django_db(transaction=True)


def _seed(store: DjangoRunStore) -> None:
    """37 runs of ``support`` over 3 threads, some sharing a suspension time, some with a deadline
    (three with two), two inner runs of a supervisor; 4 runs of another agent."""
    for i in range(37):
        first = approval(f"c{i}")
        if i % 4 == 1:  # some with a deadline (some the same), for the deadline order
            first = replace(first, expires_at=T0 + timedelta(hours=(i * 7) % 5))
        second = suspend_call(f"s{i}")
        if i in (9, 21, 33):  # a run with two deadlines: listed once, at its soonest (or the same)
            second = replace(second, expires_at=T0 + timedelta(hours=(i * 7) % 5 - (i == 9), minutes=i == 33))
        calls = [first] + ([second] if i % 3 == 0 else [])
        store.insert_suspended(
            suspension(
                f"run-{i:02d}",
                thread_id=f"t{i % 3}",
                parent_run_id="boss-1" if i in (5, 6) else None,
                created_at=T0 + timedelta(minutes=i),
                suspended_at=T0 + timedelta(minutes=i // 2),  # ties, broken by run id
                calls=calls,
            )
        )
    for i in range(4):
        store.insert_suspended(suspension(f"other-{i}", agent_id="billing"))


def _ids(store: DjangoRunStore, query: RunQuery) -> tuple[list[str], int]:
    runs, total = store.list_suspended(query)
    return [r.run_id for r in runs], total


@pytest.mark.parametrize("order", ["newest", "oldest", "deadline"])
@pytest.mark.parametrize(
    "filters", [{}, {"thread_id": "t1"}, {"delegated": False}, {"created_to": T0 + timedelta(minutes=20)}]
)
def test_every_page_is_the_slice_of_the_whole_listing(
    store: DjangoRunStore, order: str, filters: dict[str, Any]
) -> None:
    _seed(store)
    base = RunQuery(
        agent_id="support", oldest_first=order == "oldest", by_deadline=order == "deadline", **filters
    )
    whole, total = _ids(store, base)
    assert total == len(whole) > 0

    for per_page in (1, 5, 7, 50):
        pages = []
        for page in range(total // per_page + 2):  # past the end too
            ids, counted = _ids(store, replace(base, limit=per_page, offset=page * per_page))
            assert counted == total
            pages.append(ids)
        assert [i for ids in pages for i in ids] == whole
        assert pages[-1] == []


def test_a_listed_run_carries_its_calls_in_order(store: DjangoRunStore) -> None:
    _seed(store)

    runs, _ = store.list_suspended(RunQuery(agent_id="support", thread_id="t0", limit=3, offset=0))

    assert [[c.tool_call_id for c in r.calls] for r in runs] == [
        ["c36", "s36"],
        ["c33", "s33"],
        ["c30", "s30"],
    ]


def _counted(agent_id: str, delegated: bool | None = None) -> tuple[int, int]:
    """(the waiting counters' sum, a COUNT of the rows) for the agent."""
    flag = {None: "", True: " AND delegated", False: " AND NOT delegated"}[delegated]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COALESCE(SUM(n), 0) FROM approvals_waiting_count WHERE agent_id = %s{flag}", [agent_id]
        )
        (kept,) = cursor.fetchone()
    rows = RunRecord.objects.filter(agent_id=agent_id, status="suspended")
    if delegated is not None:
        rows = rows.filter(parent_run_id__isnull=not delegated)
    return int(kept), rows.count()


def _assert_exact(store: DjangoRunStore, expected: int) -> None:
    for delegated in (None, True, False):
        kept, counted = _counted("support", delegated)
        assert kept == counted, delegated
        assert store.list_suspended(RunQuery(agent_id="support", delegated=delegated, limit=1))[1] == counted
    assert _counted("support") == (expected, expected)
    assert _counted("billing") == (4, 4)


def test_the_total_stays_exact_through_park_decide_claim_finish_reclaim_and_delete(
    store: DjangoRunStore, clock: Clock
) -> None:
    _seed(store)
    _assert_exact(store, 37)

    # A decision that does not complete the run leaves it waiting.
    store.decide(agent_id="support", run_id="run-00", rule=lambda run: ("c0", decision()))
    _assert_exact(store, 37)
    # One that completes it claims it: no longer waiting.
    store.decide(agent_id="support", run_id="run-01", rule=lambda run: ("c1", decision()))
    _assert_exact(store, 36)
    claimed = store.claim("run-02")
    assert claimed is not None and store.start_continuation("run-02", version=claimed.version)
    inner = store.claim("run-05")  # an inner run
    assert inner is not None and store.start_continuation("run-05", version=inner.version)
    _assert_exact(store, 34)

    # Finished: gone; parked again: waiting again.
    assert store.finish("run-02", version=claimed.version)
    _assert_exact(store, 34)
    running = store.get_run("run-01")
    assert running is not None and store.start_continuation("run-01", version=running.version)
    again = replace(suspension("run-01"), suspended_at=T0 + timedelta(hours=1))
    assert store.resuspend(again, expected_version=running.version) is not None
    _assert_exact(store, 35)

    # The inner run's claim runs out: the next listing reclaims it and counts it, in one call.
    clock.advance(seconds=31)
    ids, total = _ids(store, RunQuery(agent_id="support"))
    assert "run-05" in ids and total == len(ids) == 36
    _assert_exact(store, 36)

    # Deleted behind the store's back (a cascade, an admin): still exact.
    RunRecord.objects.filter(run_id__in=["run-10", "run-11"]).delete()
    RunRecord.objects.filter(run_id="run-12").update(agent_id="billing")
    kept, counted = _counted("support")
    assert kept == counted == 33
    assert _counted("billing") == (5, 5)


def test_a_rolled_back_park_counts_nothing(store: DjangoRunStore) -> None:
    _seed(store)
    with pytest.raises(ValueError, match="already exists"):
        store.insert_suspended(suspension("run-03"))

    _assert_exact(store, 37)


def _plan(sql: str, params: Any) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE approvals_run")
            cursor.execute("EXPLAIN " + sql, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql.replace("%s", "?"), params)
        return "\n".join(str(row) for row in cursor.fetchall())


def _listed_with_plan(store: DjangoRunStore, query: RunQuery, marker: str) -> tuple[list[Any], int, str]:
    """The page ``query`` lists, its total, and the plan of the page's statement (the one that holds
    ``marker``), as the database would run it again."""
    sent: list[tuple[str, Any]] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        runs, total = store.list_suspended(query)
    (listing,) = [(sql, params) for sql, params in sent if marker in sql and " page" in sql]
    return list(runs), total, _plan(*listing)


def test_a_page_of_sub_agents_calls_reads_only_the_delegated_runs(store: DjangoRunStore) -> None:
    # The inbox lists an agent's sub-agent runs apart; among thousands of its own waiting runs, that
    # page walked them all to find the few delegated ones (18 ms of a 46 ms inbox page at 10,000).
    for i in range(300):
        store.insert_suspended(suspension(f"own-{i:03d}", suspended_at=T0 + timedelta(seconds=i)))
    for i in range(3):
        store.insert_suspended(suspension(f"inner-{i}", parent_run_id="boss-1"))
    query = RunQuery(agent_id="support", delegated=True, oldest_first=True, limit=20)
    runs, total, plan = _listed_with_plan(store, query, "parent_run_id")

    assert ([r.run_id for r in runs], total) == (["inner-0", "inner-1", "inner-2"], 3)
    # Either index holds only the delegated runs (PostgreSQL may take the parent index and sort the few).
    assert "run_delegated_oldest_idx" in plan or "Index Cond: (parent_run_id IS NOT NULL)" in plan, plan


def _wide_runs_with_a_refund_and_a_question(store: DjangoRunStore) -> None:
    """300 waiting runs as wide as real ones (a conversation in each snapshot: their table dearer to
    read than an index of them), each with an undecided approval of ``refund`` and an input call;
    vacuumed as autovacuum leaves a table (its pages all visible)."""
    snapshot = {"messages": ["a message of the conversation " * 50]}
    for i in range(300):
        calls = [approval(f"c{i}-a"), suspend_call(f"c{i}-s")]
        at = T0 + timedelta(seconds=i)
        store.insert_suspended(suspension(f"run-{i:03d}", suspended_at=at, calls=calls, snapshot=snapshot))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE approvals_run, approvals_parked_call")


def _total_plan(store: DjangoRunStore, query: RunQuery) -> tuple[int, int, str]:
    """The page's length, the total and the plan of the total (its part of the page's statement), no
    scan of a whole table, nor a bitmap of one, left to the planner."""
    # (In one transaction: outside one the store gives its connection back after the listing.)
    with transaction.atomic(), connection.cursor() as cursor:
        for way in ("seqscan", "bitmapscan"):
            cursor.execute(f"SET LOCAL enable_{way} = off")
        runs, total, plan = _listed_with_plan(store, query, "header_row")
    return len(runs), total, plan.split("InitPlan 1")[1].split("InitPlan 2")[0]


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's waiting counters (migration 0050)"
)
@pytest.mark.parametrize("filters", [{"tool_name": "refund"}, {"kind": "input"}], ids=["tool", "kind"])
def test_a_total_filtered_by_tool_or_kind_alone_is_read_from_its_counters(
    store: DjangoRunStore, filters: dict[str, str]
) -> None:
    # Counted from the calls, it grew with the matches: at a million waiting runs, most of the
    # listing's time (docs/scaling.md).
    _wide_runs_with_a_refund_and_a_question(store)

    length, total, plan = _total_plan(store, RunQuery(agent_id="support", limit=20, **filters))  # type: ignore[arg-type]

    assert (length, total) == (20, 300)
    assert "approvals_waiting_call" in plan and "approvals_parked_call" not in plan, plan


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's covering indexes (migration 0049)"
)
def test_a_total_filtered_by_tool_and_kind_is_counted_from_indexes_alone(store: DjangoRunStore) -> None:
    # No counter holds both: the matches are counted. From the tables, at a million waiting runs
    # that read every run row of the agent (and their snapshots' pages) and every undecided call.
    _wide_runs_with_a_refund_and_a_question(store)

    query = RunQuery(agent_id="support", limit=20, tool_name="refund", kind="input")
    length, total, plan = _total_plan(store, query)

    assert (length, total) == (20, 300)
    assert "Index Only Scan using run_waiting_ids_idx" in plan, plan
    for calls_index in ("call_undecided_tool_runs_idx", "call_undecided_kind_runs_idx"):
        assert f"Index Only Scan using {calls_index}" in plan, plan


def _many_waiting(prefix: str, n: int) -> None:
    """``n`` waiting runs of ``support`` without calls, one a second, bulk-inserted."""
    RunRecord.objects.bulk_create(
        RunRecord(
            run_id=f"{prefix}-{i:05d}",
            agent_id="support",
            created_at=T0,
            suspended_at=T0 + timedelta(seconds=i),
            snapshot={"messages": []},
        )
        for i in range(n)
    )


def test_a_page_of_a_sub_agents_own_calls_is_read_in_order_not_sorted(store: DjangoRunStore) -> None:
    # Its own runs are filtered as COALESCE(parent_run_id, '') = '' (the store's ``_matches``), of
    # which PostgreSQL, without statistics on the expression (migration 0047), guessed it keeps 0.5%
    # of the rows: with thousands waiting, it read the whole table and sorted it for a page.
    _many_waiting("own", 5000)
    store.insert_suspended(suspension("inner-0", parent_run_id="boss-1"))
    query = RunQuery(agent_id="support", delegated=False, oldest_first=True, limit=50)
    runs, _total, plan = _listed_with_plan(store, query, "COALESCE")

    assert [r.run_id for r in runs] == [f"own-{i:05d}" for i in range(50)]
    if connection.vendor == "postgresql":
        assert "Seq Scan on approvals_run " not in plan, plan
    else:
        assert "USE TEMP B-TREE FOR ORDER BY" not in plan.split("SCAN page")[0], plan


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="prepared statements and generic plans are PostgreSQL's"
)
def test_a_small_agents_oldest_run_is_read_from_its_own_index_whatever_the_plan(
    store: DjangoRunStore,
) -> None:
    # A listing's statement is prepared, and after a few executions PostgreSQL may plan it once for
    # every agent. Beside one big agent, the generic plan of a small agent's oldest-first page (the
    # overview's "oldest waiting") walked the queue's index in that order past every waiting run.
    _many_waiting("big", 3000)
    query = RunQuery(agent_id="billing", oldest_first=True, limit=1)  # (none waits: the overview's
    # common case, and the one the statistics cannot tell from the big agent)
    sent: list[tuple[str, Any]] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE approvals_run")
    with transaction.atomic(), connection.cursor() as cursor:  # (one connection, the setting undone)
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        with connection.execute_wrapper(keep):
            runs, total = store.list_suspended(query)
        sql, listing = next((sql, params) for sql, params in sent if " page " in sql)
        number = itertools.count(1)
        on_the_server = re.sub("%s", lambda _: f"${next(number)}", sql).replace("%%", "%")
        cursor.execute("SELECT name FROM pg_prepared_statements WHERE statement = %s", [on_the_server])
        ((name,),) = cursor.fetchall()
        cursor.execute(f"EXPLAIN EXECUTE {name}({', '.join(['%s'] * len(listing))})", listing)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert (runs, total) == ([], 0)
    assert "run_queue" not in plan and "Index Cond: (((agent_id)::text = $" in plan, plan


@pytest.mark.parametrize("limit", [1, 2, 3, 10])
def test_the_queue_pages_through_deadlines_alike_in_suspension_order(
    store: DjangoRunStore, limit: int
) -> None:
    # Four runs due at the same moment, suspended in another order than their ids; two with an
    # earlier deadline too, one of them on a second call; three without a deadline.
    alike = T0 + timedelta(hours=1)
    due = {
        "d-1": alike,
        "d-2": alike,
        "d-3": alike,
        "d-4": alike,
        "e-1": T0,
        "e-2": T0 + timedelta(minutes=5),
    }
    for i, (run_id, deadline) in enumerate(due.items()):
        calls = [replace(approval(), expires_at=deadline)]
        if run_id == "e-2":
            calls = [
                replace(approval("late"), expires_at=alike),
                replace(approval("soon"), expires_at=deadline),
            ]
        suspended = T0 + timedelta(minutes=(7 - i) % 4)  # d-4 and e-1 alike
        store.insert_suspended(suspension(run_id, suspended_at=suspended, calls=calls))
    for run_id in ("n-1", "n-2", "n-3"):
        store.insert_suspended(suspension(run_id))
    listed: list[str] = []
    query = QueueQuery(scope=(("support", None),), limit=limit)
    while True:
        page = queue_page("default", query)
        listed += [run.run_id for run in page.runs]
        if not page.more:
            break
        query = replace(query, after=page.positions[-1])

    # d-1..d-4 were suspended at minutes 3, 2, 1, 0 (d-4 first); the rest by suspension, then id.
    assert listed == ["e-1", "e-2", "d-4", "d-3", "d-2", "d-1", "n-1", "n-2", "n-3"]


def _expiry_index_rows(sql: str, params: Any) -> int:
    """How many index entries ``sql`` reads from the calls' deadline index, run again under EXPLAIN."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, TIMING OFF) " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    found = re.findall(r"call_undecided_expiry_idx.*actual rows=(\d+) loops=(\d+)", plan)
    return sum(int(rows) * int(loops) for rows, loops in found)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's statistics and plans")
def test_a_page_in_deadline_order_reads_as_far_as_the_page_with_statistics_from_before_the_deadlines(
    store: DjangoRunStore,
) -> None:
    # Statistics taken before many calls gained a deadline say that almost none has one. The deadline
    # index then looked like a one-row probe: each run's soonest call was found by scanning it whole,
    # and every due call was read and sorted for a page.
    _many_waiting("run", 2000)
    runs = list(RunRecord.objects.order_by("pk"))
    ParkedCallRecord.objects.bulk_create(
        ParkedCallRecord(run=run, position=0, tool_call_id="call-1", tool_name="refund", kind="approval")
        for run in runs
    )
    table = ParkedCallRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {table}")
            cursor.execute("ANALYZE approvals_run")
        for i, run in enumerate(runs[::2]):  # half of them, each its own deadline, latest run first
            ParkedCallRecord.objects.filter(run=run).update(expires_at=T0 + timedelta(hours=1, seconds=-i))
        sent: list[tuple[str, Any]] = []

        def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            sent.append((sql, params))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(keep):
            queue = queue_page("default", QueueQuery(scope=(("support", None),), limit=20))
            listed, total = store.list_suspended(RunQuery(agent_id="support", by_deadline=True, limit=50))
            whole, _ = store.list_suspended(RunQuery(agent_id="support", by_deadline=True))
        near_the_start, sent = sent, []
        last_due = queue_page("default", QueueQuery(scope=(("support", None),), limit=1000)).positions[-1]
        with connection.execute_wrapper(keep):
            # Past every run with a deadline: the runs without one, oldest first.
            later, _ = store.list_suspended(
                RunQuery(agent_id="support", by_deadline=True, limit=50, offset=1020)
            )
            after = queue_page("default", QueueQuery(scope=(("support", None),), limit=20, after=last_due))

        latest_due = [run.run_id for run in runs[::2][::-1]]
        undue = [run.run_id for run in runs[1::2]]
        assert [run.run_id for run in queue.runs] == latest_due[:20] and queue.more
        assert [run.run_id for run in listed] == latest_due[:50] and total == 2000
        assert [run.run_id for run in whole[:1000]] == latest_due and len(whole) == 2000
        assert [run.run_id for run in later] == undue[20:70]
        assert [run.run_id for run in after.runs] == undue[:20]
        # Near the start, a walk reads as far as the page; past every due run, each due call once
        # (which runs have one), never once a run.
        for statements, most in ((near_the_start, 60), (sent, 1000 + 60)):
            walks = [(sql, params) for sql, params in statements if "expires_at" in sql and table in sql]
            assert walks
            for sql, params in walks:
                assert _expiry_index_rows(sql, params) <= most, sql
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
