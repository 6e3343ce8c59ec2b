"""The store protocol's rules, asserted identically on the in-memory reference and on DjangoRunStore.

Every test runs twice: ``[memory]`` pins down what the reference does, ``[django]`` proves the
database store does the same (on SQLite, or on PostgreSQL when ``DATABASE_URL`` says so).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

import pytest

from agents_runtime.errors import RunAlreadyDecided, RunNotFound, ToolCallNotSuspended
from agents_runtime.store import Decision, RunQuery, RunStore, StoredRun
from tests.support.store_helpers import (
    STORE_KINDS,
    T0,
    Clock,
    StoreFactory,
    approval,
    decision,
    delegated,
    store_factory,
    suspend_call,
    suspension,
)


@pytest.fixture(params=STORE_KINDS)
def make_store(request: pytest.FixtureRequest) -> StoreFactory:
    return store_factory(request, request.param)


@pytest.fixture
def store(make_store: StoreFactory, clock: Clock) -> RunStore:
    return make_store(lease=timedelta(seconds=30), clock=clock)


def listed_ids(store: RunStore, **query: object) -> list[str]:
    runs, _ = store.list_suspended(RunQuery(**{"agent_id": "support", **query}))  # type: ignore[arg-type]
    return [run.run_id for run in runs]


# -- writing and reading a run ---------------------------------------------------------------------


def test_inserted_run_reads_back_with_snapshot_and_every_call_field(store: RunStore) -> None:
    calls = (approval(), suspend_call(), delegated())
    inserted = store.insert_suspended(
        suspension("r1", thread_id="t1", resource_id="customer-7", parent_run_id="outer-1", calls=calls)
    )

    run = store.get_run("r1")

    assert run is not None
    assert run == inserted
    assert (run.status, run.version, run.interrupted, run.history) == ("suspended", 1, False, ())
    assert (run.agent_id, run.thread_id, run.resource_id, run.parent_run_id) == (
        "support",
        "t1",
        "customer-7",
        "outer-1",
    )
    assert run.calls == calls
    assert run.snapshot == {"messages": [{"kind": "request", "run": "r1"}]}
    assert run.created_at == T0 and run.created_at.utcoffset() == timedelta(0)


def test_inserting_an_existing_run_id_is_refused(store: RunStore) -> None:
    store.insert_suspended(suspension("r1"))

    with pytest.raises(ValueError, match="already exists"):
        store.insert_suspended(suspension("r1", calls=[approval("other")]))

    run = store.get_run("r1")
    assert run is not None and [c.tool_call_id for c in run.calls] == ["call-1"]


def test_unknown_run_is_none(store: RunStore) -> None:
    assert store.get_run("nope") is None


# -- listings --------------------------------------------------------------------------------------


def test_listing_is_newest_suspension_first_with_ties_by_run_id(store: RunStore) -> None:
    for run_id, minutes in [("b", 5), ("a", 5), ("c", 1), ("d", 9)]:
        store.insert_suspended(suspension(run_id, suspended_at=T0 + timedelta(minutes=minutes)))

    assert listed_ids(store) == ["d", "a", "b", "c"]
    assert listed_ids(store, oldest_first=True) == ["c", "a", "b", "d"]


def test_listing_only_shows_the_agents_own_suspended_runs(store: RunStore) -> None:
    store.insert_suspended(suspension("mine", thread_id="shared", resource_id="shared"))
    store.insert_suspended(suspension("theirs", agent_id="billing", thread_id="shared", resource_id="shared"))
    claimed = store.insert_suspended(suspension("claimed"))
    store.claim("claimed", expected_version=claimed.version)

    runs, total = store.list_suspended(RunQuery(agent_id="support", thread_id="shared"))

    assert [r.run_id for r in runs] == ["mine"] and total == 1
    assert listed_ids(store) == ["mine"]


def test_listing_filters_on_thread_resource_and_inclusive_creation_dates(store: RunStore) -> None:
    store.insert_suspended(suspension("t1-early", thread_id="t1", resource_id="r1", created_at=T0))
    store.insert_suspended(
        suspension("t1-late", thread_id="t1", resource_id="r2", created_at=T0 + timedelta(days=2))
    )
    store.insert_suspended(
        suspension("t2", thread_id="t2", resource_id="r1", created_at=T0 + timedelta(days=1))
    )
    store.insert_suspended(suspension("none", created_at=T0 + timedelta(days=3)))

    assert sorted(listed_ids(store, thread_id="t1")) == ["t1-early", "t1-late"]
    assert sorted(listed_ids(store, resource_id="r1")) == ["t1-early", "t2"]
    assert listed_ids(store, thread_id="t1", resource_id="r1") == ["t1-early"]
    assert sorted(
        listed_ids(store, created_from=T0 + timedelta(days=1), created_to=T0 + timedelta(days=2))
    ) == [
        "t1-late",
        "t2",
    ]
    assert listed_ids(store, created_to=T0) == ["t1-early"]
    assert listed_ids(store, created_from=T0 + timedelta(days=3)) == ["none"]


def test_tool_name_and_kind_filters_only_see_undecided_calls(store: RunStore) -> None:
    store.insert_suspended(suspension("refund-only", calls=[approval("c1", "refund")]))
    store.insert_suspended(
        suspension("both", calls=[approval("c1", "refund"), suspend_call("c2", "ask_details")])
    )
    store.insert_suspended(suspension("ask-only", calls=[suspend_call("c1", "ask_details")]))
    store.record_decision(
        agent_id="support", run_id="both", tool_call_id="c1", decision=decision(), claim_when_complete=False
    )

    assert sorted(listed_ids(store, tool_name="refund")) == ["refund-only"]
    assert sorted(listed_ids(store, kind="input")) == ["ask-only", "both"]
    assert sorted(listed_ids(store, kind="approval")) == ["refund-only"]
    assert listed_ids(store, tool_name="ask_details", kind="approval") == []


def test_paging_counts_every_match_and_past_the_end_is_empty(store: RunStore) -> None:
    for i in range(7):
        store.insert_suspended(suspension(f"r{i}", suspended_at=T0 + timedelta(minutes=i)))

    pages = [store.list_suspended(RunQuery(agent_id="support", limit=3, offset=o)) for o in (0, 3, 6, 9)]

    assert [[r.run_id for r in runs] for runs, _ in pages] == [
        ["r6", "r5", "r4"],
        ["r3", "r2", "r1"],
        ["r0"],
        [],
    ]
    assert {total for _, total in pages} == {7}


def test_a_paged_date_range_keeps_the_suspension_order(store: RunStore) -> None:
    for i in range(6):
        created = T0 + timedelta(days=i)
        store.insert_suspended(
            suspension(f"r{i}", created_at=created, suspended_at=created + timedelta(days=10 - 2 * i))
        )
    window = {"created_from": T0 + timedelta(days=1), "created_to": T0 + timedelta(days=4)}

    newest = [store.list_suspended(RunQuery(agent_id="support", limit=2, offset=o, **window)) for o in (0, 2)]
    oldest, total = store.list_suspended(
        RunQuery(agent_id="support", limit=3, offset=0, oldest_first=True, **window)
    )

    assert [[r.run_id for r in runs] for runs, _ in newest] == [["r1", "r2"], ["r3", "r4"]]
    assert [r.run_id for r in oldest] == ["r4", "r3", "r2"] and total == 4


def test_listing_leaves_snapshots_out(store: RunStore) -> None:
    store.insert_suspended(suspension("r1", calls=[approval(), suspend_call()]))

    [run], _ = store.list_suspended(RunQuery(agent_id="support"))

    assert run.snapshot is None
    assert run.calls == (approval(), suspend_call())


def test_a_run_read_for_its_calls_leaves_its_snapshot_out(store: RunStore) -> None:
    store.insert_suspended(suspension("r1", calls=[approval(), suspend_call()]))

    light = store.get_run("r1", with_snapshot=False)
    whole = store.get_run("r1")

    assert light is not None and whole is not None
    assert light.snapshot is None and whole.snapshot is not None
    assert light.calls == whole.calls == (approval(), suspend_call())
    assert light.version == whole.version and light.status == whole.status == "suspended"


# -- decisions -------------------------------------------------------------------------------------


def test_a_non_final_decision_keeps_the_run_suspended_and_listed(store: RunStore) -> None:
    store.insert_suspended(suspension("r1", calls=[approval("c1"), approval("c2")]))

    receipt = store.record_decision(agent_id="support", run_id="r1", tool_call_id="c1", decision=decision())

    assert receipt.claimed_version is None
    assert (receipt.run.status, receipt.run.version) == ("suspended", 2)
    assert [c.tool_call_id for c in receipt.run.undecided] == ["c2"]
    [listed], _ = store.list_suspended(RunQuery(agent_id="support"))
    assert listed.calls[0].decision == decision()
    assert listed.undecided == (approval("c2"),)


def test_the_last_decision_claims_the_run(store: RunStore, clock: Clock) -> None:
    store.insert_suspended(suspension("r1", calls=[approval("c1"), approval("c2")]))
    store.record_decision(agent_id="support", run_id="r1", tool_call_id="c1", decision=decision())

    receipt = store.record_decision(
        agent_id="support", run_id="r1", tool_call_id="c2", decision=decision("decline", reason="too much")
    )

    assert receipt.claimed_version == 4
    assert (receipt.run.status, receipt.run.version) == ("running", 4)
    assert listed_ids(store) == []
    run = store.get_run("r1")
    assert run is not None and run.status == "running"
    assert [c.decision.action for c in run.calls if c.decision] == ["approve", "decline"]
    assert run.calls[1].decision is not None and run.calls[1].decision.reason == "too much"


def test_a_decision_rule_sees_the_stored_run_and_its_refusal_changes_nothing(store: RunStore) -> None:
    store.insert_suspended(suspension("r1", calls=[approval("c1"), approval("c2")]))
    seen: list[StoredRun] = []

    def refuse(run: StoredRun) -> tuple[str, Decision]:
        seen.append(run)
        raise ValueError("resume data does not fit")

    with pytest.raises(ValueError, match="does not fit"):
        store.decide(agent_id="support", run_id="r1", rule=refuse)

    assert seen[0].snapshot == {"messages": [{"kind": "request", "run": "r1"}]}
    run = store.get_run("r1")
    assert run is not None and (run.version, run.undecided) == (1, (approval("c1"), approval("c2")))

    receipt = store.decide(
        agent_id="support", run_id="r1", rule=lambda run: (run.calls[1].tool_call_id, decision())
    )

    assert receipt.call == replace(approval("c2"), decision=decision())
    assert receipt.run.snapshot == seen[0].snapshot and receipt.run.undecided == (approval("c1"),)


def test_a_decision_rule_naming_an_unknown_call_is_refused(store: RunStore) -> None:
    store.insert_suspended(suspension("r1"))

    with pytest.raises(ToolCallNotSuspended):
        store.decide(agent_id="support", run_id="r1", rule=lambda run: ("nope", decision()))

    run = store.get_run("r1")
    assert run is not None and run.version == 1


def test_decision_without_claim_leaves_the_run_suspended(store: RunStore) -> None:
    store.insert_suspended(suspension("r1"))

    receipt = store.record_decision(
        agent_id="support", run_id="r1", tool_call_id="call-1", decision=decision(), claim_when_complete=False
    )

    assert receipt.claimed_version is None and receipt.run.status == "suspended"
    assert receipt.run.undecided == ()


def test_resume_decision_keeps_its_data(store: RunStore) -> None:
    store.insert_suspended(suspension("r1", calls=[suspend_call()]))
    resume = decision("resume", resume_data={"environment": "staging", "replicas": 3, "dry_run": False})

    store.record_decision(agent_id="support", run_id="r1", tool_call_id="call-s", decision=resume)

    run = store.get_run("r1")
    assert run is not None and run.calls[0].decision == resume


def test_deciding_another_agents_or_an_unknown_run_is_run_not_found(store: RunStore) -> None:
    store.insert_suspended(suspension("r1"))

    with pytest.raises(RunNotFound):
        store.record_decision(agent_id="billing", run_id="r1", tool_call_id="call-1", decision=decision())
    with pytest.raises(RunNotFound):
        store.record_decision(agent_id="support", run_id="nope", tool_call_id="call-1", decision=decision())

    run = store.get_run("r1")
    assert run is not None and run.version == 1 and run.undecided == run.calls


def test_deciding_an_unknown_call_is_tool_call_not_suspended(store: RunStore) -> None:
    store.insert_suspended(suspension("r1"))

    with pytest.raises(ToolCallNotSuspended):
        store.record_decision(agent_id="support", run_id="r1", tool_call_id="", decision=decision())

    run = store.get_run("r1")
    assert run is not None and run.version == 1


def test_a_decided_call_reports_who_decided_and_when(store: RunStore) -> None:
    store.insert_suspended(suspension("r1", calls=[approval("c1"), approval("c2")]))
    store.record_decision(
        agent_id="support", run_id="r1", tool_call_id="c1", decision=decision(actor="alice", at=T0)
    )

    with pytest.raises(RunAlreadyDecided) as raised:
        store.record_decision(
            agent_id="support", run_id="r1", tool_call_id="c1", decision=decision(actor="bob")
        )

    assert (raised.value.decided_by, raised.value.decided_at) == ("alice", T0)
    run = store.get_run("r1")
    assert run is not None and run.version == 2


def test_deciding_a_claimed_run_is_already_decided(store: RunStore) -> None:
    store.insert_suspended(suspension("r1", calls=[approval("c1"), approval("c2")]))
    store.claim("r1")

    with pytest.raises(RunAlreadyDecided):
        store.record_decision(agent_id="support", run_id="r1", tool_call_id="c1", decision=decision())


def test_eight_threads_racing_on_one_call_make_exactly_one_decision(store: RunStore) -> None:
    store.insert_suspended(suspension("r1"))
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    reported: list[str | None] = []

    def decide(actor: str) -> None:
        barrier.wait()
        try:
            store.record_decision(
                agent_id="support", run_id="r1", tool_call_id="call-1", decision=decision(actor=actor)
            )
        except RunAlreadyDecided as lost:
            outcomes.append("already decided")
            reported.append(lost.decided_by)
        else:
            outcomes.append(f"won by {actor}")

    threads = [threading.Thread(target=decide, args=(f"reviewer-{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1 and outcomes.count("already decided") == 7
    run = store.get_run("r1")
    assert run is not None and run.status == "running" and run.version == 3
    assert run.calls[0].decision is not None and f"won by {run.calls[0].decision.actor}" == winners[0]
    assert reported == [run.calls[0].decision.actor] * 7  # the losers learn who won


def test_eight_threads_deciding_the_eight_calls_of_one_run_all_land_and_one_claims(store: RunStore) -> None:
    calls = [approval(f"c{i}") for i in range(8)]
    store.insert_suspended(suspension("r1", calls=calls))
    barrier = threading.Barrier(8)
    claimed: list[int | None] = []
    failures: list[BaseException] = []

    def decide(i: int) -> None:
        barrier.wait()
        try:
            receipt = store.record_decision(
                agent_id="support",
                run_id="r1",
                tool_call_id=f"c{i}",
                decision=decision(actor=f"reviewer-{i}"),
            )
        except BaseException as exc:  # reported below, not swallowed
            failures.append(exc)
        else:
            claimed.append(receipt.claimed_version)

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    assert sorted(claimed, key=lambda v: v is not None) == [None] * 7 + [10]
    run = store.get_run("r1")
    assert run is not None and (run.status, run.version) == ("running", 10)
    assert [c.decision.actor if c.decision else None for c in run.calls] == [
        f"reviewer-{i}" for i in range(8)
    ]


# -- claims ----------------------------------------------------------------------------------------


def test_claim_is_a_compare_and_swap_on_status_and_version(store: RunStore) -> None:
    store.insert_suspended(suspension("r1"))

    assert store.claim("r1", expected_version=7) is None
    claimed = store.claim("r1", expected_version=1)
    assert claimed is not None
    assert (claimed.status, claimed.version) == ("running", 2)
    assert claimed.snapshot == {"messages": [{"kind": "request", "run": "r1"}]}
    assert store.claim("r1") is None
    assert store.claim("nope") is None


def test_claim_records_the_given_decisions_on_undecided_calls(store: RunStore) -> None:
    store.insert_suspended(suspension("r1", calls=[approval("c1"), approval("c2")]))
    store.record_decision(
        agent_id="support",
        run_id="r1",
        tool_call_id="c1",
        decision=decision(actor="alice"),
        claim_when_complete=False,
    )

    claimed = store.claim(
        "r1", decisions={"c1": decision("decline", actor="mallory"), "c2": decision(actor="bob")}
    )

    assert claimed is not None and claimed.version == 3
    assert [(c.decision.action, c.decision.actor) for c in claimed.calls if c.decision] == [
        ("approve", "alice"),
        ("approve", "bob"),
    ]
    assert store.get_run("r1") == claimed


def test_heartbeat_renews_only_the_current_claim(store: RunStore, clock: Clock) -> None:
    store.insert_suspended(suspension("r1"))
    claimed = store.claim("r1")
    assert claimed is not None
    assert not store.heartbeat("r1", version=claimed.version)  # its continuation has not started
    assert store.start_continuation("r1", version=claimed.version)

    clock.advance(seconds=25)
    assert store.heartbeat("r1", version=claimed.version)
    clock.advance(seconds=25)  # 50 s after the claim, 25 s after the heartbeat: still held

    assert listed_ids(store) == []
    assert not store.heartbeat("r1", version=claimed.version - 1)
    assert not store.heartbeat("nope", version=1)


def test_a_heartbeat_after_the_lease_ran_out_fails_and_the_run_waits_again(
    store: RunStore, clock: Clock
) -> None:
    store.insert_suspended(suspension("r1"))
    claimed = store.claim("r1")
    assert claimed is not None and store.start_continuation("r1", version=claimed.version)

    clock.advance(seconds=31)

    assert not store.heartbeat("r1", version=claimed.version)
    assert not store.finish("r1", version=claimed.version)
    [run], _ = store.list_suspended(RunQuery(agent_id="support"))
    assert (run.run_id, run.interrupted, run.version) == ("r1", True, claimed.version + 1)


def test_finish_deletes_the_run_for_the_current_claim_only(store: RunStore) -> None:
    store.insert_suspended(suspension("r1"))
    assert not store.finish("r1", version=1)  # not claimed
    claimed = store.claim("r1")
    assert claimed is not None
    assert not store.finish("r1", version=claimed.version)  # its continuation has not started
    assert store.start_continuation("r1", version=claimed.version)

    assert not store.finish("r1", version=claimed.version + 1)
    assert store.finish("r1", version=claimed.version)

    assert store.get_run("r1") is None
    assert not store.finish("r1", version=claimed.version)
    assert not store.heartbeat("r1", version=claimed.version)


def test_thread_memory_can_be_read_from_its_latest_runs_only(store: RunStore) -> None:
    for run in range(1, 6):
        store.append_thread_messages("support", "t1", [{"run": run, "i": 0}, {"run": run, "i": 1}])
    store.append_thread_messages("support", "t2", [{"n": "other thread"}])

    assert store.thread_messages("support", "t1", last_runs=2) == [
        {"run": 4, "i": 0},
        {"run": 4, "i": 1},
        {"run": 5, "i": 0},
        {"run": 5, "i": 1},
    ]
    assert store.thread_messages("support", "t1", last_runs=9) == store.thread_messages("support", "t1")
    assert len(store.thread_messages("support", "t1")) == 10
    assert store.thread_messages("support", "missing", last_runs=3) == []


def test_finish_remembers_the_runs_new_messages_on_its_own_thread(store: RunStore) -> None:
    store.append_thread_messages("support", "t1", [{"n": 1}])
    store.insert_suspended(suspension("r1", thread_id="t1"))
    store.insert_suspended(suspension("r2"))
    first, second = store.claim("r1"), store.claim("r2")
    assert first is not None and second is not None
    assert store.start_continuation("r1", version=first.version)
    assert store.start_continuation("r2", version=second.version)

    assert not store.finish("r1", version=first.version + 1, thread_messages=[{"n": "lost claim"}])
    assert store.finish("r1", version=first.version, thread_messages=[{"n": 2}, {"n": 3}])
    assert store.finish("r2", version=second.version, thread_messages=[{"n": "no thread"}])

    assert store.thread_messages("support", "t1") == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert not store.finish("r1", version=first.version, thread_messages=[{"n": "twice"}])
    assert store.thread_messages("support", "t1") == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_resuspend_replaces_calls_and_snapshot_and_keeps_the_run_id(store: RunStore) -> None:
    store.insert_suspended(suspension("r1", thread_id="t1"))
    claimed = store.claim("r1")
    assert claimed is not None
    again = suspension(
        "r1",
        thread_id="t1",
        suspended_at=T0 + timedelta(minutes=3),
        calls=[suspend_call("c9")],
        snapshot={"messages": ["second"]},
    )

    assert store.resuspend(again, expected_version=claimed.version + 1) is None
    run = store.resuspend(again, expected_version=claimed.version)

    assert run is not None
    assert (run.status, run.version, run.interrupted) == ("suspended", 3, False)
    assert run.calls == (suspend_call("c9"),) and run.snapshot == {"messages": ["second"]}
    assert store.get_run("r1") == run
    [listed], _ = store.list_suspended(RunQuery(agent_id="support", thread_id="t1"))
    assert listed.suspended_at == T0 + timedelta(minutes=3) and listed.calls == (suspend_call("c9"),)
    assert store.resuspend(again, expected_version=run.version) is None  # not claimed any more


# -- lease reclaim ---------------------------------------------------------------------------------


def test_an_expired_claim_is_parked_again_interrupted_with_its_decisions_in_history(
    store: RunStore, clock: Clock
) -> None:
    store.insert_suspended(suspension("r1", calls=[approval("c1"), approval("c2")]))
    store.record_decision(
        agent_id="support", run_id="r1", tool_call_id="c1", decision=decision(actor="alice")
    )
    receipt = store.record_decision(
        agent_id="support",
        run_id="r1",
        tool_call_id="c2",
        decision=decision("decline", actor="bob", reason="no"),
    )
    assert receipt.claimed_version is not None
    assert store.start_continuation("r1", version=receipt.claimed_version)

    clock.advance(seconds=29)
    assert listed_ids(store) == []
    clock.advance(seconds=2)
    [run], total = store.list_suspended(RunQuery(agent_id="support"))

    assert total == 1 and run.run_id == "r1"
    assert (run.status, run.interrupted, run.version) == ("suspended", True, receipt.claimed_version + 1)
    assert run.undecided == run.calls == (approval("c1"), approval("c2"))
    assert [(h["tool_call_id"], h["action"], h["actor"], h["reason"]) for h in run.history] == [
        ("c1", "approve", "alice", None),
        ("c2", "decline", "bob", "no"),
    ]
    assert run.history[0]["decided_at"] == T0.isoformat() and run.history[0]["tool_name"] == "refund"
    # The late continuation can no longer change the run.
    assert not store.heartbeat("r1", version=receipt.claimed_version)
    assert not store.finish("r1", version=receipt.claimed_version)
    assert store.resuspend(suspension("r1"), expected_version=receipt.claimed_version) is None
    # And it can be decided again.
    again = store.record_decision(
        agent_id="support", run_id="r1", tool_call_id="c1", decision=decision(actor="carol")
    )
    assert again.run.history == run.history


def test_reclaim_happens_before_a_decision_too(store: RunStore, clock: Clock) -> None:
    store.insert_suspended(suspension("r1"))
    receipt = store.record_decision(
        agent_id="support", run_id="r1", tool_call_id="call-1", decision=decision()
    )
    assert store.start_continuation("r1", version=receipt.claimed_version or 0)
    clock.advance(seconds=31)

    again = store.record_decision(
        agent_id="support", run_id="r1", tool_call_id="call-1", decision=decision(actor="bob")
    )

    assert again.claimed_version == (receipt.claimed_version or 0) + 3
    assert [h["actor"] for h in again.run.history] == ["alice"]


def test_reading_or_claiming_a_run_whose_lease_ran_out_reclaims_it_first(
    store: RunStore, clock: Clock
) -> None:
    store.insert_suspended(suspension("r1"))
    receipt = store.record_decision(
        agent_id="support", run_id="r1", tool_call_id="call-1", decision=decision()
    )
    assert receipt.claimed_version is not None
    assert store.start_continuation("r1", version=receipt.claimed_version)
    clock.advance(seconds=31)

    run = store.get_run("r1")

    assert run is not None
    assert (run.status, run.interrupted, run.version) == ("suspended", True, receipt.claimed_version + 1)
    assert run.undecided == (approval(),)
    assert store.resuspend(suspension("r1"), expected_version=receipt.claimed_version) is None
    claimed = store.claim("r1", expected_version=run.version)
    assert claimed is not None and claimed.status == "running"


def test_inner_runs_under_a_reclaimed_supervisor_run_wait_again(store: RunStore, clock: Clock) -> None:
    store.insert_suspended(suspension("outer", calls=[delegated("d1", "inner")]))
    store.insert_suspended(
        suspension("inner", agent_id="deployer", parent_run_id="outer", calls=[approval("inner-call")])
    )
    store.insert_suspended(
        suspension("untouched", agent_id="deployer", parent_run_id="outer", calls=[approval("x")])
    )
    store.record_decision(
        agent_id="deployer",
        run_id="inner",
        tool_call_id="inner-call",
        decision=decision(),
        claim_when_complete=False,
    )
    receipt = store.record_decision(
        agent_id="support", run_id="outer", tool_call_id="d1:inner-call", decision=decision()
    )
    assert store.start_continuation("outer", version=receipt.claimed_version or 0)

    clock.advance(seconds=31)
    inner = store.get_run("inner")
    untouched = store.get_run("untouched")

    assert inner is not None and untouched is not None
    assert (inner.status, inner.interrupted, inner.version) == ("suspended", True, 3)
    assert inner.undecided == (approval("inner-call"),)
    assert [h["tool_call_id"] for h in inner.history] == ["inner-call"]
    assert (untouched.interrupted, untouched.version, untouched.history) == (False, 1, ())
    outer = store.get_run("outer")
    assert outer is not None and outer.interrupted and outer.status == "suspended"


def test_a_claim_waiting_for_its_continuation_is_never_reclaimed_however_long_it_waits(
    store: RunStore, clock: Clock
) -> None:
    store.insert_suspended(suspension("r1"))
    receipt = store.record_decision(
        agent_id="support", run_id="r1", tool_call_id="call-1", decision=decision(actor="alice")
    )
    version = receipt.claimed_version
    assert version is not None

    clock.advance(seconds=30 * 10)  # ten leases in a queue

    assert listed_ids(store) == [] and store.reclaim_expired() == []
    run = store.get_run("r1")
    assert run is not None and (run.status, run.interrupted) == ("running", False)
    assert store.start_continuation("r1", version=version)
    assert not store.start_continuation("r1", version=version)  # a repeated task does not start it again
    assert store.mark_tool_started("r1", "call-1", version=version)
    assert store.finish("r1", version=version)


def test_reclaiming_expired_claims_at_once_names_the_runs_parked_again(store: RunStore, clock: Clock) -> None:
    for run_id in ("stopped", "queued", "alive"):
        store.insert_suspended(suspension(run_id))
        receipt = store.record_decision(
            agent_id="support", run_id=run_id, tool_call_id="call-1", decision=decision()
        )
        if run_id != "queued":
            assert store.start_continuation(run_id, version=receipt.claimed_version or 0)
    clock.advance(seconds=20)
    alive = store.get_run("alive")
    assert alive is not None and store.heartbeat("alive", version=alive.version)
    clock.advance(seconds=11)

    assert store.reclaim_expired() == [("support", "stopped")]
    assert store.reclaim_expired() == []
    stopped = store.get_run("stopped")
    assert stopped is not None and (stopped.status, stopped.interrupted) == ("suspended", True)
    assert [r.status for r in (store.get_run("queued"), store.get_run("alive")) if r] == ["running"] * 2


def test_a_sub_agents_run_claimed_but_not_started_waits_again_with_its_supervisor(
    store: RunStore, clock: Clock
) -> None:
    store.insert_suspended(suspension("outer", calls=[delegated("d1", "inner")]))
    store.insert_suspended(
        suspension("inner", agent_id="deployer", parent_run_id="outer", calls=[approval("inner-call")])
    )
    receipt = store.record_decision(
        agent_id="support", run_id="outer", tool_call_id="d1:inner-call", decision=decision()
    )
    assert store.start_continuation("outer", version=receipt.claimed_version or 0)
    # The supervisor's continuation claims the inner run and dies before continuing it.
    assert store.claim("inner", decisions={"inner-call": decision()}) is not None

    clock.advance(seconds=31)
    inner = store.get_run("inner")

    assert inner is not None
    assert (inner.status, inner.interrupted) == ("suspended", True)
    assert inner.undecided == (approval("inner-call"),)
    assert [h["tool_call_id"] for h in inner.history] == ["inner-call"]


# -- thread memory ---------------------------------------------------------------------------------


def test_thread_memory_is_per_agent_and_thread_oldest_first(store: RunStore) -> None:
    store.append_thread_messages("support", "t1", [{"n": 1}, {"n": 2}])
    store.append_thread_messages("support", "t2", [{"n": "other thread"}])
    store.append_thread_messages("billing", "t1", [{"n": "other agent"}])
    store.append_thread_messages("support", "t1", [])
    store.append_thread_messages("support", "t1", [{"n": 3}])

    assert store.thread_messages("support", "t1") == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert store.thread_messages("support", "missing") == []
