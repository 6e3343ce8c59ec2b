"""A listing's page is read one of two ways (approvals/store.py, listings): near the start of the listing
(``NEAR_THE_START``) its run rows come straight from the listing's index and are joined with their
calls; further in, the page's run ids are picked from the index first. Both must give exactly the
slice of the whole listing, with every run's calls in order, whatever the filters and the order, and
the same runs, calls and total as each other.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from agents_runtime.store import RunQuery, StoredRun
from approvals.store import DjangoRunStore
from tests.support.store_helpers import T0, Clock, approval, decision, delegated, suspend_call, suspension

pytestmark = pytest.mark.django_db(transaction=True)

#: Every page read from the index (a large bound) or every page picked by run id first (0).
FORMS = {"from the index": 10**9, "by run id": 0}


@pytest.fixture
def store(clock: Clock) -> DjangoRunStore:
    store = DjangoRunStore(timedelta(seconds=30), clock=clock)
    for i in range(24):
        calls = [approval(f"c{i}")]
        if i % 3 == 0:
            calls.append(suspend_call(f"s{i}"))
        if i % 7 == 0:
            calls.append(delegated(f"d{i}", inner_run_id=f"inner-{i}"))
        store.insert_suspended(
            suspension(
                f"run-{i:02d}",
                thread_id=f"thread-{i % 3}",
                resource_id=f"user-{i % 4}",
                parent_run_id="boss-1" if i in (5, 17) else None,
                suspended_at=T0 + timedelta(hours=i // 2),  # pairs share a time: ties by run id
                calls=calls,
            )
        )
    store.insert_suspended(suspension("other-1", agent_id="billing", thread_id="thread-0"))
    # A decided call stays on its run (and is listed with it) while the run still waits on another.
    store.record_decision(agent_id="support", run_id="run-03", tool_call_id="c3", decision=decision(at=T0))
    return store


QUERIES = [
    RunQuery(agent_id="support"),
    RunQuery(agent_id="support", oldest_first=True),
    RunQuery(agent_id="support", thread_id="thread-1"),
    RunQuery(agent_id="support", resource_id="user-2", oldest_first=True),
    RunQuery(agent_id="support", delegated=False),
    RunQuery(agent_id="support", delegated=True),
    RunQuery(agent_id="support", tool_name="ask_details"),
    RunQuery(agent_id="support", created_from=T0 - timedelta(days=1), created_to=T0 + timedelta(days=1)),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("query", QUERIES, ids=lambda q: repr({k: v for k, v in vars(q).items() if v}))
def test_every_page_is_the_slice_of_the_whole_listing(
    store: DjangoRunStore, monkeypatch: pytest.MonkeyPatch, form: str, query: RunQuery
) -> None:
    monkeypatch.setattr("approvals.store.NEAR_THE_START", FORMS[form])
    whole, total = store.list_suspended(query)
    assert total == len(whole) > 0
    for per_page in (1, 5, 50):
        pages = [
            store.list_suspended(replace(query, limit=per_page, offset=page * per_page))
            for page in range(total // per_page + 2)  # past the end too
        ]
        assert {counted for _, counted in pages} == {total}
        assert [run for runs, _ in pages for run in runs] == whole, per_page
        assert pages[-1][0] == []


def test_both_forms_list_the_same_runs_with_the_same_calls(
    store: DjangoRunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed: dict[str, list[tuple[list[StoredRun], int]]] = {}
    for form, bound in FORMS.items():
        monkeypatch.setattr("approvals.store.NEAR_THE_START", bound)
        listed[form] = [
            store.list_suspended(replace(query, limit=4, offset=offset))
            for query in QUERIES
            for offset in (0, 3, 8)
        ]
    assert listed["from the index"] == listed["by run id"]
    # The listing holds every kind of call, in its order on the run.
    runs = {run.run_id: run for pages, _ in listed["by run id"] for run in pages}
    assert [c.tool_call_id for c in runs["run-21"].calls] == ["c21", "s21", "d21:inner-call"]
    assert runs["run-03"].calls[0].decision is not None
