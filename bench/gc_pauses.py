"""Benchmark: how long the garbage collector stops a server process, with its start-up frozen or not.

``config/asgi.py`` ends with ``gc.collect(); gc.freeze()``: what is loaded by then lives as long as
the process, and frozen it is no longer walked by a full collection, which holds the GIL, and so the
event loop (every request and socket of the process), while it runs. Two worker processes, each on
a scratch database (``DATABASE_URL``'s PostgreSQL server if it names one, else a SQLite file) seeded
with ``--runs`` suspended runs (``bench/list_suspended_runs.py``'s seeding): each imports
``config.asgi`` as Daphne does; the second then calls ``gc.unfreeze()``, the process as it was before
the freeze. Each reports the objects frozen, one full ``gc.collect()`` timed, and then, while it
lists agent 0's runs ``--rounds`` times (page 0 of 50, one thread, all of them; ``--runs`` / 5
runs), every collection the interpreter made by itself (``gc.callbacks``): how many full ones, and
their pauses.

Prints a table and writes ``bench/results/gc_pauses.json``.

    .venv/bin/python bench/gc_pauses.py                 # 10,000 runs, 100 rounds: ~1 minute
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

from _common import ROOT, p50_p95, scratch_database, worker_report

RESULTS = ROOT / "bench" / "results" / "gc_pauses.json"


def worker(runs: int, rounds: int, frozen: bool) -> dict[str, Any]:
    import asyncio
    import gc

    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.core.management import call_command
    from list_suspended_runs import _reset_and_seed, _runtime

    call_command("migrate", verbosity=0)
    _reset_and_seed(runs)
    import config.asgi  # noqa: F401  (the server's entry point: it freezes what is loaded)

    if not frozen:
        gc.unfreeze()
    out: dict[str, Any] = {"frozen": frozen, "objects_frozen": gc.get_freeze_count()}
    out["objects_walked_by_a_full_collection"] = len(gc.get_objects())  # the frozen ones are not
    started = time.perf_counter()
    gc.collect()
    out["full_collect_ms"] = round((time.perf_counter() - started) * 1000, 2)

    agent, _ = _runtime()
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    began: list[float] = []

    def on_collect(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began.append(time.perf_counter())
        elif began:
            pauses[info["generation"]].append((time.perf_counter() - began.pop()) * 1000)

    async def workload() -> float:
        started = time.perf_counter()
        for i in range(rounds):
            await agent.list_suspended_runs(per_page=50, page=0)
            await agent.list_suspended_runs(thread_id=f"thread-{i % 50}")
            await agent.list_suspended_runs()
        return time.perf_counter() - started

    gc.callbacks.append(on_collect)
    try:
        seconds = asyncio.run(workload())
    finally:
        gc.callbacks.remove(on_collect)
    full = pauses[2]
    out.update(
        workload_seconds=round(seconds, 2),
        collections={str(generation): len(found) for generation, found in pauses.items()},
        full_collections_ms_total=round(sum(full), 1),
        full_collection_pause_p50_ms=p50_p95(full)[0] if full else None,
        full_collection_pause_max_ms=round(max(full), 1) if full else None,
        young_collections_ms_total=round(sum(pauses[0]) + sum(pauses[1]), 1),
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--worker", choices=["frozen", "unfrozen"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.runs, args.rounds, args.worker == "frozen")))
        return

    url = os.environ.get("DATABASE_URL", "")
    backend = "postgres" if url.startswith(("postgres://", "postgresql://")) else "sqlite"
    sides = []
    for side in ("frozen", "unfrozen"):
        command = [sys.executable, __file__, "--worker", side, "--runs", str(args.runs)]
        command += ["--rounds", str(args.rounds)]
        with scratch_database(backend, "countersign_gc_pauses") as database_url:
            env = {**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "WARNING"}
            sides.append(worker_report(command, env))
    print(f"{args.runs:,} runs on {backend}, {args.rounds} rounds of three listings of agent 0's runs")
    print(
        "start-up       objects frozen   one full collect   full collections   pause p50 / max"
        "   in all   the listings took"
    )
    for r in sides:
        pause = r["full_collection_pause_p50_ms"]
        print(
            f"{'frozen' if r['frozen'] else 'not frozen':<14} {r['objects_frozen']:>14,}"
            f"   {r['full_collect_ms']:>13.1f} ms   {r['collections']['2']:>16}"
            f"   {pause if pause is not None else '-':>7} / {r['full_collection_pause_max_ms'] or '-'} ms"
            f"   {r['full_collections_ms_total']} ms   {r['workload_seconds']} s"
        )
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/gc_pauses.py " + " ".join(sys.argv[1:]),
        "backend": backend,
        "runs": args.runs,
        "rounds": args.rounds,
        "machine": {
            "nproc": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
        },
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip(),
        "sides": sides,
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
