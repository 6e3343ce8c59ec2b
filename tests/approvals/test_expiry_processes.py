"""An expiry racing approvals across OS processes on one database (SQLite file, PostgreSQL).

The children and fixtures are those of ``test_store_processes``: four processes approve a call
while four run the expiry sweep past its deadline; the run's deadline approves, so the tool must
run exactly once whoever wins, and exactly one of the eight records the decision.
"""

from __future__ import annotations

import time

import pytest

from tests.approvals.test_store_processes import (  # noqa: F401  (fixtures)
    LOSING_OUTCOMES,
    ProcEnv,
    output_of,
    postgres_url,
    procs,
    sqlite_url,
    wait_until,
)

pytestmark = pytest.mark.slow


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
