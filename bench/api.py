"""Benchmark: the HTTP API against the same work done in process, at 100,000 suspended runs.

Seeds N suspended runs (as ``list_suspended_runs.py`` does: 5 agents, bulk inserts) into a scratch
PostgreSQL database, starts Countersign under Daphne on it (one process, the Immediate task backend,
no rate limit), and times p50 / p95 over ``--calls`` calls, through one kept-alive HTTP connection,
the cases compared taking turns call by call (the listings; the three approvals):

- ``list in process``: ``agent.list_suspended_runs(per_page=50, page=0)``
- ``GET suspended-runs``: ``/api/agents/agent-0/suspended-runs?perPage=50&page=0`` over HTTP
- ``approve e2e in process``: ``approve_tool_call`` + the continuation to the end (the runtime
  alone, no service, no audit)
- ``POST v1 approve``: ``/api/v1/.../approve`` over HTTP (service, audit row, continuation, JSON
  outcome), on runs of the same agent and script
- ``POST approve-tool-call``: the Mastra route, its stream read to ``[DONE]``

Writes ``bench/results/api.json`` as a list of ``{backend, n, case, p50_ms, p95_ms}``.

    .venv/bin/python bench/api.py                  # 100,000 runs on PostgreSQL (minutes)
    .venv/bin/python bench/api.py --size 1000 --calls 20
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, p50_p95, scratch_database

RESULTS = ROOT / "bench" / "results" / "api.json"
RUNTIME = "bench_api_runtime:runtime"
#: The issue's targets: each HTTP figure over the in-process figure of the same operation.
RATIOS = [
    ("GET suspended-runs", "list in process", 2.0),
    ("POST v1 approve", "approve e2e in process", 1.5),
    ("POST approve-tool-call", "approve e2e in process", 1.5),
]


def _setup() -> None:
    import django

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()


def seed(n: int) -> str:
    """Migrate, seed n runs, make a superuser's token (printed for the driver)."""
    _setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from list_suspended_runs import _reset_and_seed

    from approvals.services.tokens import create_token

    call_command("migrate", verbosity=0)
    # DEBUG off, as in production: the server wants collected static files.
    call_command("collectstatic", "--noinput", verbosity=0)
    _reset_and_seed(n)
    user = get_user_model().objects.create_superuser(username="bench-api", email="", password=None)
    return create_token(user, name="bench").plaintext


class Http:
    """One kept-alive HTTP/1.1 connection with the token."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        self.conn.request(method, path, body=data, headers=self.headers)
        response = self.conn.getresponse()
        return response.status, response.read()


def _timed_together(calls: int, cases: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """p50 / p95 of each case, the cases taking turns call by call: this machine's speed drifts by
    tens of percent within a minute, and a case timed after another would carry the drift into
    their ratio."""
    for i in range(3):  # warm-up: connections, caches, imports
        for call in cases.values():
            call(i)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(calls):
        for name, call in cases.items():
            started = time.perf_counter()
            call(i)
            samples[name].append((time.perf_counter() - started) * 1000)
    return {name: p50_p95(taken) for name, taken in samples.items()}


def measure(port: int, token: str, calls: int) -> dict[str, tuple[float, float]]:
    _setup()
    from asgiref.sync import async_to_sync

    from approvals import agents

    agent = agents.get("agent-0")
    http_ = Http(port, token)
    out: dict[str, tuple[float, float]] = {}

    def listed(i: int) -> None:
        result = async_to_sync(agent.list_suspended_runs)(per_page=50, page=0)
        assert len(result.runs) == 50

    def listed_http(i: int) -> None:
        status, body = http_.request("GET", "/api/agents/agent-0/suspended-runs?perPage=50&page=0")
        assert status == 200 and len(json.loads(body)["runs"]) == 50, (status, body[:200])

    out.update(_timed_together(calls, {"list in process": listed, "GET suspended-runs": listed_http}))

    def fresh(case: str) -> list[Any]:
        # A thread per case: each run's continuation adds to its thread's history, which the next
        # run of that thread loads; shared, the later cases would carry the earlier ones' history.
        return [
            async_to_sync(agent.generate)("Refund order A-1001", thread_id=f"bench-api-{case}")
            for _ in range(calls + 3)
        ]

    in_process, v1, mastra = iter(fresh("in-process")), iter(fresh("v1")), iter(fresh("mastra"))

    def approve(i: int) -> None:
        run = next(in_process)
        stream = async_to_sync(agent.approve_tool_call)(
            run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id
        )
        assert async_to_sync(stream.result)().status == "success"

    def approve_v1(i: int) -> None:
        run = next(v1)
        path = f"/api/v1/agents/agent-0/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/approve"
        status, body = http_.request("POST", path, {})
        assert status == 200 and json.loads(body)["outcome"] == "completed", (status, body[:300])

    def approve_mastra(i: int) -> None:
        run = next(mastra)
        body = {"runId": run.run_id, "toolCallId": run.tool_calls[0].tool_call_id}
        status, raw = http_.request("POST", "/api/agents/agent-0/approve-tool-call", body)
        assert status == 200 and raw.endswith(b"data: [DONE]\n\n"), (status, raw[-200:])

    out.update(
        _timed_together(
            calls,
            {
                "approve e2e in process": approve,
                "POST v1 approve": approve_v1,
                "POST approve-tool-call": approve_mastra,
            },
        )
    )
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    daphne = Path(sys.executable).with_name("daphne")
    with log.open("ab") as output:
        process = subprocess.Popen(
            [str(daphne), "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process, port
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"Daphne did not start; see {log}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--backend", default="postgres", help="postgres (default) or sqlite")
    parser.add_argument("--seed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed:
        print(seed(args.size))
        return
    if args.measure:
        port, token = args.measure.split(":", 1)
        print(json.dumps(measure(int(port), token, args.calls)))
        return
    with (
        scratch_database(args.backend, "countersign_bench_api") as database_url,
        tempfile.TemporaryDirectory(prefix="bench-api-static-") as static_root,
    ):
        env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "TASKS_BACKEND", "DATABASE_URL"}}
        env.update(
            DATABASE_URL=database_url,
            DJANGO_SETTINGS_MODULE="config.settings",
            AGENTS_RUNTIME=RUNTIME,
            PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "bench")]),
            API_DECISION_RATE_LIMIT="0",
            LOG_LEVEL="WARNING",
            DEBUG="0",
            STATIC_ROOT=static_root,
            SECRET_KEY="bench-api-" + "x" * 50,
        )
        started = time.perf_counter()
        token = (
            subprocess.run(
                [sys.executable, __file__, "--seed", "--size", str(args.size)],
                cwd=ROOT,
                env=env,
                check=True,
                text=True,
                stdout=subprocess.PIPE,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        print(f"seeded {args.size:,} runs in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        log = ROOT / "var" / "bench-api-daphne.log"
        log.parent.mkdir(exist_ok=True)
        server, port = _serve(env, log)
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--measure", f"{port}:{token}", "--calls", str(args.calls)],
                cwd=ROOT,
                env=env,
                check=True,
                text=True,
                stdout=subprocess.PIPE,
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
    backend = "postgresql" if args.backend == "postgres" else args.backend
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    results = [
        {"backend": backend, "n": args.size, "case": case, "p50_ms": p50, "p95_ms": p95}
        for case, (p50, p95) in figures.items()
    ]
    print(f"{'case':<26}{'p50 ms':>9}{'p95 ms':>9}")
    for r in results:
        print(f"{r['case']:<26}{r['p50_ms']:9.2f}{r['p95_ms']:9.2f}")
    p50 = {case: p for case, (p, _) in figures.items()}
    print()
    for over, base, target in RATIOS:
        ratio = p50[over] / p50[base]
        verdict = "ok" if ratio <= target else "MISSED"
        print(f"{over} / {base}: {ratio:.2f}x (target <= {target}x) {verdict}")
        case = f"{over} / {base}"
        results.append({"backend": backend, "n": args.size, "case": case, "ratio": round(ratio, 3)})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
