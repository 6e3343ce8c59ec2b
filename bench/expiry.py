"""Benchmark: how late do calls expire? N pending calls with deadlines spread over an hour, PostgreSQL.

Seeds ``--n`` suspended runs (5 agents, one approval call each, a real snapshot copied from a run of
the same agent) into a scratch PostgreSQL database with bulk inserts, their deadlines spread evenly
over ``--span`` seconds starting a few seconds after seeding (moved there in one UPDATE, so seeding
time does not count). Then the app's own sweep (``approvals.tasks.Sweeper``, 1 s interval) runs
until every call expired; each expiry is a real decision and continuation (scripted model) that ends
its run. Lateness = the audit row's time (when the expiry was decided) minus the call's deadline.

Prints p50 / p99 / max lateness and throughput and writes ``bench/results/expiry.json``.

    .venv/bin/python bench/expiry.py                         # 100,000 calls over an hour (once!)
    .venv/bin/python bench/expiry.py --n 3000 --span 108     # a quick run at the same rate
    .venv/bin/python bench/expiry.py --measure 600           # 100,000 pending, the first 10 minutes
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
from datetime import UTC, datetime, timedelta
from typing import Any

from _common import ROOT, analyze_run_tables, scratch_database

RESULTS = ROOT / "bench" / "results" / "expiry.json"
AGENTS = 5
BATCH = 2_000
#: Seeded deadlines start this far in the future, then move to "a few seconds from now".
PARKED = datetime(2030, 1, 1, tzinfo=UTC)
LEAD_SECONDS = 5.0


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

    @tool(requires_approval=True, expires_after=timedelta(hours=1))
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        return f"refunded {amount} for {order}"

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart("Nobody answered; told the customer.")])
        return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-1001", "amount": 120})])

    return Agent(agent_id, model=FunctionModel(script), tools=[refund])


def worker(n: int, span: float, measure: float | None) -> dict[str, Any]:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["EXPIRY_SWEEP"] = "off"  # this worker runs its own sweeper below
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from agents_runtime import Runtime
    from approvals import agents as served
    from approvals.models import AuditEntry, ParkedCallRecord, RunRecord
    from approvals.store import DjangoRunStore
    from approvals.tasks import Sweeper

    call_command("migrate", verbosity=0)
    runtime = Runtime([_agent(f"agent-{i}") for i in range(AGENTS)], storage=DjangoRunStore())
    served.install(runtime)

    started = time.perf_counter()
    _seed(runtime, n, span)
    seeded = time.perf_counter() - started
    print(f"[{connection.vendor}] seeded {n:,} calls in {seeded:.1f} s", file=sys.stderr, flush=True)

    # Deadlines from "a few seconds from now", evenly over the span (one statement).
    base = datetime.now(UTC) + timedelta(seconds=LEAD_SECONDS)
    shift = PARKED - base
    table = ParkedCallRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET expires_at = expires_at - %s", [shift])  # type: ignore[list-item]
    analyze_run_tables()
    first_due, last_due = base, base + timedelta(seconds=span)
    stop_at = None if measure is None else base + timedelta(seconds=measure)

    sweeper = Sweeper()
    sweeper.start()
    try:
        while RunRecord.objects.exists():
            time.sleep(1.0)
            if stop_at is not None and datetime.now(UTC) > stop_at:
                break
            if datetime.now(UTC) > last_due + timedelta(seconds=max(600, span)):
                print("giving up: calls still pending long after the last deadline", file=sys.stderr)
                break
    finally:
        sweeper.stop()
    finished = datetime.now(UTC)

    # Lateness of each expiry: its audit row's time minus the call's deadline (the seeded offset
    # rides in the call id).
    lateness = []
    for tool_call_id, created_at in AuditEntry.objects.filter(action="expire").values_list(
        "tool_call_id", "created_at"
    ):
        offset_ms = int(tool_call_id.rsplit("-", 1)[1])
        lateness.append((created_at - (base + timedelta(milliseconds=offset_ms))).total_seconds())
    expired = len(lateness)
    # A measured window: the calls due in it that had not expired yet count as late as they are now.
    end = finished if stop_at is None else min(finished, stop_at)
    overdue = ParkedCallRecord.objects.filter(action__isnull=True, expires_at__lte=end)
    lateness += [
        (finished - due).total_seconds()
        for due in overdue.values_list("expires_at", flat=True)
        if due is not None
    ]
    lateness.sort()
    result = {
        "backend": connection.vendor,
        "n": n,
        "span_seconds": span,
        "measured_seconds": measure,
        "due_in_window": len(lateness),
        "expired": expired,
        "seed_seconds": round(seeded, 1),
        "sweep_seconds": round((finished - first_due).total_seconds(), 1),
        "pending_at_end": ParkedCallRecord.objects.filter(action__isnull=True).count(),
        # Expired but not yet gone on (the model told, the run ended) when the measure stopped.
        "expired_runs_not_ended": RunRecord.objects.filter(calls__action__isnull=False).distinct().count(),
        "load_average": os.getloadavg(),
        "lateness_p50_s": round(_pct(lateness, 0.50), 3),
        "lateness_p99_s": round(_pct(lateness, 0.99), 3),
        "lateness_max_s": round(lateness[-1], 3) if lateness else None,
        "expiries_per_second": round(expired / max(1e-9, (finished - first_due).total_seconds()), 1),
    }
    return result


def _pct(ordered: list[float], q: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _seed(runtime: Any, n: int, span: float) -> None:
    import asyncio

    from django.db import transaction

    from approvals.models import ParkedCallRecord, RunRecord

    template_agent = runtime.get_agent("agent-0")
    run_id = asyncio.run(template_agent.generate("Refund order A-1001")).run_id
    template = runtime.storage.get_run(run_id)
    assert template is not None and template.snapshot is not None
    deadline_json = template.calls[0].to_json()["deadline"]
    RunRecord.objects.filter(run_id=run_id).delete()

    rng = random.Random(n)
    now = datetime.now(UTC)
    for start in range(0, n, BATCH):
        runs = [
            RunRecord(
                run_id=uuid.UUID(int=rng.getrandbits(128)).hex,
                agent_id=f"agent-{i % AGENTS}",
                created_at=now,
                suspended_at=now,
                snapshot=template.snapshot,
                history=[],
            )
            for i in range(start, min(start + BATCH, n))
        ]
        with transaction.atomic():
            RunRecord.objects.bulk_create(runs, batch_size=500)
            calls = []
            for i, run in enumerate(runs, start):
                # Evenly spread, in a random order of runs; the offset rides in the call id.
                offset_ms = int(span * 1000 * i / max(1, n - 1))
                calls.append(
                    ParkedCallRecord(
                        run=run,
                        position=0,
                        tool_call_id=f"call-{run.run_id[:12]}-{offset_ms}",
                        tool_name="refund",
                        kind="approval",
                        args={"order": "A-1001", "amount": 120},
                        expires_at=PARKED + timedelta(milliseconds=offset_ms),
                        deadline=deadline_json,
                    )
                )
            ParkedCallRecord.objects.bulk_create(calls, batch_size=500)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--span", type=float, default=3600.0, help="seconds the deadlines spread over")
    parser.add_argument(
        "--measure", type=float, default=None, help="stop after this many seconds of the span (default: all)"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.n, args.span, args.measure)))
        return
    with scratch_database("postgres", "bench_expiry") as url:
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "LOG_LEVEL": "WARNING",
        }
        done = subprocess.run(
            [sys.executable, __file__, "--worker", "--n", str(args.n), "--span", str(args.span)]
            + ([] if args.measure is None else ["--measure", str(args.measure)]),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode != 0:
        raise SystemExit(f"worker failed ({done.returncode})")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    RESULTS.write_text(json.dumps([*previous, result], indent=2) + "\n")
    for key, value in result.items():
        print(f"{key:>22}: {value}")


if __name__ == "__main__":
    main()
