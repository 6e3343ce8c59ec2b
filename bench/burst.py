"""Benchmark: a burst of mixed dashboard requests from many clients at once, on one Daphne server.

The same burst as ``tests/live/test_burst.py`` (see ``tests/support/burst.py``), larger: each of
``--clients`` clients (threads with a keep-alive connection and their own cookies) loads the login
page, logs in once, then reads the ``support`` inbox and the overview and approves or declines calls
through the dashboard's forms (CSRF, htmx), each on a run of its own, seeded beforehand with the demo
agent. The server is a real Daphne process on a fresh database: a temporary SQLite file, or a
PostgreSQL database ``countersign_bench_burst_<random>`` on the server of ``DATABASE_URL`` (default
``postgres://root@127.0.0.1:5432/``), created here and dropped at the end. Decisions continue their
runs in the request (the default Immediate task backend).

Afterwards: whether every decision is on record exactly once (audit log, run store), and whether the
server still answers (a server whose connection pool leaked stays broken after the burst): 12 new
clients log in and read the inbox at once. A burst still going after ``--deadline`` seconds (default
900) stops sending; what it did not send is reported (a server that hangs would take hours).

Columns: requests sent and not sent, answers with a 5xx status, requests that failed in any way
(5xx, no answer within ``--timeout``, an unexpected status), p50/p95 of every request, requests per
second, decisions whose record is wrong, and how many of the 12 clients after the burst got their
inbox.

Prints a table and writes ``bench/results/burst.json``: a list of ``{backend, label, requests,
not_sent, clients, server_errors, failures, p50_ms, p95_ms, throughput_rps, ...}``; a run replaces
the entries of its own ``--label`` and backends and keeps the others ("before" and "after" side by
side).

    .venv/bin/python bench/burst.py                                  # both backends, 2,000 requests
    .venv/bin/python bench/burst.py --backends postgres --requests 400 --label quick

``--logins N`` measures something else: one reviewer, signed in, approves calls one after another,
first alone, then while N other clients log in again and again (production's PBKDF2 rounds). Both
with password hashing bounded (``PASSWORD_HASHING_THREADS`` at its default, half the cores) and
unbounded (``0``), in the same run, on fresh servers. Writes ``bench/results/login_burst.json``:
the reviewer's decision p50/p95 idle and during the logins, their ratio, and the logins' own times.

    .venv/bin/python bench/burst.py --logins 20 --backends postgres
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import ROOT, p50_p95, scratch_database

sys.path.insert(0, str(ROOT))

# The burst the live test runs, and its server processes.
from tests.support import burst, server

RESULTS = ROOT / "bench" / "results" / "burst.json"
LOGIN_RESULTS = ROOT / "bench" / "results" / "login_burst.json"
#: The reviewer's decisions measured alone, then as many again during the logins.
REVIEWER_DECISIONS = 15
#: Clients that, after the burst, log in and read the inbox at once: a server whose connection pool
#: leaked slots fails them (the issue's first symptom was 12 concurrent inbox reads).
PROBES = 12


def one_backend(
    backend: str, *, requests: int, clients: int, timeout: float, deadline: float, logs: Path
) -> dict[str, Any]:
    with scratch_database(backend, "countersign_bench_burst") as database_url:
        env = server.env_for(database_url, settings_module="config.settings")
        env["DECISION_UNDO_SECONDS"] = "0"  # decisions taken at once, not held for an undo window
        server.prepare_database(env)
        count = burst.decisions_needed(requests, clients)
        started = time.perf_counter()
        runs = burst.seed_runs(env, count)
        print(f"[{backend}] seeded {count} runs in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        log = logs / f"daphne-{backend}.log"
        with burst.served(env, log) as daphne:
            result = burst.run_burst(
                daphne.url, runs, clients=clients, requests=requests, timeout=timeout, deadline=deadline
            )
            probes = _probe(daphne.url, timeout=timeout)
            problems = burst.decisions_on_record(env, result.decisions)
        errors = [line for line in log.read_text(errors="replace").splitlines() if "Error" in line]
    summary = result.summary()
    summary.update(
        backend=backend,
        decisions_wrong=len(problems),
        probes_ok=f"{sum(s.status == 200 for s in probes)}/{len(probes)}",
        server_log_errors=len(errors),
    )
    if result.failures:
        print(f"[{backend}] failures: {result.describe_failures()}", file=sys.stderr)
    if problems:
        print(f"[{backend}] record: {'; '.join(problems[:5])}", file=sys.stderr)
    for line in sorted(set(errors))[:8]:
        print(f"[{backend}] server log: {line[:200]}", file=sys.stderr)
    return summary


def _probe(base_url: str, *, timeout: float) -> list[burst.Sample]:
    """After the burst: ``PROBES`` new clients at once each log in and read the inbox."""
    samples: list[burst.Sample] = []

    def probe() -> None:
        browser = burst.Browser(base_url, timeout=timeout)
        try:
            browser.log_in(server.USERNAME, server.PASSWORD)
            samples.append(browser.request("inbox", "GET", burst.INBOX)[0])
        finally:
            browser.close()

    threads = [threading.Thread(target=probe) for _ in range(PROBES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return samples


def login_burst(
    backend: str, *, logins: int, hashing_threads: str, timeout: float, logs: Path
) -> dict[str, Any]:
    """One reviewer's decisions alone, then while ``logins`` clients keep logging in."""
    with scratch_database(backend, "countersign_bench_logins") as database_url:
        env = server.env_for(database_url, settings_module="config.settings")
        env["DECISION_UNDO_SECONDS"] = "0"  # decisions taken at once, not held for an undo window
        env["PASSWORD_HASHING_THREADS"] = hashing_threads
        server.prepare_database(env)
        runs = burst.seed_runs(env, 2 * REVIEWER_DECISIONS)
        with burst.served(env, logs / f"daphne-logins-{backend}-{hashing_threads}.log") as daphne:
            reviewer = burst.Browser(daphne.url, timeout=timeout)
            reviewer.log_in(server.USERNAME, server.PASSWORD)
            idle, idle_failed = _decide(reviewer, runs[:REVIEWER_DECISIONS])
            stop = threading.Event()
            login_samples: list[burst.Sample] = []

            def keep_logging_in() -> None:
                while not stop.is_set():
                    client = burst.Browser(daphne.url, timeout=timeout)
                    try:
                        login_samples.append(client.log_in(server.OTHER_USERNAME, server.OTHER_PASSWORD)[1])
                    finally:
                        client.close()

            threads = [threading.Thread(target=keep_logging_in) for _ in range(logins)]
            for thread in threads:
                thread.start()
            time.sleep(1.0)  # every client is hashing by now
            during, during_failed = _decide(reviewer, runs[REVIEWER_DECISIONS:])
            stop.set()
            for thread in threads:
                thread.join()
            reviewer.close()
    idle_p50, idle_p95 = p50_p95(idle)
    during_p50, during_p95 = p50_p95(during or [float("nan")])
    login_p50, login_p95 = p50_p95([s.ms for s in login_samples if s.status in (200, 302)])
    return {
        "backend": backend,
        "hashing_threads": hashing_threads or "default",
        "logins_at_once": logins,
        "logins_done": len(login_samples),
        "decide_idle_p50_ms": round(idle_p50, 1),
        "decide_idle_p95_ms": round(idle_p95, 1),
        "decide_during_p50_ms": round(during_p50, 1),
        "decide_during_p95_ms": round(during_p95, 1),
        "p95_ratio": round(during_p95 / idle_p95, 2),
        "decide_failed_idle": idle_failed,
        "decide_failed_during": during_failed,
        "login_p50_ms": round(login_p50, 1),
        "login_p95_ms": round(login_p95, 1),
    }


def _decide(reviewer: burst.Browser, runs: list[burst.SeededRun]) -> tuple[list[float], int]:
    """The reviewer approves each run in turn: the times of the approvals that succeeded, and how
    many did not (a 503 when no database connection came free in time, a timeout)."""
    times, failed = [], 0
    for run in runs:
        path = f"/runs/{run.run_id}/calls/{run.tool_call_id}/approve"
        form = {"agent": burst.AGENT, "next": burst.INBOX}
        sample, _ = reviewer.request("approve", "POST", path, form, htmx=True)
        if sample.status == 200:
            times.append(sample.ms)
        else:
            failed += 1
    return times, failed


def login_main(args: argparse.Namespace, logs: Path) -> None:
    entries = [
        login_burst(backend, logins=args.logins, hashing_threads=threads, timeout=args.timeout, logs=logs)
        for backend in args.backends
        for threads in ("0", "")
    ]
    print(
        f"{'backend':9} {'hashing':>8} {'logins':>6} {'idle p95':>9} {'during p95':>10} {'ratio':>6}"
        f" {'login p50':>9} {'login p95':>9} {'failed':>6}"
    )
    for e in entries:
        print(
            f"{e['backend']:9} {e['hashing_threads']:>8} {e['logins_done']:6} {e['decide_idle_p95_ms']:9}"
            f" {e['decide_during_p95_ms']:10} {e['p95_ratio']:6} {e['login_p50_ms']:9} {e['login_p95_ms']:9}"
            f" {e['decide_failed_during']:6}"
        )
    LOGIN_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    LOGIN_RESULTS.write_text(json.dumps(entries, indent=2) + "\n")


def save(entries: list[dict[str, Any]]) -> None:
    kept: list[dict[str, Any]] = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    replaced = {(e["backend"], e["label"]) for e in entries}
    kept = [e for e in kept if (e.get("backend"), e.get("label")) not in replaced]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(kept + entries, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--backends", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"]
    )
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a client waits for an answer")
    parser.add_argument(
        "--deadline",
        type=float,
        default=900.0,
        help="seconds after which clients send nothing more (what is left counts as not sent)",
    )
    parser.add_argument("--label", default="current", help="name of this code state in the results")
    parser.add_argument("--logs", type=Path, default=None, help="keep the servers' logs in this folder")
    parser.add_argument(
        "--logins", type=int, default=0, help="measure a reviewer's decisions during this many logins at once"
    )
    args = parser.parse_args()
    if args.logins:
        with tempfile.TemporaryDirectory(prefix="logins-") as tmp:
            login_main(args, args.logs or Path(tmp))
        return

    entries = []
    with tempfile.TemporaryDirectory(prefix="burst-") as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        for backend in args.backends:
            summary = one_backend(
                backend,
                requests=args.requests,
                clients=args.clients,
                timeout=args.timeout,
                deadline=args.deadline,
                logs=logs,
            )
            entries.append({"label": args.label, **summary})
    print(
        f"{'backend':9} {'label':10} {'sent':>5} {'unsent':>6} {'5xx':>5} {'failed':>6} {'p50 ms':>8}"
        f" {'p95 ms':>8} {'req/s':>7} {'wrong':>5} {'after':>6}"
    )
    for e in entries:
        print(
            f"{e['backend']:9} {e['label']:10} {e['requests']:5} {e['not_sent']:6} {e['server_errors']:5}"
            f" {e['failures']:6} {e['p50_ms']:8} {e['p95_ms']:8} {e['throughput_rps']:7}"
            f" {e['decisions_wrong']:5} {e['probes_ok']:>6}"
        )
    save(entries)


if __name__ == "__main__":
    main()
