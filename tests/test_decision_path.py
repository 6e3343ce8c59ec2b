"""The walk of one decision: the project files a dashboard Approve enters, in the order it enters them.

One htmx Approve of a plain needs-approval call, its continuation run inline to the end, traced with
``sys.monitoring`` (every thread: the runtime runs on the request's event loop thread and the store
on database threads; not the app's background threads, whose work an earlier step may have set
going). On the reference set-up (SQLite and the in-process channel layer, as ``make run`` serves)
the ordered list of first-party files is compared with ``decision_path.txt``: a longer path shows up
in review, as a change to that file; ``docs/architecture.md`` prints the same list. On PostgreSQL or
Redis the store and the live layer take other files: there only the count is bounded.
A failure prints the walk as it is now.

The SQL statements the Approve sends are counted on the same request (every connection, every
thread), so the cost cannot creep back either.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType
from typing import Any
from urllib.parse import urlencode

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection
from django.test import AsyncClient, Client

from approvals.live import events as live_events
from tests.approvals.conftest import (  # (the dashboard's fixtures, for a test at the top of the tree)
    agents,
    client_for,
    reviewer,
    reviewer_client,
)
from tests.support.queries import count_queries, in_background, thread_hops
from tests.support.runtime_fixtures import DashboardAgents

__all__ = ["agents", "client_for", "reviewer", "reviewer_client"]

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = Path(__file__).with_name("decision_path.txt")
#: The packages whose files count (not the tests, not the test agents' tools).
FIRST_PARTY = ("agents_runtime", "approvals", "config")
#: The most files one Approve may enter: today's walk (the one-door issue asks for 20).
MOST_FILES = 23
#: What PostgreSQL (its prepared statements, the pool) and Redis (the channel layer) add.
EXTRA_FILES_ELSEWHERE = 3
#: The most SQL statements one Approve may send, by database (the floor issue asks for 8 on both):
#: today's counts; SQLite's decision and its end are several statements each, where PostgreSQL sends one.
MOST_STATEMENTS = {"postgresql": 8, "sqlite": 16}
#: The most functions one Approve over ASGI sends from the event loop to a thread (each a round trip
#: through the executor), today's: Django's request signals and the response's close, the view, the
#: store's three steps, the endpoints' read; on the reference set-up, also the live events' outbox rows
#: (its channel layer cannot leave the process: the decision's event, then the continuation's events
#: with its output), which PostgreSQL with Redis does not write.
MOST_HOPS = 9


@contextmanager
def files_entered() -> Iterator[list[str]]:
    """The first-party files whose code runs inside the block, in the order first entered."""
    entered: list[str] = []
    seen: set[str] = set()
    prefixes = tuple(str(ROOT / name) + "/" for name in FIRST_PARTY)

    def started(code: CodeType, offset: int) -> Any:
        if in_background():
            return None  # (not DISABLE: that would hide the code from the request's threads too)
        name = code.co_filename
        if name not in seen and name.startswith(prefixes):
            seen.add(name)
            entered.append(str(Path(name).relative_to(ROOT)))
        return sys.monitoring.DISABLE  # once per code object is enough

    tool = sys.monitoring.PROFILER_ID
    sys.monitoring.use_tool_id(tool, "decision-path")
    try:
        sys.monitoring.register_callback(tool, sys.monitoring.events.PY_START, started)
        sys.monitoring.restart_events()
        sys.monitoring.set_events(tool, sys.monitoring.events.PY_START)
        try:
            yield entered
        finally:
            sys.monitoring.set_events(tool, 0)
            sys.monitoring.register_callback(tool, sys.monitoring.events.PY_START, None)
    finally:
        sys.monitoring.free_tool_id(tool)


def _approve(client: Client | AsyncClient, agents: DashboardAgents) -> Callable[[], Any]:
    """One htmx Approve of a new run's call, url-encoded as htmx posts it, through ``client``'s
    handler: the test client's WSGI one, or the ASGI one Daphne serves (``AsyncClient``)."""
    run = agents.start("helpdesk", "refund first")
    (call,) = run.tool_calls
    post = async_to_sync(client.post) if isinstance(client, AsyncClient) else client.post

    def approve() -> Any:
        return post(
            f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve",
            urlencode({"agent": "helpdesk", "next": "/agents/helpdesk/"}),
            content_type="application/x-www-form-urlencoded",
            headers={"HX-Request": "true"},
        )

    return approve


def test_one_dashboard_approve_enters_the_files_on_record(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    _approve(reviewer_client, agents)()  # warm: imports, compiled statements, caches
    approve = _approve(reviewer_client, agents)

    with files_entered() as entered:
        response = approve()

    assert response.status_code == 200 and "Completed" in response.content.decode()
    reference = connection.vendor == "sqlite" and not settings.REDIS_URL
    assert entered == EXPECTED.read_text().split() or not reference, (
        "The files one Approve enters changed: if the change is meant, update tests/decision_path.txt "
        "(and the walk in docs/architecture.md).\nNow:\n" + "\n".join(entered)
    )
    assert len(entered) <= MOST_FILES + (0 if reference else EXTRA_FILES_ELSEWHERE), "\n".join(entered)


@pytest.mark.parametrize("handler", ["wsgi", "asgi"])
def test_one_dashboard_approve_sends_at_most_a_few_statements(
    handler: str,
    agents: DashboardAgents,
    reviewer: Any,
    reviewer_client: Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the test client's WSGI handler and the ASGI one Daphne serves (its middlewares on the
    event loop), the same bound."""
    # The continuation's streamed output is written every OUTPUT_FLUSH_SECONDS while it runs: a
    # machine slow enough to take that long between two chunks writes one row more. Counted here:
    # the statements of the path, not the machine's speed (the final flush is written either way).
    monkeypatch.setattr(live_events, "OUTPUT_FLUSH_SECONDS", 60.0)
    client: Client | AsyncClient = reviewer_client
    if handler == "asgi":
        client = AsyncClient()
        async_to_sync(client.aforce_login)(reviewer)
    _approve(client, agents)()
    approve = _approve(client, agents)

    with count_queries(background=False) as statements:
        response = approve()

    assert response.status_code == 200 and "Completed" in response.content.decode()
    most = MOST_STATEMENTS[connection.vendor]
    assert len(statements) <= most, f"{len(statements)} statements on {connection.vendor}:\n" + "\n".join(
        statements.sql
    )


def test_one_dashboard_approve_over_asgi_goes_to_a_thread_a_few_times(
    agents: DashboardAgents, reviewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ASGI handler Daphne serves: the request's sync parts and its database reads and writes
    go to the request's thread, the rest stays on the event loop; what goes, by name."""
    monkeypatch.setattr(live_events, "OUTPUT_FLUSH_SECONDS", 60.0)  # (as above)
    client = AsyncClient()
    async_to_sync(client.aforce_login)(reviewer)
    _approve(client, agents)()
    approve = _approve(client, agents)

    with thread_hops() as hops:
        response = approve()

    assert response.status_code == 200 and "Completed" in response.content.decode()
    assert len(hops) <= MOST_HOPS, f"{len(hops)} hops:\n" + "\n".join(hops)


def test_the_architecture_document_prints_the_walk_on_record() -> None:
    document = (ROOT / "docs" / "architecture.md").read_text()
    walk = EXPECTED.read_text()
    assert "```\n" + walk in document, (
        "docs/architecture.md shows another walk than tests/decision_path.txt: copy the list there"
    )


def test_the_architecture_document_stays_short() -> None:
    words = len((ROOT / "docs" / "architecture.md").read_text().split())
    assert words <= 1000, f"docs/architecture.md has {words} words: say less, link the rest"
