"""Benchmark: what a run costs on a long conversation thread, with and without a memory bound.

A new run on a thread reads the thread's memory (the messages of its ended runs), sends it to the
model and keeps it in its snapshot, which every decision on the run decodes again. Unbounded
(``Agent(memory_last_runs=None)``) both grow with the thread; bounded (the default, the last
``DEFAULT_MEMORY_LAST_RUNS`` runs) they must not.

For each bound, one thread is filled with ended runs (each: a refund the model asks for, approved,
then its reply) up to 0, 50 and 200 runs; at each size ``--calls`` more runs are started and
approved on it, timing ``generate`` (to the suspension) and ``approve e2e`` (``approve_tool_call``
+ the continuation to the end) separately. The scripted model is the one ``list_suspended_runs.py``
uses. The in-memory store keeps the figures about the runtime (no database), ``--backend sqlite`` or
``postgres`` puts the Django store under it.

Prints a table and writes ``bench/results/thread_memory.json`` as a list of
``{store, memory_last_runs, thread_runs, case, p50_ms, p95_ms}``. Target: bounded, the figures at 200
runs within 1.5x of those at 50 (both past the bound: from 0 to the bound a run remembers more, as
it should).

    .venv/bin/python bench/thread_memory.py                       # in-memory store (about a minute)
    .venv/bin/python bench/thread_memory.py --backend postgres
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from _common import ROOT, p50_p95, scratch_database, worker_report

RESULTS = ROOT / "bench" / "results" / "thread_memory.json"
SIZES = (0, 50, 200)
TARGET_GROWTH = 1.5


def worker(backend: str, calls: int) -> list[dict[str, Any]]:
    import asyncio

    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.core.management import call_command
    from list_suspended_runs import _agent

    from agents_runtime import Runtime
    from agents_runtime._loop import DEFAULT_MEMORY_LAST_RUNS
    from agents_runtime.memory import InMemoryRunStore

    store: Any
    if backend == "memory":
        store = InMemoryRunStore()
    else:
        from approvals.store import DjangoRunStore

        call_command("migrate", verbosity=0)
        store = DjangoRunStore()

    async def measure(bound: int | None) -> list[dict[str, Any]]:
        agent = _agent("agent-0")
        agent.memory_last_runs = bound
        Runtime(agents=[agent], storage=store)
        thread = f"thread-{bound}"

        async def one_run(timed: dict[str, list[float]] | None) -> None:
            started = time.perf_counter()
            run = await agent.generate("Refund order A-1001", thread_id=thread)
            parked = time.perf_counter()
            stream = await agent.approve_tool_call(
                run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id
            )
            result = await stream.result()
            assert result.status == "success", result
            if timed is not None:
                timed["generate"].append((parked - started) * 1000)
                timed["approve e2e"].append((time.perf_counter() - parked) * 1000)

        rows: list[dict[str, Any]] = []
        ended = 0
        for size in SIZES:
            while ended < size:
                await one_run(None)
                ended += 1
            timed: dict[str, list[float]] = {"generate": [], "approve e2e": []}
            for _ in range(calls):
                await one_run(timed)
            ended += calls  # (the timed runs join the thread too: the next size starts past them)
            for case, samples in timed.items():
                p50, p95 = p50_p95(samples)
                rows.append(
                    {
                        "store": backend,
                        "memory_last_runs": bound,
                        "thread_runs": size,
                        "case": case,
                        "p50_ms": p50,
                        "p95_ms": p95,
                    }
                )
                print(
                    f"[{backend}] memory_last_runs={bound} {size:>4} runs: {case} {p50} ms", file=sys.stderr
                )
        return rows

    async def both() -> list[dict[str, Any]]:
        return [*await measure(DEFAULT_MEMORY_LAST_RUNS), *await measure(None)]

    return asyncio.run(both())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=("memory", "sqlite", "postgres"), default="memory")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.backend, args.calls)))
        return

    command = [sys.executable, __file__, "--worker", "--backend", args.backend, "--calls", str(args.calls)]
    database = "sqlite" if args.backend == "memory" else args.backend
    with scratch_database(database, "countersign_thread_memory") as database_url:
        env = {**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "WARNING"}
        rows: list[dict[str, Any]] = worker_report(command, env)

    print(
        f"\n{'store':<9}{'memory_last_runs':>17}{'thread runs':>13}  {'case':<12}{'p50 ms':>9}{'p95 ms':>9}"
    )
    for row in rows:
        bound = "all" if row["memory_last_runs"] is None else row["memory_last_runs"]
        print(
            f"{row['store']:<9}{bound:>17}{row['thread_runs']:>13,}  {row['case']:<12}"
            f"{row['p50_ms']:>9.2f}{row['p95_ms']:>9.2f}"
        )
    missed = []
    first, past_bound, last = SIZES[0], SIZES[1], SIZES[-1]
    bounds = {row["memory_last_runs"] for row in rows}
    for bound in (*sorted(b for b in bounds if b is not None), None):
        for case in ("generate", "approve e2e"):
            p50 = {
                r["thread_runs"]: r["p50_ms"]
                for r in rows
                if (r["memory_last_runs"], r["case"]) == (bound, case)
            }
            label = "all runs" if bound is None else f"the last {bound} runs"
            growth = p50[last] / p50[past_bound]
            print(
                f"{case}, remembering {label}: {last} runs / {first} runs = {p50[last] / p50[first]:.2f}x,"
                f" {last} runs / {past_bound} runs = {growth:.2f}x"
            )
            if bound is not None and growth > TARGET_GROWTH:
                missed.append(f"{case} ({label}) grows {growth:.2f}x from {past_bound} to {last} runs")

    saved = (
        [r for r in json.loads(RESULTS.read_text()) if r["store"] != args.backend] if RESULTS.exists() else []
    )
    RESULTS.write_text(json.dumps(saved + rows, indent=1) + "\n")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")
    for line in missed:
        print(f"TARGET MISSED: {line}")


if __name__ == "__main__":
    main()
