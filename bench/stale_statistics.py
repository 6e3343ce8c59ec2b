"""Benchmark: the pages in deadline order while PostgreSQL's statistics predate the deadlines.

Seeds N waiting runs of ``ops`` as ``bench/inbox_page.py`` does (no call has a deadline), takes the
planner's statistics, turns autovacuum off on the calls' table, and gives a tenth of the calls a
deadline each (all different). Until the next ANALYZE the planner believes almost no call has a
deadline: what a desk sees for a while after a rule or an import set deadlines on many waiting calls
at once. Each page is then timed with those statistics ("stale") and again after ANALYZE ("fresh"),
the fresh figure being the stale one's floor: the same page, the same rows, planned with the truth.

- ``queue``: the reviewer's queue (``/queue/``), due calls first
- ``queue, thread filter``: the same for one thread of 500 (``/queue/?thread=release-123``)
- ``inbox by deadline``: an agent's inbox in deadline order (``/agents/ops/?sort=deadline``)
- ``inbox by deadline, page 20``: the same, 1,000 runs in

A request that takes longer than ``--timeout`` seconds is cut off by PostgreSQL's
``statement_timeout`` and its case stops there ("timed out"). Prints a table and writes
``bench/results/stale_statistics.json``. PostgreSQL only (``DATABASE_URL``'s server, default the local
one):

    .venv/bin/python bench/stale_statistics.py --sizes 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from _common import ROOT, demo_server_env, p50_p95, scratch_database, worker_report

RESULTS = ROOT / "bench" / "results" / "stale_statistics.json"
PATHS = {
    "queue": "/queue/",
    "queue, thread filter": "/queue/?thread=release-123",
    "inbox by deadline": "/agents/ops/?per_page=50&sort=deadline",
    "inbox by deadline, page 20": "/agents/ops/?per_page=50&sort=deadline&page=20",
}
#: One call in this many gains a deadline.
DUE_EVERY = 10


def worker(n: int, requests: int, timeout: float) -> list[dict[str, Any]]:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    import inbox_page
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    inbox_page.seed(n)
    seeded = time.perf_counter() - started
    print(f"seeded {n:,} runs in {seeded:.1f} s", file=sys.stderr, flush=True)
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER DATABASE {connection.settings_dict['NAME']} SET statement_timeout = %s",
            [f"{int(timeout * 1000)}ms"],
        )
        cursor.execute("ALTER TABLE approvals_parked_call SET (autovacuum_enabled = false)")
        cursor.execute(
            "UPDATE approvals_parked_call SET expires_at = now() + id * interval '1 second'"
            f" WHERE id % {DUE_EVERY} = 0"
        )
    connection.close()
    connection.close_pool()  # (the timeout applies to new sessions: not the pool's)
    client = inbox_page._client()
    results = [_row(n, case, "stale", _timed(client, path, requests)) for case, path in PATHS.items()]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE approvals_parked_call")
        cursor.execute("ANALYZE approvals_run")
    results += [_row(n, case, "fresh", _timed(client, path, requests)) for case, path in PATHS.items()]
    return results


def _row(n: int, case: str, statistics: str, timed: dict[str, Any]) -> dict[str, Any]:
    """One row of the results (``bench/pair.py`` tells rows apart by backend, n and case)."""
    return {"backend": "postgresql", "n": n, "case": f"{case}, {statistics} statistics", **timed}


def _timed(client: Any, path: str, requests: int) -> dict[str, Any]:
    from django.db import OperationalError

    samples: list[float] = []
    for i in range(requests + 2):  # the first two untimed
        started = time.perf_counter()
        try:
            response = client.get(path)
        except OperationalError as exc:  # (the statement timeout)
            print(f"{path}: {exc}".strip(), file=sys.stderr, flush=True)
            return {"timed_out": True, "p50_ms": None, "p95_ms": None}
        assert response.status_code == 200, (path, response.status_code)
        if i >= 2:
            samples.append((time.perf_counter() - started) * 1000)
    p50, p95 = p50_p95(samples)
    return {"timed_out": False, "p50_ms": p50, "p95_ms": p95}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000", help="comma-separated run counts, e.g. 100000,1000000")
    parser.add_argument("--requests", type=int, default=20, help="timed requests per case")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a request may take")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(int(args.sizes), args.requests, args.timeout)))
        return
    rows: list[dict[str, Any]] = []
    for n in [int(size) for size in args.sizes.split(",")]:
        with scratch_database("postgres", "countersign_bench_stale") as database_url:
            env = demo_server_env(DATABASE_URL=database_url)
            command = [sys.executable, __file__, "--worker", "--sizes", str(n)]
            command += ["--requests", str(args.requests), "--timeout", str(args.timeout)]
            rows += worker_report(command, env)
    print(f"{'n':>10}  {'case':<52}{'p50 ms':>9}{'p95 ms':>9}")
    for row in rows:
        figures = (
            f"  timed out (> {args.timeout:.0f} s)"
            if row["timed_out"]
            else f"{row['p50_ms']:9.2f}{row['p95_ms']:9.2f}"
        )
        print(f"{row['n']:>10,}  {row['case']:<52}{figures}")
    RESULTS.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
