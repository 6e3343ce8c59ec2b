"""Which of our files one decision passes through, and what its SQL statements cost.

Starts a demo run (the ``support`` agent asks to approve a refund) in a fresh SQLite database, then
posts Approve as htmx does, through Django's test ``Client`` (the whole request: middleware, view,
services, runtime, store, continuation, outcome card), and records every function call in the
project's own code (``sys.setprofile``): the files, in the order first entered, and the templates
rendered. A measure of how far a reader must follow one decision (the restructuring issue asked for
fewer than the 27 files it took then).

Then ``--approves`` more Approves, each of a new run, on each backend of ``--backends`` (SQLite, and
PostgreSQL in a database created and dropped here): the statements each sends on the request's
connection and the time spent in them (the driver's execute and fetch, timed around each statement),
against the whole Approve's time. On SQLite a statement is a call into the library in this process;
on PostgreSQL a round trip to the server. Writes ``bench/results/decision_path.json``.

    .venv/bin/python bench/decision_path.py
    .venv/bin/python bench/decision_path.py --backends sqlite --approves 50
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import p50_p95, scratch_database, worker_report

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "decision_path.json"
PACKAGES = ("agents_runtime", "approvals", "config", "demo")


def worker(approves: int) -> None:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from asgiref.sync import async_to_sync
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.test import Client
    from django.test.signals import template_rendered
    from django.test.utils import setup_test_environment

    setup_test_environment()
    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(username="bench-reviewer")
    user.groups.add(Group.objects.get(name="Admins"))
    client = Client()
    client.force_login(user)
    try:
        from approvals import agents

        agent = agents.get("support")
    except ImportError:  # before the restructuring (for a before/after count)
        from approvals import registry  # type: ignore[attr-defined]

        agent = registry.get_runtime().get_agent("support")
    run = async_to_sync(agent.generate)("Please refund order A-1044, $890")
    assert run.status == "suspended", run
    call = run.tool_calls[0]
    url = f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve"
    client.get(f"/runs/{run.run_id}/")  # warm: imports and caches are not part of a decision

    files: list[str] = []
    seen: set[str] = set()
    roots = tuple(str(ROOT / p) + os.sep for p in PACKAGES)

    def profile(frame: Any, event: str, arg: Any) -> None:
        name = frame.f_code.co_filename
        if event == "call" and name.startswith(roots) and name not in seen:
            seen.add(name)
            files.append(os.path.relpath(name, ROOT))

    templates: list[str] = []
    template_rendered.connect(lambda sender, template, **kw: templates.append(template.name), weak=False)
    import threading

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        response = client.post(url, {"agent": "support"}, headers={"HX-Request": "true"})
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert response.status_code == 200, response.status_code
    assert "Completed" in response.content.decode(), response.content.decode()[-3000:]
    names = sorted({t for t in templates if t})
    print(f"{len(files)} Python files of ours, in the order a decision enters them:", file=sys.stderr)
    for name in files:
        print(f"  {name}", file=sys.stderr)
    print(f"{len(names)} templates: {', '.join(names)}", file=sys.stderr)
    print(json.dumps({"files": files, "templates": names, **_statements(client, agent, approves)}))


def _statements(client: Any, agent: Any, approves: int) -> dict[str, Any]:
    """``approves`` Approves of new runs: statements on the request's connection, their time and the
    Approve's (each a list over the Approves, in ms)."""
    from asgiref.sync import async_to_sync
    from django.db import connection

    counts: list[int] = []
    in_statements: list[float] = []
    whole: list[float] = []
    for _ in range(approves):
        run = async_to_sync(agent.generate)("Please refund order A-1044, $890")
        url = f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/approve"
        spent: list[float] = []
        with connection.execute_wrapper(_timed_into(spent)):
            started = time.perf_counter()
            response = client.post(url, {"agent": "support"}, headers={"HX-Request": "true"})
            whole.append((time.perf_counter() - started) * 1000)
        assert "Completed" in response.content.decode(), response.content.decode()[-3000:]
        counts.append(len(spent))
        in_statements.append(sum(spent) * 1000)
    return {
        "vendor": connection.vendor,
        "statements": counts,
        "in_statements_ms": in_statements,
        "approve_ms": whole,
    }


def _timed_into(spent: list[float]) -> Any:
    """An execute wrapper that appends each statement's time (s) to ``spent``."""

    def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            spent.append(time.perf_counter() - started)

    return timed


def _report(backend: str, found: dict[str, Any]) -> dict[str, Any]:
    statements_p50, statements_p95 = p50_p95(found["in_statements_ms"])
    approve_p50, approve_p95 = p50_p95(found["approve_ms"])
    return {
        "backend": found["vendor"],
        "files": len(found["files"]),
        "statements": statistics.median(found["statements"]),
        "in_statements_p50_ms": statements_p50,
        "in_statements_p95_ms": statements_p95,
        "per_statement_ms": round(statements_p50 / max(1, statistics.median(found["statements"])), 3),
        "approve_p50_ms": approve_p50,
        "approve_p95_ms": approve_p95,
        "share_in_statements": round(statements_p50 / approve_p50, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--approves", type=int, default=30, help="timed Approves per backend")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.approves)
        return
    rows = []
    # PostgreSQL as deployed: with Redis (REDIS_URL, if set), the live events go to it, not to the outbox.
    redis = os.environ.get("REDIS_URL", "")
    for backend in args.backends.split(","):
        with scratch_database(backend, "decision_path") as url:
            # (No undo window: an Approve held for its undo is decided later, by the sweep.)
            env = {**os.environ, "DATABASE_URL": url, "LOG_LEVEL": "WARNING", "DECISION_UNDO_SECONDS": "0"}
            if backend == "sqlite" or not redis:
                env.pop("REDIS_URL", None)
            env.pop("TASKS_BACKEND", None)
            command = [sys.executable, __file__, "--worker", "--approves", str(args.approves)]
            rows.append({**_report(backend, worker_report(command, env)), "redis": "REDIS_URL" in env})
    header = f"{'backend':<11}{'redis':>6}{'files':>6}{'statements':>11}{'in them p50':>13}{'each':>8}"
    print(f"{header}{'Approve p50':>13}{'share':>7}")
    for r in rows:
        print(
            f"{r['backend']:<11}{'yes' if r['redis'] else 'no':>6}{r['files']:>6}{r['statements']:>11}"
            f"{r['in_statements_p50_ms']:>10.2f} ms{r['per_statement_ms']:>8.3f}"
            f"{r['approve_p50_ms']:>10.2f} ms{r['share_in_statements']:>7.0%}"
        )
    RESULTS.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
