"""What ``.ci/run``'s second phase (PostgreSQL + Redis) runs: every test but those its SQLite phase has
just run exactly as they would run there (marked ``own_sqlite``: tests/support/services.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.server import ROOT
from tests.support.services import SQLITE_PHASE_PASSED

pytestmark = pytest.mark.slow  # (three pytest processes)

MODULES = ["tests/live/test_burst.py", "tests/e2e/test_grants.py"]
POSTGRES = "postgres://root@127.0.0.1:5432/countersign"
#: What the collections below set themselves (CI's second phase runs this test with all three set).
INHERITED = {"DATABASE_URL", "REDIS_URL", SQLITE_PHASE_PASSED}


def _collected(**env: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *MODULES],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k not in INHERITED} | env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_postgresql_phase_leaves_out_what_the_sqlite_phase_ran_and_runs_the_rest() -> None:
    # A developer's run on PostgreSQL, and the SQLite phase: nothing left out.
    everything = _collected(DATABASE_URL=POSTGRES)
    assert _collected(**{SQLITE_PHASE_PASSED: "1"}) == everything
    after_sqlite = _collected(DATABASE_URL=POSTGRES, **{SQLITE_PHASE_PASSED: "1"})

    burst = "test_a_burst_of_mixed_requests_gets_no_error_and_decides_every_call_once"
    assert f"tests/live/test_burst.py::{burst}[sqlite]" in everything
    assert any(test.startswith("tests/e2e/test_grants.py::") for test in everything)
    # Left out: the burst's SQLite variant and the browser tests (their servers run on SQLite). Kept:
    # the burst on PostgreSQL and the tests of PostgreSQL's dropped connections.
    assert sorted(after_sqlite) == sorted(
        test for test in everything if not test.endswith("[sqlite]") and "/e2e/" not in test
    )
    assert f"tests/live/test_burst.py::{burst}[postgres]" in after_sqlite
    assert len(after_sqlite) == 3
