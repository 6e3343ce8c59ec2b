"""Benchmark: server time of the queue-health page against the inbox page, at 100,000 pending runs
and an audit log of 100,000 then 1,000,000 rows, on PostgreSQL.

Uses the database of ``DATABASE_URL`` as it is (create it first: ``createdb -h 127.0.0.1 -U root
cs_health``); its tables are migrated and emptied here. Seeds 100,000 suspended runs of the demo
agent ``ops`` with ``bench/inbox_page.py``'s seeding (one parked call each, parked over the last
week), then audit rows with ``COPY`` (decisions of the last 30 days: approvals, declines, answers,
expiries, votes, lost races and standing-grant approvals by 20 reviewers over the demo agents, each
with when its call parked), folds them into the rollup (``approvals.health.rollup.fold_all``: timed
and reported, as the sweep would do it in the background), and times, with Django's test ``Client``
as a member of Admins, ``/health/`` and ``/agents/ops/?per_page=50`` taking turns request by
request. Then it adds audit rows up to 1,000,000 and times both again.

Targets (issue 14): the health page within 2x the inbox page's p50 in the same run, and its p50 at
1,000,000 audit rows within 1.5x its p50 at 100,000.

Prints a table and writes ``bench/results/health_page.json``.

    DATABASE_URL=postgres://root@127.0.0.1:5432/cs_health .venv/bin/python bench/health_page.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import timedelta
from typing import Any

from _common import ROOT, demo_server_env, p50_p95, worker_report

RESULTS = ROOT / "bench" / "results" / "health_page.json"
PENDING = 100_000
AUDIT_STEPS = (100_000, 1_000_000)
REVIEWERS = [f"reviewer-{i:02d}" for i in range(20)]
TARGET_VS_INBOX = 2.0
TARGET_GROWTH = 1.5
COPY_COLUMNS = (
    "created_at", "parked_at", "username", "agent_id", "run_id", "thread_id", "resource_id",
    "tool_call_id", "tool_name", "action", "reason", "outcome", "outcome_detail", "channel",
)  # fmt: skip


def _setup() -> None:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()


def _empty_tables() -> None:
    from django.db import connection

    from approvals.models import AuditEntry, HealthCount, HealthWatermark, ParkedCallRecord, RunRecord

    tables = [
        m._meta.db_table for m in (ParkedCallRecord, RunRecord, HealthCount, HealthWatermark, AuditEntry)
    ]
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")


def seed_pending(n: int) -> None:
    """``inbox_page.seed``'s runs, parked over the last week (as a live queue's would be)."""
    import inbox_page
    from django.db import connection

    from approvals.models import RunRecord

    inbox_page.seed(n)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {RunRecord._meta.db_table} SET suspended_at = now() - random() * interval '7 days'"
        )
        cursor.execute(f"UPDATE {RunRecord._meta.db_table} SET created_at = suspended_at")
        cursor.execute(f"VACUUM ANALYZE {RunRecord._meta.db_table}")


def seed_audit(n: int, *, seed: int) -> None:
    """``n`` audit rows of the last 30 days, by ``COPY``."""
    from django.db import connection
    from django.utils import timezone

    from approvals import agents
    from approvals.models import AuditEntry

    rng = random.Random(seed)
    now = timezone.now()
    agent_ids = [a.id for a in agents.all_agents()]
    tools = ["deploy_service", "request_change_window", "rollback", "page_oncall"]
    kinds = [
        # (weight, action, outcome, channel, username or None for a reviewer)
        (50, "approve", "completed", "dashboard", None),
        (12, "decline", "completed", "dashboard", None),
        (8, "resume", "suspended_again", "api", None),
        (6, "approve", "continuing", "api", None),
        (6, "expire", "expired", "deadline", ""),
        (6, "approve", "vote_recorded", "dashboard", None),
        (4, "approve", "lost_race", "dashboard", None),
        (8, "approve", "continuing", "grant", "grant #3 of reviewer-01"),
    ]
    weights = [k[0] for k in kinds]
    table = AuditEntry._meta.db_table
    started = time.perf_counter()
    with connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg's own: COPY
        with raw.copy(f"COPY {table} ({', '.join(COPY_COLUMNS)}) FROM STDIN") as copy:
            for i in range(n):
                _, action, outcome, channel, user = rng.choices(kinds, weights)[0]
                at = now - timedelta(seconds=rng.uniform(0, 30 * 86_400))
                waited = rng.expovariate(1 / 900)
                parked = None if outcome == "lost_race" else at - timedelta(seconds=waited)
                username = rng.choice(REVIEWERS) if user is None else user
                tool = rng.choice(tools)
                copy.write_row(
                    (at, parked, username, rng.choice(agent_ids), f"run-{seed}-{i}", "", "",
                     f"call-{i}", tool, action, "", outcome, "", channel)
                )  # fmt: skip
        cursor.execute(f"VACUUM ANALYZE {table}")
    print(f"  copied {n:,} audit rows in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


def fold() -> float:
    from django.db import connection

    from approvals.health import rollup
    from approvals.models import HealthCount

    started = time.perf_counter()
    folded = rollup.fold_all(batch=20_000)
    took = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {HealthCount._meta.db_table}")
    rows = HealthCount.objects.count()
    print(f"  folded {folded:,} rows in {took:.1f} s ({rows:,} rollup rows)", file=sys.stderr, flush=True)
    return took


def _client() -> Any:
    import inbox_page

    return inbox_page._client()


#: case -> (URL, HEALTH_PENDING_CACHE_SECONDS while it is asked for).
CASES = {
    "health": ("/health/", 5.0),
    "health_recount": ("/health/", 0.0),
    "inbox": ("/agents/ops/?per_page=50", 5.0),
}


def _timed(client: Any, *, requests: int, warmup: int) -> dict[str, list[float]]:
    """Wall milliseconds per case, the cases taking turns request by request. ``health`` is the page
    as served (pending calls counted at most every 5 s); ``health_recount`` counts them afresh on
    every request (the page's cost when its cache has just expired)."""
    from django.conf import settings

    def get(url: str, keep: float) -> None:
        settings.HEALTH_PENDING_CACHE_SECONDS = keep
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])

    for _ in range(warmup):
        for url, keep in CASES.values():
            get(url, keep)
    wall: dict[str, list[float]] = {case: [] for case in CASES}
    for _ in range(requests):
        for case, (url, keep) in CASES.items():
            started = time.perf_counter()
            get(url, keep)
            wall[case].append((time.perf_counter() - started) * 1000)
    return wall


def worker(requests: int, warmup: int) -> dict[str, Any]:
    _setup()
    from django.core.management import call_command
    from django.db import connection

    assert connection.vendor == "postgresql", "DATABASE_URL must name a PostgreSQL database"
    call_command("migrate", verbosity=0)
    _empty_tables()
    started = time.perf_counter()
    seed_pending(PENDING)
    print(f"seeded {PENDING:,} pending runs in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    client = _client()
    results = []
    seeded = 0
    for step, total in enumerate(AUDIT_STEPS):
        seed_audit(total - seeded, seed=step)
        seeded = total
        fold_seconds = fold()
        wall = _timed(client, requests=requests, warmup=warmup)
        row: dict[str, Any] = {"backend": "postgresql", "pending": PENDING, "audit_rows": total}
        for case, samples in wall.items():
            row[f"{case}_p50_ms"], row[f"{case}_p95_ms"] = p50_p95(samples)
        row["health_vs_inbox_p50"] = round(row["health_p50_ms"] / row["inbox_p50_ms"], 2)
        row["health_recount_vs_inbox_p50"] = round(row["health_recount_p50_ms"] / row["inbox_p50_ms"], 2)
        row["fold_seconds"] = round(fold_seconds, 1)
        results.append(row)
        print(f"  {total:,} audit rows: {row}", file=sys.stderr, flush=True)
    return {"results": results}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=40, help="timed requests per case (at least 30)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.requests, args.warmup)))
        return
    env = demo_server_env()
    command = [
        sys.executable,
        __file__,
        "--worker",
        "--requests",
        str(args.requests),
        "--warmup",
        str(args.warmup),
    ]
    results: list[dict[str, Any]] = worker_report(command, env)["results"]
    print(f"{'audit rows':>12}  {'case':<16}{'p50 ms':>9}{'p95 ms':>9}{'p50 / inbox':>13}")
    for r in results:
        for case in CASES:
            ratio = r["inbox_p50_ms"] and r[f"{case}_p50_ms"] / r["inbox_p50_ms"]
            print(
                f"{r['audit_rows']:>12,}  {case:<16}{r[f'{case}_p50_ms']:>9.2f}{r[f'{case}_p95_ms']:>9.2f}"
                f"{ratio:>12.2f}x"
            )
    growth = round(results[-1]["health_p50_ms"] / results[0]["health_p50_ms"], 2)
    recount_growth = round(results[-1]["health_recount_p50_ms"] / results[0]["health_recount_p50_ms"], 2)
    print(f"health p50 at {AUDIT_STEPS[-1]:,} vs {AUDIT_STEPS[0]:,} audit rows: {growth:.2f}x")
    print(f"  (pending recounted every request: {recount_growth:.2f}x)")
    worst = max(r["health_vs_inbox_p50"] for r in results)
    vs_inbox = "met" if worst <= TARGET_VS_INBOX else "MISSED"
    flat = "met" if growth <= TARGET_GROWTH else "MISSED"
    print(f"targets: health <= {TARGET_VS_INBOX}x inbox: {vs_inbox} (worst {worst:.2f}x)")
    print(f"         health at 1M <= {TARGET_GROWTH}x at 100k: {flat} ({growth:.2f}x)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    summary = {"results": results, "health_growth_p50": growth, "health_recount_growth_p50": recount_growth}
    RESULTS.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
