"""A worker killed while an approved tool runs: the call comes back marked, and running it again is
confirmed on purpose (issue: "A run must never be re-offered after its tool ran, without saying so").

Real processes: Daphne serves the pages, a ``db_worker`` continues the approved run and is killed
with SIGKILL while the tool runs; after the lease the call is offered again as "interrupted after
the tool started", the audit log says so, Approve needs "Run it again" ticked, and a second worker
runs the tool with the same ``tool_call_id``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from playwright.sync_api import expect

from tests.live.conftest import log_in
from tests.support import server, services
from tests.support.card_rows import APPROVE

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.e2e]

WAIT = 20_000
#: Long enough for a started worker to take the task, short enough to wait out.
LEASE_SECONDS = 15


@pytest.fixture
def cluster(artifacts_dir: Path, tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    tool_log = tmp_path / "tool-starts.log"
    tool_log.touch()
    with server.postgres_database(services.require_postgres()) as database_url:
        env = server.env_for(database_url, tasks_backend="database")
        env.update(
            AGENTS_RUNTIME="tests.support.crash_agents:runtime",
            RUN_LEASE_SECONDS=str(LEASE_SECONDS),
            CRASH_TOOL_LOG=str(tool_log),
            COUNTERSIGN_OPEN_VISIBILITY="true",
        )
        server.prepare_database(env)
        yield env, tool_log


def _wait_for(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _started(worker: server.Process) -> bool:
    # Log files are kept between runs: only this start's line counts.
    return "Starting worker" in worker.log().rsplit("=== start", 1)[-1]


def _audit(database_url: str, run_id: str) -> list[tuple[str, str, str, str]]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT username, action, outcome, outcome_detail FROM approvals_auditentry"
            " WHERE run_id = %s ORDER BY created_at, id",
            (run_id,),
        ).fetchall()
    return [tuple(row) for row in rows]


def _continuing(page: Any) -> Any:
    """What says the run goes on in a worker: the decision's outcome, or, once the worker started it
    and the page heard so, the run page's heading (whichever the page shows when it is looked at)."""
    return page.locator(".outcome, h2").filter(has_text=re.compile(r"[Cc]ontinuing"))


def test_killed_worker_leaves_the_call_marked_and_a_rerun_needs_confirming(
    cluster: tuple[dict[str, str], Path], artifacts_dir: Path, browser: Any
) -> None:
    env, tool_log = cluster
    run_id = server.start_run(env, "ops", "deploy the api")
    web = server.Daphne(env, artifacts_dir / "crash-daphne.log")
    doomed = server.db_worker(
        {**env, "CRASH_TOOL_SECONDS": "120"}, artifacts_dir / "crash-worker-1.log", "w1"
    )
    with server.running(doomed, web):
        _wait_for(lambda: _started(doomed), "the first worker to start", timeout=60)
        page = log_in(browser, web.url, server.USERNAME, server.PASSWORD, next_path=f"/runs/{run_id}/")
        page.get_by_role("button", name=APPROVE).click()
        expect(_continuing(page)).not_to_have_count(0, timeout=WAIT)
        # The worker took the task and the tool started; then the worker dies mid-tool.
        _wait_for(lambda: tool_log.read_text().strip() != "", "the tool to start in the first worker")
        doomed.kill()

        time.sleep(LEASE_SECONDS + 1)  # the claim runs out; the next read reclaims the run
        page.goto(f"/runs/{run_id}/")
        warning = page.locator(".rerun-warning")
        expect(warning).to_contain_text("Interrupted after the tool started — it may have run", timeout=WAIT)
        first_row, *_ = _audit(env["DATABASE_URL"], run_id)
        assert first_row[:3] == (server.USERNAME, "approve", "interrupted")
        assert "Interrupted after the tool started" in first_row[3]

        # A plain Approve is not enough: the browser asks for the box, and nothing is decided.
        approve = page.get_by_role("button", name=APPROVE)
        approve.click()
        page.wait_for_timeout(1000)
        expect(warning).to_be_visible()
        assert len(_audit(env["DATABASE_URL"], run_id)) == 1

        rescuer = server.db_worker(env, artifacts_dir / "crash-worker-2.log", "w2")
        with server.running(rescuer):
            _wait_for(lambda: _started(rescuer), "the second worker to start", timeout=60)
            page.locator(".decide").get_by_label("Run it again").check()
            approve.click()
            expect(_continuing(page)).not_to_have_count(0, timeout=WAIT)
            _wait_for(
                lambda: (
                    [row[2] for row in _audit(env["DATABASE_URL"], run_id)] == ["interrupted", "completed"]
                ),
                "the second approval to complete",
            )

    starts = tool_log.read_text().split()
    # Two executions, one idempotency key: the tool can tell the second is a repeat.
    assert len(starts) == 2 and starts[0] == starts[1]
