"""What only the database store can get wrong: queries, storage hygiene, corrupt rows, connections."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta
from importlib import import_module
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from agents_runtime import RunUnreadable
from agents_runtime.store import Deadline, RunQuery, RunStore, agent_run
from approvals.models import ParkedCallRecord, RoutingRule, RunRecord, ThreadMessage
from approvals.store import DjangoRunStore, QueueQuery
from tests.support.store_helpers import (
    T0,
    Clock,
    approval,
    decision,
    delegated,
    suspend_call,
    suspension,
)
from tests.support.users import make_user

pytestmark = pytest.mark.django_db(transaction=True)


def seed(store: RunStore, count: int, **fields: object) -> None:
    for i in range(count):
        store.insert_suspended(
            suspension(
                f"run-{i:04}",
                suspended_at=T0 + timedelta(seconds=i),
                calls=[approval(f"c{i}-a"), suspend_call(f"c{i}-s")],
                **fields,  # type: ignore[arg-type]
            )
        )


@pytest.mark.django_db(transaction=False)
def test_building_a_store_touches_no_database_and_reads_the_lease_setting_lazily(settings: object) -> None:
    store = DjangoRunStore()  # at import time in the demo runtime: must not query

    settings.RUN_LEASE_SECONDS = 42  # type: ignore[attr-defined]

    assert store.lease == timedelta(seconds=42)
    assert DjangoRunStore(timedelta(seconds=5)).lease == timedelta(seconds=5)
    assert isinstance(store, RunStore)


def test_a_listing_is_one_statement_whatever_the_page_size(store: DjangoRunStore) -> None:
    seed(store, 60)

    counts = []
    for limit in (1, 10, 50):
        with CaptureQueriesContext(connection) as queries:
            runs, total = store.list_suspended(RunQuery(agent_id="support", limit=limit, offset=0))
        assert (len(runs), total) == (limit, 60)
        counts.append(len(queries))

    # The page with its calls, the total and the lease-reclaim probe: one statement.
    assert counts == [1, 1, 1]


@pytest.mark.parametrize(
    "query",
    [
        RunQuery(agent_id="nobody", limit=50, offset=0),  # an agent nothing waits on
        RunQuery(agent_id="support", thread_id="no-such-thread", limit=50, offset=0),
        RunQuery(agent_id="support", tool_name="no-such-tool", limit=20, offset=20),
    ],
    ids=["no run", "no match", "no match on page 2"],
)
def test_an_empty_listing_is_one_statement_too(store: DjangoRunStore, query: RunQuery) -> None:
    """A desk that keeps up lists nothing most of the time: its total (0) comes with the empty page."""
    seed(store, 3)

    with CaptureQueriesContext(connection) as queries:
        assert store.list_suspended(query) == ([], 0)

    assert len(queries) == 1, [q["sql"] for q in queries]


def test_an_empty_listing_still_reclaims_a_run_whose_claim_ran_out(
    store: DjangoRunStore, clock: Clock
) -> None:
    """The lease probe comes with the empty page: the run whose continuation died is waiting again."""
    seed(store, 1)
    claimed = store.claim("run-0000")
    assert claimed is not None and store.start_continuation("run-0000", version=claimed.version)
    assert store.list_suspended(RunQuery(agent_id="support", limit=50, offset=0)) == ([], 0)

    clock.advance(seconds=31)
    runs, total = store.list_suspended(RunQuery(agent_id="support", limit=50, offset=0))

    assert ([r.run_id for r in runs], total) == (["run-0000"], 1)


def test_a_listing_never_reads_snapshots(store: DjangoRunStore) -> None:
    seed(store, 3, thread_id="t1")

    with CaptureQueriesContext(connection) as queries:
        store.list_suspended(
            RunQuery(agent_id="support", thread_id="t1", tool_name="refund", limit=2, offset=0)
        )

    selects = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert selects and not [sql for sql in selects if '"snapshot"' in sql]


def test_listing_filters_are_sql_with_limit_and_offset(store: DjangoRunStore) -> None:
    seed(store, 5, resource_id="customer-1")

    with CaptureQueriesContext(connection) as queries:
        runs, total = store.list_suspended(
            RunQuery(agent_id="support", resource_id="customer-1", kind="input", limit=2, offset=2)
        )

    assert [r.run_id for r in runs] == ["run-0002", "run-0001"] and total == 5
    page_sql = next(q["sql"] for q in queries if "OFFSET" in q["sql"])
    assert "EXISTS" in page_sql and '"resource_id"' in page_sql and "ORDER BY" in page_sql


def test_naive_dates_in_a_query_are_taken_as_utc(store: DjangoRunStore) -> None:
    store.insert_suspended(suspension("r1", created_at=T0))

    runs, _ = store.list_suspended(RunQuery(agent_id="support", created_from=datetime(2026, 3, 1, 12, 0)))

    assert [r.run_id for r in runs] == ["r1"]


def test_repeated_suspensions_of_one_run_do_not_grow_storage(store: DjangoRunStore) -> None:
    store.insert_suspended(suspension("r1", calls=[approval("a"), approval("b")]))
    for i in range(50):
        claimed = store.claim("r1")
        assert claimed is not None
        again = store.resuspend(
            suspension(
                "r1",
                suspended_at=T0 + timedelta(minutes=i),
                calls=[approval(f"a{i}"), suspend_call(f"b{i}")],
                snapshot={"messages": ["x" * 100] * 3, "round": i},
            ),
            expected_version=claimed.version,
        )
        assert again is not None
        assert (RunRecord.objects.count(), ParkedCallRecord.objects.count()) == (1, 2)

    run = store.get_run("r1")
    assert run is not None and run.snapshot == {"messages": ["x" * 100] * 3, "round": 49}
    assert [c.tool_call_id for c in run.calls] == ["a49", "b49"]


def test_finishing_a_run_deletes_its_row_and_calls(store: DjangoRunStore) -> None:
    store.insert_suspended(suspension("r1", calls=[approval("a"), suspend_call("b")]))
    store.insert_suspended(suspension("r2"))
    receipt = store.record_decision(
        agent_id="support", run_id="r2", tool_call_id="call-1", decision=decision()
    )
    assert receipt.claimed_version is not None
    assert store.start_continuation("r2", version=receipt.claimed_version)

    assert store.finish("r2", version=receipt.claimed_version)

    assert list(RunRecord.objects.values_list("run_id", flat=True)) == ["r1"]
    assert ParkedCallRecord.objects.count() == 2


def test_finishing_is_one_conditional_delete(store: DjangoRunStore) -> None:
    store.insert_suspended(suspension("r1"))
    claimed = store.claim("r1")
    assert claimed is not None and store.start_continuation("r1", version=claimed.version)

    with CaptureQueriesContext(connection) as queries:
        assert store.finish("r1", version=claimed.version)

    statements = [
        q["sql"] for q in queries if q["sql"].startswith(("SELECT", "UPDATE", "DELETE", "INSERT", "WITH"))
    ]
    # On PostgreSQL the DELETE sits in a WITH that also remembers the thread's messages, writes the
    # run's permanent record and settles the run's audit rows; SQLite writes the record and settles
    # the rows in statements of their own, in the same transaction.
    assert "DELETE FROM approvals_run" in statements[0], statements
    if connection.vendor == "postgresql":
        assert len(statements) == 1, statements
        assert "approvals_ended_run" in statements[0], statements
    else:
        assert len(statements) == 3, statements
        assert "approvals_ended_run" in statements[1] and "approvals_auditentry" in statements[2], statements


def test_a_claim_whose_lease_ran_out_cannot_finish(store: DjangoRunStore, clock: Clock) -> None:
    store.insert_suspended(suspension("r1"))
    claimed = store.claim("r1")
    assert claimed is not None and store.start_continuation("r1", version=claimed.version)

    clock.advance(seconds=31)

    assert not store.finish("r1", version=claimed.version)
    run = store.get_run("r1")
    assert run is not None and run.interrupted and run.status == "suspended"


def test_a_corrupt_snapshot_is_listed_and_counted_but_not_handed_out(
    store: DjangoRunStore, caplog: pytest.LogCaptureFixture
) -> None:
    seed(store, 3)
    RunRecord.objects.filter(run_id="run-0001").update(snapshot="not an object")

    runs, total = store.list_suspended(RunQuery(agent_id="support"))
    with caplog.at_level(logging.WARNING, logger="approvals.store"):
        with pytest.raises(RunUnreadable):  # (not None: it is there, and cannot be decided)
            store.get_run("run-0001")
        claimed = store.claim("run-0001")

    assert [r.run_id for r in runs] == ["run-0002", "run-0001", "run-0000"] and total == 3
    assert store.get_run("run-0001", with_snapshot=False) is not None and claimed is None
    assert [r.getMessage() for r in caplog.records if "run-0001" in r.getMessage()]
    assert RunRecord.objects.get(run_id="run-0001").status == "suspended"
    assert store.get_run("run-0000") is not None


def test_a_corrupt_call_row_skips_its_run_with_a_warning(
    store: DjangoRunStore, caplog: pytest.LogCaptureFixture
) -> None:
    seed(store, 3)
    ParkedCallRecord.objects.filter(tool_call_id="c1-a").update(args=["not", "an", "object"])
    ParkedCallRecord.objects.filter(tool_call_id="c2-s").update(kind="teleport")

    with caplog.at_level(logging.WARNING, logger="approvals.store"):
        runs, total = store.list_suspended(RunQuery(agent_id="support"))

    assert [r.run_id for r in runs] == ["run-0000"]
    assert total == 3  # counted in SQL, like every other match; the page is just shorter
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "run-0001" in warnings and "run-0002" in warnings


def _every_kind_of_call(store: DjangoRunStore) -> None:
    """Runs whose calls hold everything a listing shows: an approval with its context, deadline,
    votes, escalation and a started tool; an input; a sub-agent's call; a decided call beside them."""
    voted = replace(
        approval("c-voted", amount=900),
        context={"user_message": "Refund it", "key_results": [{"tool_name": "lookup", "values": {"a": 1}}]},
        deadline=Deadline(timedelta(hours=1), on_expiry="escalate", escalate_to="leads"),
        expires_at=T0 + timedelta(hours=1),
        escalated_to="leads",
        votes=(decision(actor="ann"), decision(actor=None)),
        tool_started_at=T0 + timedelta(minutes=2),
    )
    decided = replace(approval("c-decided"), decision=decision("decline", reason="no"))
    store.insert_suspended(suspension("run-a", thread_id="t", resource_id="u", calls=[voted, suspend_call()]))
    store.insert_suspended(
        suspension(
            "run-b", parent_run_id="run-a", suspended_at=T0 + timedelta(seconds=1), calls=[delegated()]
        )
    )
    store.insert_suspended(
        suspension("run-c", suspended_at=T0 + timedelta(seconds=2), calls=[decided, approval("c-open")])
    )


@pytest.mark.parametrize(
    "query",
    [
        RunQuery(agent_id="support"),
        RunQuery(agent_id="support", limit=2, offset=1),
        RunQuery(agent_id="support", thread_id="t"),
        RunQuery(agent_id="support", kind="input", oldest_first=True),
        RunQuery(agent_id="support", limit=2, offset=0, by_deadline=True),
    ],
    ids=["all", "page 2", "thread", "input calls", "by deadline"],
)
def test_the_listing_made_from_rows_is_the_listing_made_from_stored_runs(
    store: DjangoRunStore, query: RunQuery
) -> None:
    """``list_waiting`` (what ``list_suspended_runs`` takes) makes from the rows what ``agent_run``
    makes of ``list_suspended``'s runs: every field of every run and call, the same total."""
    _every_kind_of_call(store)

    stored, total = store.list_suspended(query)
    listed = store.list_waiting(query)

    assert stored, "the query matches nothing: it compares nothing"
    assert listed == ([agent_run(run) for run in stored], total)


def test_a_corrupt_row_leaves_the_same_runs_out_of_both_listings(
    store: DjangoRunStore, caplog: pytest.LogCaptureFixture
) -> None:
    _every_kind_of_call(store)
    seed(store, 3)
    ParkedCallRecord.objects.filter(tool_call_id="c1-a").update(args=["not", "an", "object"])
    ParkedCallRecord.objects.filter(tool_call_id="c-decided").update(decided_at=None)  # (not listed itself)
    RunRecord.objects.filter(run_id="run-0002").update(history={"not": "a list"})

    with caplog.at_level(logging.WARNING, logger="approvals.store"):
        runs, total = store.list_waiting(RunQuery(agent_id="support"))

    assert sorted(run.run_id for run in runs) == ["run-0000", "run-a", "run-b"] and total == 6
    assert runs == [agent_run(run) for run in store.list_suspended(RunQuery(agent_id="support"))[0]]
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert all(run_id in warnings for run_id in ("run-0001", "run-0002", "run-c"))


def test_a_corrupt_row_leaves_its_run_out_of_the_queue_with_a_warning(
    store: DjangoRunStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The reviewer's queue reads its runs as listings do: an unreadable one is left out and logged,
    the others are shown (it failed the whole queue page), and a page whose every run was left out
    still leads to the next."""
    seed(store, 4)
    ParkedCallRecord.objects.filter(tool_call_id="c1-a").update(args=["not", "an", "object"])
    ParkedCallRecord.objects.filter(tool_call_id="c2-s").update(kind="teleport")

    pages: list[list[str]] = []
    query = QueueQuery(scope=(("support", None),), limit=1)
    with caplog.at_level(logging.WARNING, logger="approvals.store"):
        while len(pages) < 10:
            page = store.queue(query)
            pages.append([run.run_id for run in page.runs])
            if page.next_after is None:
                break
            query = replace(query, after=page.next_after)

    assert pages == [["run-0000"], [], [], ["run-0003"]]
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "run-0001" in warnings and "run-0002" in warnings


def test_migration_0011_renames_stored_suspend_calls_to_input_and_back(store: DjangoRunStore) -> None:
    seed(store, 2)
    # Rows as stored before 0011: the input kind was spelled "suspend".
    ParkedCallRecord.objects.filter(kind="input").update(kind="suspend")
    migration = import_module("approvals.migrations.0011_call_kind_input")

    migration.to_input(django_apps, None)

    run = store.get_run("run-0000")
    assert run is not None and [c.kind for c in run.calls] == ["approval", "input"]
    runs, total = store.list_suspended(RunQuery(agent_id="support", kind="input"))
    assert total == 2 and sorted(r.run_id for r in runs) == ["run-0000", "run-0001"]
    migration.to_suspend(django_apps, None)
    assert (
        sorted(ParkedCallRecord.objects.values_list("kind", flat=True)) == ["approval"] * 2 + ["suspend"] * 2
    )


def test_migration_0052_finds_a_rules_changer_by_the_name_it_kept() -> None:
    """Rules changed before the changer's column keep deciding on the same account's rights."""
    bob = make_user("bob", "Admins")
    common = {"agent_id": "support", "tool_name": "refund", "position": 1, "route": "allow"}
    changed = RoutingRule.objects.create(**common, created_by_name="ada", changed_by_name="bob")
    gone = RoutingRule.objects.create(**common, created_by_name="ada", changed_by_name="nobody")
    migration = import_module("approvals.migrations.0052_rule_changed_by")

    migration.changers_by_name(django_apps, SimpleNamespace(connection=connection))

    assert RoutingRule.objects.get(pk=changed.pk).changed_by_id == bob.pk
    assert RoutingRule.objects.get(pk=gone.pk).changed_by_id is None


def test_a_corrupt_thread_message_row_is_skipped_with_a_warning(
    store: DjangoRunStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.append_thread_messages("support", "t1", [{"n": 1}])
    ThreadMessage.objects.create(agent_id="support", thread_id="t1", messages={"not": "a list"})
    store.append_thread_messages("support", "t1", [{"n": 2}])

    with caplog.at_level(logging.WARNING, logger="approvals.store"):
        messages = store.thread_messages("support", "t1")

    assert messages == [{"n": 1}, {"n": 2}]
    assert any("not a JSON list" in r.getMessage() for r in caplog.records)


def test_a_real_short_lease_expires_without_a_heartbeat() -> None:
    # Two seconds, renewed after one: a second of margin each way, so a busy machine (CI runs the
    # suite in three processes on two cores) does not lose the lease between two statements.
    store = DjangoRunStore(timedelta(seconds=2))
    store.insert_suspended(suspension("r1"))
    receipt = store.record_decision(
        agent_id="support", run_id="r1", tool_call_id="call-1", decision=decision()
    )
    assert receipt.claimed_version is not None
    assert store.start_continuation("r1", version=receipt.claimed_version)

    time.sleep(1.0)
    assert store.heartbeat("r1", version=receipt.claimed_version)
    time.sleep(1.0)  # past the first lease, within the renewed one
    assert store.list_suspended(RunQuery(agent_id="support")) == ([], 0)
    time.sleep(2.5)

    [run], total = store.list_suspended(RunQuery(agent_id="support"))
    assert (run.run_id, run.interrupted, total) == ("r1", True, 1)
    assert [h["actor"] for h in run.history] == ["alice"]


def test_worker_threads_give_server_connections_back_after_each_call(store: DjangoRunStore) -> None:
    store.insert_suspended(suspension("r1"))
    held: list[object] = []

    def worker() -> None:
        store.list_suspended(RunQuery(agent_id="support"))
        store.get_run("r1")
        held.append(connections["default"].connection)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()

    if connection.vendor == "sqlite":
        assert held != [None]  # a file handle, kept: reopening costs more than the query
    else:
        assert held == [None]  # back to the pool, or the worker thread would keep it forever


def test_arguments_payloads_schemas_and_answers_keep_their_key_order(store: DjangoRunStore) -> None:
    """What a reviewer reads comes back as written (PostgreSQL's jsonb would sort keys by length)."""
    args = {"destination_account": "DE89", "amount": 120, "memo": "refund", "id": 7}
    payload = {"question": "Which window?", "why": "peak traffic", "service": "billing-api"}
    schema = {
        "type": "object",
        "properties": {
            "environment": {"type": "string"},
            "window_start": {"type": "string"},
            "replicas": {"type": "integer"},
            "dry_run": {"type": "boolean"},
            "notes": {"type": "string"},
        },
    }
    calls = [
        replace(approval("c1"), args=args),
        replace(suspend_call("c2"), suspend_payload=payload, resume_schema=schema),
    ]
    store.insert_suspended(suspension("r1", calls=calls))
    answer = {"environment": "staging", "window_start": "22:00", "replicas": 2, "dry_run": True}
    store.record_decision(
        agent_id="support",
        run_id="r1",
        tool_call_id="c2",
        decision=decision("resume", resume_data=answer),
        claim_when_complete=False,
    )

    run = store.get_run("r1")
    [listed], _ = store.list_suspended(RunQuery(agent_id="support"))

    for read in (run, listed):
        assert read is not None
        approval_call, input_call = read.calls
        assert list(approval_call.args or {}) == list(args)
        assert list(input_call.suspend_payload) == list(payload)
        assert list((input_call.resume_schema or {})["properties"]) == list(schema["properties"])
        assert input_call.decision is not None and list(input_call.decision.resume_data) == list(answer)


def test_a_threads_latest_runs_are_read_without_its_older_ones(store: DjangoRunStore) -> None:
    for run in range(50):
        store.append_thread_messages("support", "t1", [{"run": run}])

    with CaptureQueriesContext(connection) as queries:
        remembered = store.thread_messages("support", "t1", last_runs=3)

    assert remembered == [{"run": 47}, {"run": 48}, {"run": 49}]
    [read] = [q["sql"] for q in queries.captured_queries if "thread_message" in q["sql"]]
    assert "LIMIT 3" in read and "DESC" in read
