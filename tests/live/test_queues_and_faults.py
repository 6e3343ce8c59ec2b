"""Queues and faults (issue 32), with real processes: a ``db_worker`` that falls behind its queue, and
one killed while its tool runs.

- Approvals queued for longer than the run lease are carried out, never offered again as
  "interrupted": a decided run waits in the queue without a lease, and its continuation takes one
  when it starts.
- A run whose continuation died shows as stopped on its own: the sweep of another worker, or a web
  server's watch, parks it again, interrupted, with its audit row and its deciders told, though
  nobody lists the inbox.

The parent reads the database directly (no Django, no listing); the children are ``manage.py``
commands and workers forked from the zygote (``tests/support/server.py``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support import server, services

pytestmark = [pytest.mark.slow]

#: Short, so that the worker below falls behind by more than a lease; long enough for a started
#: continuation to renew its lease on a loaded machine.
LEASE_SECONDS = 4
QUEUED = 40
#: Each continuation's tool takes this long: the last of the queue starts well after a lease.
TOOL_SECONDS = 0.3


@pytest.fixture(params=services.database_params())
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'queues.sqlite3'}"
        return
    with server.postgres_database(services.require_postgres()) as url:
        yield url


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    tool_log = tmp_path / "tool-starts.log"
    tool_log.touch()
    env = server.env_for(database_url, tasks_backend="database")
    env.update(
        AGENTS_RUNTIME="tests.support.crash_agents:runtime",
        RUN_LEASE_SECONDS=str(LEASE_SECONDS),
        CRASH_TOOL_LOG=str(tool_log),
        COUNTERSIGN_OPEN_VISIBILITY="true",
    )
    server.prepare_database(env)
    return env


def _query(database_url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    parts = urlsplit(database_url)
    if parts.scheme == "sqlite":
        with sqlite3.connect(parts.path) as conn:
            return conn.execute(sql.replace("%s", "?"), params).fetchall()
    import psycopg

    with psycopg.connect(database_url) as conn:
        return conn.execute(sql, params).fetchall()


def _outcomes(database_url: str) -> list[str]:
    return [row[0] for row in _query(database_url, "SELECT outcome FROM approvals_auditentry ORDER BY id")]


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _approve_all(env: dict[str, str], count: int) -> list[str]:
    """``count`` new runs of the ops agent, each approved: their continuations go to the task queue."""
    script = (
        "import json\n"
        "from asgiref.sync import async_to_sync\n"
        "from approvals import agents\n"
        "agent = agents.get('ops')\n"
        "ids = []\n"
        f"for i in range({count}):\n"
        "    run = async_to_sync(agent.generate)(f'deploy {i}')\n"
        "    call = run.tool_calls[0].tool_call_id\n"
        "    stream = async_to_sync(agent.approve_tool_call)(run_id=run.run_id, tool_call_id=call,"
        " actor='reviewer')\n"
        "    assert async_to_sync(stream.result)().status == 'running'\n"
        "    ids.append(run.run_id)\n"
        "print(json.dumps(ids))\n"
    )
    return list(json.loads(server.manage(env, "shell", "-c", script).strip().splitlines()[-1]))


def _listed(env: dict[str, str]) -> int:
    """How many runs a reviewer listing the inbox now sees waiting (a process of its own)."""
    script = (
        "from asgiref.sync import async_to_sync\n"
        "from approvals import agents\n"
        "print(async_to_sync(agents.get('ops').list_suspended_runs)().total)\n"
    )
    return int(server.manage(env, "shell", "-c", script).strip().splitlines()[-1])


def test_approvals_queued_longer_than_the_lease_are_carried_out_not_interrupted(
    env: dict[str, str], artifacts_dir: Path
) -> None:
    db = env["DATABASE_URL"]
    run_ids = _approve_all(env, QUEUED)
    worker = server.db_worker(
        {**env, "CRASH_TOOL_SECONDS": str(TOOL_SECONDS)}, artifacts_dir / "queue-worker.log", "slow"
    )
    with server.running(worker):
        # The worker is more than a lease behind the last approvals; a reviewer opens the inbox.
        time.sleep(LEASE_SECONDS + 1)
        listed_while_behind = _listed(env)
        _wait_for(
            lambda: not _query(db, "SELECT 1 FROM approvals_run WHERE status = 'running'"),
            f"the worker to get through {QUEUED} continuations",
        )

    outcomes = _outcomes(db)
    interrupted = outcomes.count("interrupted")
    assert (listed_while_behind, interrupted) == (0, 0), f"{interrupted} of {QUEUED} interrupted"
    assert outcomes == ["completed"] * QUEUED
    ended = _query(db, "SELECT run_id, status FROM approvals_ended_run")
    assert sorted(ended) == sorted((run_id, "completed") for run_id in run_ids)
    starts = Path(env["CRASH_TOOL_LOG"]).read_text().split()
    assert len(starts) == len(set(starts)) == QUEUED  # each approved tool ran, once


@pytest.mark.parametrize("watcher", ["worker", "server"])
def test_a_run_whose_worker_was_killed_shows_as_stopped_with_nobody_listing_the_inbox(
    env: dict[str, str], artifacts_dir: Path, watcher: str
) -> None:
    db = env["DATABASE_URL"]
    server.manage(
        env,
        "shell",
        "-c",
        "from django.contrib.auth.models import User\n"
        f"User.objects.filter(username={server.USERNAME!r}).update(email='reviewer@example.com')",
    )
    tool_log = Path(env["CRASH_TOOL_LOG"])
    doomed = server.db_worker({**env, "CRASH_TOOL_SECONDS": "120"}, artifacts_dir / "doomed.log", "doomed")
    with server.running(doomed):
        [run_id] = _approve_all(env, 1)
        _wait_for(lambda: tool_log.read_text().strip() != "", "the tool to start in the worker")
        doomed.kill()  # mid-tool: its lease is no longer renewed
    assert _query(db, "SELECT status FROM approvals_run WHERE run_id = %s", run_id) == [("running",)]

    # Another worker (its sweep) or a web server (it watches for stopped runs where a worker sweeps),
    # and nobody lists the inbox or opens the run.
    if watcher == "worker":
        survivor: server.Process = server.db_worker(env, artifacts_dir / "sweeper.log", "sweeper")
    else:
        survivor = server.Daphne(env, artifacts_dir / "watching-daphne.log")
    with server.running(survivor):
        _wait_for(
            lambda: (
                _query(db, "SELECT status FROM approvals_run WHERE run_id = %s", run_id) == [("suspended",)]
            ),
            "the sweep to park the run again",
            timeout=LEASE_SECONDS + 60,
        )
        _wait_for(
            lambda: bool(_query(db, "SELECT 1 FROM approvals_notificationcall WHERE run_id = %s", run_id)),
            "the deciders to be told the run waits again",
            timeout=30,
        )

    [(interrupted,)] = _query(db, "SELECT interrupted FROM approvals_run WHERE run_id = %s", run_id)
    assert interrupted in (True, 1)
    [(outcome, detail)] = _query(
        db, "SELECT outcome, outcome_detail FROM approvals_auditentry WHERE run_id = %s", run_id
    )
    assert outcome == "interrupted" and "Interrupted after the tool started" in detail
    assert _query(db, "SELECT tool_started_at IS NOT NULL FROM approvals_parked_call") in ([(True,)], [(1,)])
