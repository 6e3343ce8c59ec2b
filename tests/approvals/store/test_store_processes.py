"""Exactly once, restarts and crashes with real OS processes on one database (SQLite file, PostgreSQL).

Each child is ``python -m tests.support.proc_agents <command>`` (a Runtime on ``DjangoRunStore``
with a scripted model); the tools log one line per execution to a shared file, so "the tool ran
once" is counted across processes. The parent never opens Django's connection: it only reads the
database directly to see a claim that a killed process left behind.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support import services, templates
from tests.support.server import TEST_SETTINGS
from tests.support.zygote import ForkedProcess, zygote

ROOT = Path(__file__).resolve().parents[3]
LOSING_OUTCOMES = {"RunAlreadyDecided", "ToolCallNotSuspended", "RunNotFound"}

pytestmark = pytest.mark.slow


@dataclass
class ProcEnv:
    """A migrated database of its own and a tool log, shared by the children of one test."""

    database_url: str
    tool_log: Path
    tmp: Path
    lease_seconds: float = 300

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": TEST_SETTINGS,
            "DATABASE_URL": self.database_url,
            "PROC_TOOL_LOG": str(self.tool_log),
            "PROC_LEASE_SECONDS": str(self.lease_seconds),
            "LOG_LEVEL": "WARNING",
            **extra,
        }

    def spawn(self, *args: str, **extra_env: str) -> subprocess.Popen[str] | ForkedProcess:
        """``python -m tests.support.proc_agents ARGS``, in a process forked from the zygote."""
        return zygote.popen(
            [sys.executable, "-m", "tests.support.proc_agents", *args],
            cwd=ROOT,
            env=self.env(**extra_env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str, **extra_env: str) -> dict[str, Any]:
        return output_of(self.spawn(*args, **extra_env))

    def tool_lines(self, prefix: str) -> list[str]:
        if not self.tool_log.exists():
            return []
        return [line for line in self.tool_log.read_text().splitlines() if line.startswith(prefix)]

    def run_status(self, run_id: str) -> str | None:
        """The run's status read straight from the database (no Django in the parent)."""
        sql = "SELECT status FROM approvals_run WHERE run_id = %s"
        parts = urlsplit(self.database_url)
        if parts.scheme == "sqlite":
            with sqlite3.connect(parts.path) as conn:
                row = conn.execute(sql.replace("%s", "?"), (run_id,)).fetchone()
        else:
            import psycopg

            with psycopg.connect(self.database_url) as conn:
                row = conn.execute(sql, (run_id,)).fetchone()
        return None if row is None else str(row[0])


def output_of(process: subprocess.Popen[str] | ForkedProcess, timeout: float = 120) -> dict[str, Any]:
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"child failed ({process.returncode}):\n{stderr}"
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def migrate(database_url: str) -> None:
    """What ``manage.py migrate`` makes of the new database: a copy of a database it made once."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": TEST_SETTINGS, "DATABASE_URL": database_url}
    templates.migrated(database_url, env)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'procs.sqlite3'}"
    migrate(url)
    yield url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A dedicated database on the server of ``DATABASE_URL``, created and dropped around the test."""
    import psycopg

    base = urlsplit(services.require_postgres())
    name = f"countersign_procs_{uuid.uuid4().hex[:12]}"
    admin_url = urlunsplit(base._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(base._replace(path=f"/{name}"))
    try:
        migrate(url)
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=services.database_params())
def procs(request: pytest.FixtureRequest, tmp_path: Path) -> ProcEnv:
    url = request.getfixturevalue(f"{request.param}_url")
    return ProcEnv(database_url=url, tool_log=tmp_path / "tools.log", tmp=tmp_path)


def test_eight_processes_racing_to_approve_one_call_run_the_tool_once(procs: ProcEnv) -> None:
    [run] = procs.run("start", "--prompt", "refund race-1")["runs"]
    assert run["status"] == "suspended"
    go = procs.tmp / "go"
    ready = [procs.tmp / f"ready-{i}" for i in range(8)]
    children = [
        procs.spawn(
            "approve",
            "--run",
            run["run_id"],
            "--call",
            "rf-race-1",
            "--actor",
            f"reviewer-{i}",
            "--ready",
            str(ready[i]),
            "--go",
            str(go),
        )
        for i in range(8)
    ]
    wait_until(lambda: all(path.exists() for path in ready), timeout=120, what="8 children ready")
    go.touch()  # all eight race from here

    outcomes = [output_of(child) for child in children]

    winners = [o for o in outcomes if o["outcome"] == "decided"]
    assert len(winners) == 1, outcomes
    assert (winners[0]["status"], winners[0]["text"]) == ("success", "done: refunded 42 for race-1")
    assert {o["outcome"] for o in outcomes if o is not winners[0]} <= LOSING_OUTCOMES, outcomes
    assert len(procs.tool_lines("ran refund")) == 1
    assert procs.run("list")["runs"] == []


def test_a_fresh_process_lists_and_decides_the_runs_another_process_suspended(procs: ProcEnv) -> None:
    first = procs.run(
        "start",
        "--thread",
        "t-restart",
        "--prompt",
        "refund r-a",
        "--prompt",
        "refund r-b",
        "--prompt",
        "ask r-c",
    )  # ...and that process has exited
    run_ids = {r["run_id"] for r in first["runs"]}
    assert {r["status"] for r in first["runs"]} == {"suspended"} and len(run_ids) == 3

    listed = procs.run("list", "--thread", "t-restart")["runs"]

    assert listed == first["listing"]
    assert {r["run_id"] for r in listed} == run_ids
    by_call = {r["tool_calls"][0]["tool_call_id"]: r["run_id"] for r in listed}
    assert set(by_call) == {"rf-r-a", "rf-r-b", "ask-r-c"}
    approved = procs.run("approve", "--run", by_call["rf-r-a"], "--call", "rf-r-a")
    declined = procs.run("decline", "--run", by_call["rf-r-b"], "--call", "rf-r-b", "--reason", "over budget")
    resumed = procs.run(
        "resume", "--run", by_call["ask-r-c"], "--call", "ask-r-c", "--data", '{"environment": "prod"}'
    )

    assert (approved["status"], approved["text"]) == ("success", "done: refunded 42 for r-a")
    assert (declined["status"], declined["text"]) == ("success", "done: over budget")
    assert (resumed["status"], resumed["text"]) == ("success", "done: using prod for r-c")
    assert [line.split()[4] for line in procs.tool_lines("ran refund")] == ["r-a"]
    assert len(procs.tool_lines("ran ask_environment")) == 1
    assert procs.run("list", "--thread", "t-restart")["runs"] == []


def test_a_run_claimed_by_a_killed_process_is_offered_again_after_the_lease(procs: ProcEnv) -> None:
    procs.lease_seconds = 3
    [run] = procs.run("start", "--prompt", "refund crash-1")["runs"]
    run_id = run["run_id"]
    release = procs.tmp / "release"
    doomed = procs.spawn(
        "approve", "--run", run_id, "--call", "rf-crash-1", "--actor", "doomed", PROC_BLOCK_FILE=str(release)
    )
    wait_until(lambda: bool(procs.tool_lines("started refund")), timeout=120, what="the tool to start")

    doomed.send_signal(signal.SIGKILL)  # kill -9 while the tool runs and the run is claimed
    doomed.communicate(timeout=30)
    assert procs.run_status(run_id) == "running"

    wait_until(lambda: bool(procs.run("list")["runs"]), timeout=60, what="the run to be listed again")
    [listed] = procs.run("list")["runs"]
    shown = procs.run("show", "--run", run_id)["run"]

    assert (listed["run_id"], listed["interrupted"]) == (run_id, True)
    assert [c["tool_call_id"] for c in listed["tool_calls"]] == ["rf-crash-1"]
    assert shown["status"] == "suspended" and shown["has_snapshot"] and shown["undecided"] == ["rf-crash-1"]
    assert [(h["tool_call_id"], h["action"], h["actor"]) for h in shown["history"]] == [
        ("rf-crash-1", "approve", "doomed")
    ]

    # The tool had started: the call says so, and running it again must be confirmed.
    assert listed["tool_calls"][0]["interrupted_after_start"] is True
    refused = procs.run("approve", "--run", run_id, "--call", "rf-crash-1", "--actor", "second")
    assert refused["outcome"] == "RerunNotConfirmed"
    again = procs.run(
        "approve", "--run", run_id, "--call", "rf-crash-1", "--actor", "second", "--confirm-rerun"
    )

    assert (again["status"], again["text"]) == ("success", "done: refunded 42 for crash-1")
    assert len(procs.tool_lines("ran refund")) == 1  # the killed attempt never finished its tool
    assert procs.run("list")["runs"] == [] and procs.run_status(run_id) is None


def test_an_expiry_racing_approvals_in_eight_processes_decides_once(procs: ProcEnv) -> None:
    [run] = procs.run("start", "--prompt", "refund late-1", "--approve-after", "0.2")["runs"]
    assert run["status"] == "suspended"
    time.sleep(0.3)  # past its deadline: the expiry may win now
    go = procs.tmp / "go"
    ready = [procs.tmp / f"ready-{i}" for i in range(8)]
    children = [
        procs.spawn(
            *(("expire",) if i % 2 else ("approve", "--run", run["run_id"], "--call", "rf-late-1")),
            "--ready",
            str(ready[i]),
            "--go",
            str(go),
        )
        for i in range(8)
    ]
    wait_until(lambda: all(path.exists() for path in ready), timeout=120, what="8 children ready")
    go.touch()

    outcomes = [output_of(child) for child in children]

    winners = [o for o in outcomes if o["outcome"] == "decided"]
    assert len(winners) == 1, outcomes
    assert {o["outcome"] for o in outcomes if o is not winners[0]} <= LOSING_OUTCOMES | {"nothing due"}
    assert len(procs.tool_lines("ran refund")) == 1
    assert procs.run("list")["runs"] == []
