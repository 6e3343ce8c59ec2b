"""Benchmark: ``list_suspended_runs`` and ``approve_tool_call`` on the Django store at scale.

Seeds N suspended runs (spread over 5 agents, 50 threads and 200 resources) with bulk inserts into a
fresh database, SQLite (a temporary file) and PostgreSQL (a dedicated database on the server of
``DATABASE_URL``, default ``postgres://root@127.0.0.1:5432/postgres``, created and dropped here), then
times p50 / p95 over ``--calls`` calls of each case:

- ``list page 0``: ``agent.list_suspended_runs(per_page=50, page=0)``
- ``list thread`` / ``list resource``: the same with a thread / resource filter
- ``list date range``: created in a 3-day window
- ``approve e2e``: ``approve_tool_call`` + the continuation to the end, scripted model
- ``store page 0``: ``DjangoRunStore.list_suspended`` alone (no runtime on top)

Prints a table and writes ``bench/results/list_suspended_runs.json`` as a list of
``{backend, n, case, p50_ms, p95_ms}``. Targets: at 100,000 on PostgreSQL every case p50 <= 10 ms,
and p50 at 100,000 no more than 3x p50 at 1,000.

    .venv/bin/python bench/list_suspended_runs.py                      # everything (minutes)
    .venv/bin/python bench/list_suspended_runs.py --sizes 1000 --backends sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from _common import ROOT, analyze_run_tables, p50_p95, scratch_database

RESULTS = ROOT / "bench" / "results" / "list_suspended_runs.json"
AGENTS, THREADS, RESOURCES = 5, 50, 200
BATCH = 2_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# -- the worker: one backend, in a process whose DATABASE_URL points at a fresh database -----------


def worker(sizes: list[int], calls: int) -> dict[str, Any]:
    import asyncio

    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    backend = connection.vendor
    results: list[dict[str, Any]] = []
    seeding: list[dict[str, Any]] = []
    for n in sizes:
        started = time.perf_counter()
        _reset_and_seed(n)
        seeded = time.perf_counter() - started
        print(f"[{backend}] seeded {n:,} runs in {seeded:.1f} s", file=sys.stderr, flush=True)
        seeding.append({"backend": backend, "n": n, "seconds": round(seeded, 1)})
        for case, (p50, p95) in asyncio.run(_measure(calls)).items():
            results.append({"backend": backend, "n": n, "case": case, "p50_ms": p50, "p95_ms": p95})
    return {"results": results, "seeding": seeding}


def _agent(agent_id: str) -> Any:
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from agents_runtime import Agent, tool

    @tool(requires_approval=True)
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        return f"refunded {amount} for {order}"

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart("Refund done.")])
        return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-1001", "amount": 120})])

    return Agent(agent_id, model=FunctionModel(script), tools=[refund])


def _runtime() -> tuple[Any, Any]:
    from agents_runtime import Runtime
    from approvals.store import DjangoRunStore

    store = DjangoRunStore()
    agent = _agent("agent-0")
    Runtime(agents=[agent], storage=store)
    return agent, store


def _reset_and_seed(n: int) -> None:
    """Empty the tables, then bulk-insert n suspended runs with one or two parked calls each."""
    import asyncio

    from django.db import connection, transaction

    from approvals.models import ParkedCallRecord, RunRecord, ThreadMessage

    with connection.cursor() as cursor:
        for model in (ParkedCallRecord, RunRecord, ThreadMessage):
            cursor.execute(f"DELETE FROM {model._meta.db_table}")

    # One real run gives a realistic snapshot (the pydantic-ai conversation) to copy.
    agent, store = _runtime()
    template_run = asyncio.run(agent.generate("Refund order A-1001", thread_id="template")).run_id
    template = store.get_run(template_run)
    assert template is not None
    RunRecord.objects.filter(run_id=template_run).delete()

    rng = random.Random(n)
    for start in range(0, n, BATCH):
        runs, calls = [], []
        for _ in range(start, min(start + BATCH, n)):
            created = T0 + timedelta(seconds=rng.randrange(30 * 86_400))
            runs.append(
                RunRecord(
                    run_id=uuid.UUID(int=rng.getrandbits(128)).hex,
                    agent_id=f"agent-{rng.randrange(AGENTS)}",
                    thread_id=f"thread-{rng.randrange(THREADS)}",
                    resource_id=f"resource-{rng.randrange(RESOURCES)}",
                    created_at=created,
                    suspended_at=created + timedelta(seconds=rng.randrange(3_600)),
                    snapshot=template.snapshot,
                    history=[],
                )
            )
        with transaction.atomic():
            RunRecord.objects.bulk_create(runs, batch_size=500)
            for run in runs:
                calls.append(
                    ParkedCallRecord(
                        run=run,
                        position=0,
                        tool_call_id=f"call-{run.run_id[:12]}",
                        tool_name="refund",
                        kind="approval",
                        args={"order": f"A-{rng.randrange(100_000)}", "amount": rng.randrange(10, 5_000)},
                    )
                )
                if rng.random() < 0.25:
                    calls.append(
                        ParkedCallRecord(
                            run=run,
                            position=1,
                            tool_call_id=f"ask-{run.run_id[:12]}",
                            tool_name="ask_environment",
                            kind="input",
                            suspend_payload={"question": "Which environment?"},
                            resume_schema={
                                "type": "object",
                                "properties": {"environment": {"type": "string"}},
                            },
                        )
                    )
            ParkedCallRecord.objects.bulk_create(calls, batch_size=500)
    analyze_run_tables()
    connection.close()


async def _timed(calls: int, call: Callable[[int], Awaitable[Any]]) -> tuple[float, float]:
    for i in range(3):  # warm-up: connections, caches, imports
        await call(i)
    samples = []
    for i in range(calls):
        started = time.perf_counter()
        await call(i)
        samples.append((time.perf_counter() - started) * 1000)
    return p50_p95(samples)


async def _measure(calls: int) -> dict[str, tuple[float, float]]:
    import asyncio

    from agents_runtime.store import RunQuery

    agent, store = _runtime()
    out: dict[str, tuple[float, float]] = {}

    async def page0(i: int) -> None:
        result = await agent.list_suspended_runs(per_page=50, page=0)
        assert len(result.runs) == 50 and result.total > 50

    async def thread(i: int) -> None:
        result = await agent.list_suspended_runs(thread_id=f"thread-{i % THREADS}", per_page=50, page=0)
        assert result.total > 0

    async def resource(i: int) -> None:
        await agent.list_suspended_runs(resource_id=f"resource-{i % RESOURCES}", per_page=50, page=0)

    async def date_range(i: int) -> None:
        start = T0 + timedelta(days=i % 27)
        result = await agent.list_suspended_runs(
            from_date=start, to_date=start + timedelta(days=3), per_page=50, page=0
        )
        assert result.total > 0

    async def store_page0(i: int) -> None:
        runs, _ = await asyncio.to_thread(store.list_suspended, RunQuery(agent_id="agent-0", limit=50))
        assert len(runs) == 50

    out["list page 0"] = await _timed(calls, page0)
    out["list thread"] = await _timed(calls, thread)
    out["list resource"] = await _timed(calls, resource)
    out["list date range"] = await _timed(calls, date_range)
    out["store page 0"] = await _timed(calls, store_page0)

    # Runs to approve, suspended through the runtime (real snapshots), amid the seeded ones;
    # 3 for the warm-up.
    pending = [
        (await agent.generate("Refund order A-1001", thread_id="bench-approve")) for _ in range(calls + 3)
    ]

    out["approve e2e"] = await _timed_approvals(calls, pending, agent)
    return out


async def _timed_approvals(calls: int, pending: list[Any], agent: Any) -> tuple[float, float]:
    queue = iter(pending)

    async def approve(_: int) -> None:
        run = next(queue)
        stream = await agent.approve_tool_call(run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id)
        result = await stream.result()
        assert result.status == "success", result

    return await _timed(calls, approve)


# -- the driver: databases, one worker per backend, the table --------------------------------------


def _run_worker(database_url: str, sizes: list[int], calls: int) -> dict[str, Any]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "LOG_LEVEL": "WARNING",
    }
    done = subprocess.run(
        [sys.executable, __file__, "--worker", "--sizes", ",".join(map(str, sizes)), "--calls", str(calls)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    )
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def run_backend(backend: str, sizes: list[int], calls: int) -> dict[str, Any]:
    with scratch_database(backend, "countersign_bench") as database_url:
        return _run_worker(database_url, sizes, calls)


def runtime_floor(calls: int) -> tuple[float, float]:
    """``approve e2e`` on the in-memory store: what the runtime itself costs, without a database."""
    import asyncio

    sys.path.insert(0, str(ROOT))
    from agents_runtime import InMemoryRunStore, Runtime

    agent = _agent("agent-0")
    Runtime(agents=[agent], storage=InMemoryRunStore())

    async def measure() -> tuple[float, float]:
        pending = [await agent.generate("Refund order A-1001") for _ in range(calls + 3)]
        return await _timed_approvals(calls, pending, agent)

    return asyncio.run(measure())


def print_table(results: list[dict[str, Any]]) -> None:
    print(f"{'backend':<11}{'n':>9}  {'case':<18}{'p50 ms':>9}{'p95 ms':>9}")
    for r in results:
        print(f"{r['backend']:<11}{r['n']:>9,}  {r['case']:<18}{r['p50_ms']:9.2f}{r['p95_ms']:9.2f}")


def check_targets(results: list[dict[str, Any]]) -> list[str]:
    problems = []
    timed = [r for r in results if r["backend"] != "memory"]
    for r in timed:
        if r["backend"] == "postgresql" and r["n"] == 100_000 and r["p50_ms"] > 10:
            problems.append(f"postgresql 100,000 {r['case']}: p50 {r['p50_ms']} ms > 10 ms")
    for r in timed:
        if r["n"] != 100_000:
            continue
        base = next(
            (b for b in timed if (b["backend"], b["n"], b["case"]) == (r["backend"], 1_000, r["case"])), None
        )
        if base is not None and r["p50_ms"] > 3 * base["p50_ms"]:
            problems.append(
                f"{r['backend']} {r['case']}: p50 {r['p50_ms']} ms at 100,000"
                f" > 3 x {base['p50_ms']} ms at 1,000"
            )
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated run counts")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--calls", type=int, default=30, help="timed calls per case (at least 20)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    if args.worker:
        print(json.dumps(worker(sizes, args.calls)))
        return
    if args.calls < 20:
        parser.error("--calls must be at least 20")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for backend in backends:
        if backend not in {"sqlite", "postgres"}:
            parser.error(f"unknown backend {backend!r}")
    p50, p95 = runtime_floor(args.calls)
    results: list[dict[str, Any]] = [
        {"backend": "memory", "n": 0, "case": "approve e2e", "p50_ms": p50, "p95_ms": p95}
    ]
    seeding: list[dict[str, Any]] = []
    for backend in backends:
        report = run_backend(backend, sizes, args.calls)
        results.extend(report["results"])
        seeding.extend(report["seeding"])
    print_table(results)
    print("\nseeding (bulk inserts, then VACUUM ANALYZE / ANALYZE):")
    for seed in seeding:
        print(f"  {seed['backend']:<11}{seed['n']:>9,} runs  {seed['seconds']:6.1f} s")
    print("memory / approve e2e is the runtime alone (in-memory store): the floor under every backend.")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")
    for problem in check_targets(results):
        print(f"TARGET MISSED: {problem}")


if __name__ == "__main__":
    main()
