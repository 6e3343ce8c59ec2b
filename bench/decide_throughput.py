"""Benchmark: decisions per second through the dashboard's HTTP views, 1 to 16 reviewers at once.

Seeds ``--runs`` suspended runs of one agent (``bench_api_runtime:decide_runtime``: a scripted model,
one ``refund`` call waiting on an approval) into a scratch PostgreSQL database: one real run through
the runtime, copied with bulk inserts (each copy its own run id and tool call id, in the snapshot
too). Starts ``--server-processes`` Daphne processes on it (DEBUG off, the default Immediate task
backend: a decision continues its run in the request, to the end), and logs in 16 distinct
reviewers (the login form; Reviewers group), each a thread with one keep-alive HTTP/1.1 connection,
its session cookie and CSRF token. With several processes, reviewer i talks to process i mod P
(no proxy).

For each level N (1, 2, 4, 8, 16), N reviewers decide for ``--seconds``: each takes the next run
nobody has taken and posts the card's form exactly as htmx does (``POST
/runs/<run>/calls/<call>/approve`` or ``/decline`` with a reason, one in ``DECLINE_EVERY``;
``HX-Request``, the form's ``csrfmiddlewaretoken``), and reads the outcome card. A decision is timed
from sending to the last byte of the answer. Figures per N: decisions per second (decisions over
the time from the start to the last answer), p50 / p95 latency, and CPU used meanwhile, in cores
(and ms per decision), by the clients (this process's threads), the Daphne processes, the PostgreSQL
backends of the scratch database, and everything else on the machine (``others``: this machine's
CPUs are shared, and what others take shows in the figures). The clients' share says whether they,
not the server, were the limit: about 0.5 ms of CPU per decision, a hundredth of a core.

``--workers K`` runs the continuations off the request, as a deployment with ``TASKS_BACKEND=database``
does: the answer is the "continuing" card, and K ``manage.py db_worker`` processes run the decided
runs. Their CPU is counted apart (``workers``): in cores while the reviewers decide, like the
others', and per decision from the level's start until the queue has drained (every run decided in
the level has ended; PostgreSQL's per decision too), so the web and worker figures per decision
together are the whole cost of a decision. ``--redis URL`` gives the processes that
channel layer (production's, docs/deploy.md); without it live events go through the database's
outbox, as with any layer that cannot leave its process.

Then exactly-once, from the database and the tool's own log (``check_exactly_once``): every decided
call has exactly one audit row that took effect, with the action and reviewer that were posted; the
runtime's tool appends ``<run> <call> <pid>`` to a file each time it runs (``BENCH_TOOL_LOG``), and
every approved call is there exactly once, no declined or undecided call at all; no call the bench
did not decide was decided; every decided run has ended and left the store.

Prints a table and writes ``bench/results/decide_throughput.json`` (entries of one
``--server-processes``, ``--workers`` and ``--redis`` replace that configuration's, others are kept).

``--profile DIR`` runs each Daphne process under cProfile (``bench/_profiled_server.py``) from the
end of the warm-up to the end of the last level, and writes ``DIR/<P>p-daphne-<i>.pstats`` with its
top entries by cumulative and own time in ``DIR/<P>p-daphne-<i>.txt``. The profiler slows the server
down (about 2x), so a profiled run's figures are not the ones to quote.

    .venv/bin/python bench/decide_throughput.py                        # one Daphne process
    .venv/bin/python bench/decide_throughput.py --server-processes 1 2 --seconds 15
    .venv/bin/python bench/decide_throughput.py --levels 1 --seconds 20 --profile var/profile
    .venv/bin/python bench/decide_throughput.py --workers 1 --levels 1 4 8     # continuations in a worker
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _common import ROOT, analyze_run_tables, p50_p95, scratch_database

sys.path.insert(0, str(ROOT))

from agents_runtime.store import NO_EFFECT_OUTCOMES

RESULTS = ROOT / "bench" / "results" / "decide_throughput.json"
RUNTIME = "bench_api_runtime:decide_runtime"
AGENT = "bench-decide"  # bench_api_runtime.DECIDE_AGENT (not imported: it builds a runtime)
INBOX = f"/agents/{AGENT}/"
LEVELS = (1, 2, 4, 8, 16)
REVIEWERS = max(LEVELS)
PASSWORD = "bench-decide-reviewer"
#: Every DECLINE_EVERY-th decision of a reviewer is a decline (with a reason); the rest approvals.
DECLINE_EVERY = 5
BATCH = 1_000
_CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
_OUTCOME = re.compile(r'class="outcome outcome-(\w+)"')


def reviewer(i: int) -> str:
    return f"bench-reviewer-{i:02d}"


# -- the seeding worker (a subprocess on the scratch database) -------------------------------------


def seed(runs: int) -> None:
    """Migrate, collect static files (DEBUG off), create the reviewers, bulk-copy one real run."""
    import uuid
    from datetime import timedelta

    import django

    sys.path.insert(0, str(ROOT / "bench"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from asgiref.sync import async_to_sync
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from django.db import transaction
    from django.utils import timezone

    from approvals import agents
    from approvals.models import ParkedCallRecord, RunRecord
    from approvals.policy import REVIEWERS as REVIEWERS_GROUP

    call_command("migrate", verbosity=0)
    call_command("collectstatic", "--noinput", verbosity=0)
    group = Group.objects.get(name=REVIEWERS_GROUP)
    for i in range(REVIEWERS):
        User.objects.create_user(reviewer(i), password=PASSWORD).groups.add(group)

    template_run = async_to_sync(agents.get(AGENT).generate)("Refund order A-1001", thread_id=None)
    assert template_run.status == "suspended", template_run
    run = RunRecord.objects.get(run_id=template_run.run_id)
    (call,) = ParkedCallRecord.objects.filter(run=run)
    run_fields = _copied_fields(run, skip={"id", "run_id", "snapshot", "created_at", "suspended_at"})
    call_fields = _copied_fields(call, skip={"id", "run_id", "tool_call_id"})
    snapshot = json.dumps(run.snapshot)
    conversation = run.snapshot["conversation"]
    # pydantic-ai's own ids of the conversation, made unique per copy like the tool call id.
    ids = {call.tool_call_id, conversation["conversation_id"], conversation["messages"][0]["run_id"]}
    run.delete()
    now = timezone.now()
    for start in range(0, runs, BATCH):
        records, calls = [], []
        for i in range(start, min(start + BATCH, runs)):
            new_ids = {old: str(uuid.uuid4()) for old in ids}
            new_ids[call.tool_call_id] = tool_call_id = f"call_{uuid.uuid4().hex[:16]}"
            text = snapshot
            for old, new in new_ids.items():
                text = text.replace(old, new)
            at = now + timedelta(microseconds=i)
            record = RunRecord(
                run_id=uuid.uuid4().hex,
                snapshot=json.loads(text),
                created_at=at,
                suspended_at=at,
                **run_fields,
            )
            records.append(record)
            calls.append(ParkedCallRecord(run=record, tool_call_id=tool_call_id, **call_fields))
        with transaction.atomic():
            RunRecord.objects.bulk_create(records)
            ParkedCallRecord.objects.bulk_create(calls)
    analyze_run_tables()


def _copied_fields(record: Any, *, skip: set[str]) -> dict[str, Any]:
    return {
        f.attname: getattr(record, f.attname)
        for f in type(record)._meta.concrete_fields
        if f.attname not in skip and f.name not in skip
    }


# -- the clients ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    level: int  # 0: the warm-up
    run_id: str
    tool_call_id: str
    action: str  # "approve" | "decline"
    username: str
    status: int  # 0: no HTTP answer
    outcome: str  # what the answer's outcome card says ("" when none)
    ms: float
    ended: float  # perf_counter() when the answer was read


class Reviewer:
    """One reviewer: a keep-alive connection, logged in, with the CSRF token of the inbox's forms."""

    def __init__(self, index: int, base_url: str) -> None:
        from tests.support.burst import Browser

        self.username = reviewer(index)
        self.browser = Browser(base_url, timeout=120)
        self.decided = 0
        for sample in self.browser.log_in(self.username, PASSWORD):
            assert sample.status in {200, 302}, (self.username, sample)
        sample, html = self.browser.request("inbox", "GET", INBOX)
        match = _CSRF_INPUT.search(html)
        assert sample.status == 200 and match, (self.username, sample, html[:300])
        self.csrf_token = match.group(1)

    def decide(self, level: int, run_id: str, tool_call_id: str) -> Decision:
        self.decided += 1
        action = "decline" if self.decided % DECLINE_EVERY == 0 else "approve"
        form = {"csrfmiddlewaretoken": self.csrf_token, "agent": AGENT, "next": INBOX}
        if action == "decline":
            form["reason"] = "Not this one (throughput bench)"
        path = f"/runs/{run_id}/calls/{tool_call_id}/{action}"
        sample, html = self.browser.request(action, "POST", path, form, htmx=True)
        outcome = _OUTCOME.search(html)
        return Decision(
            level,
            run_id,
            tool_call_id,
            action,
            self.username,
            sample.status,
            outcome.group(1) if outcome else "",
            sample.ms,
            time.perf_counter(),
        )


class Runs:
    """The seeded calls, each handed out once."""

    def __init__(self, calls: list[tuple[str, str]]) -> None:
        self._calls: Iterator[tuple[str, str]] = iter(calls)
        self._lock = threading.Lock()
        self.exhausted = False

    def take(self) -> tuple[str, str] | None:
        with self._lock:
            taken = next(self._calls, None)
            self.exhausted |= taken is None
            return taken


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime


def _cpu_seconds(pids: list[int], ticks_before: list[int]) -> float:
    """The CPU the processes ``pids`` used since their ``_cpu_ticks`` were ``ticks_before``."""
    used = sum(_cpu_ticks(pid) - before for pid, before in zip(pids, ticks_before, strict=True))
    return used / os.sysconf("SC_CLK_TCK")


def _postgres_ticks(database: str) -> int:
    """CPU of the PostgreSQL backends connected to ``database`` (their title names it)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f" {database} " in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    total += _cpu_ticks(int(entry.name))
            except OSError:
                continue
    return total


def _machine_busy() -> tuple[int, int]:
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _drain(database_url: str, run_ids: list[str], timeout: float = 600) -> None:
    """Waits until none of ``run_ids`` is in the run store any more (the workers ran them all)."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(database_url, autocommit=True) as conn:
        while conn.execute(
            "SELECT count(*) FROM approvals_run WHERE run_id = ANY(%s)", (run_ids,)
        ).fetchone() != (0,):
            if time.monotonic() > deadline:
                raise AssertionError(f"the workers did not run the level's runs within {timeout} s")
            time.sleep(0.05)


def level(
    n: int,
    reviewers: list[Reviewer],
    runs: Runs,
    seconds: float,
    servers: list[int],
    database_url: str,
    workers: list[int],
) -> dict[str, Any]:
    """N reviewers deciding for ``seconds``; the figures and the decisions. With ``workers``, their
    CPU is counted until they have run every run decided here."""
    database = database_url.rsplit("/", 1)[1]
    hz = os.sysconf("SC_CLK_TCK")
    decisions: list[Decision] = []
    lock = threading.Lock()
    barrier = threading.Barrier(n + 1)
    stop_at = [float("inf")]  # set just before the start

    def work(r: Reviewer) -> None:
        mine = []
        barrier.wait()
        while time.perf_counter() < stop_at[0] and (taken := runs.take()) is not None:
            mine.append(r.decide(n, *taken))
        with lock:
            decisions.extend(mine)

    threads = [threading.Thread(target=work, args=(r,)) for r in reviewers[:n]]
    for thread in threads:
        thread.start()
    own, pg, busy = resource.getrusage(resource.RUSAGE_SELF), _postgres_ticks(database), _machine_busy()
    server = [_cpu_ticks(pid) for pid in servers]
    worker = [_cpu_ticks(pid) for pid in workers]
    started = time.perf_counter()
    stop_at[0] = started + seconds
    barrier.wait()
    for thread in threads:
        thread.join()
    elapsed = max((d.ended for d in decisions), default=started) - started
    own_after, busy_after = resource.getrusage(resource.RUSAGE_SELF), _machine_busy()
    wall = time.perf_counter() - started
    client_cpu = (own_after.ru_utime + own_after.ru_stime) - (own.ru_utime + own.ru_stime)
    server_cpu = _cpu_seconds(servers, server)
    pg_cpu = (_postgres_ticks(database) - pg) / hz
    # The workers' and PostgreSQL's CPU while the reviewers decided (the machine's shares), then until
    # the workers have run every run decided here (the cost per decision).
    worker_cpu = _cpu_seconds(workers, worker)
    drained, worker_all, pg_all = 0.0, worker_cpu, pg_cpu
    if workers:
        _drain(database_url, [d.run_id for d in decisions])
        drained = time.perf_counter() - started
        worker_all = _cpu_seconds(workers, worker)
        pg_all = (_postgres_ticks(database) - pg) / hz
    machine = (busy_after[0] - busy[0]) / max(1, busy_after[1] - busy[1]) * (os.cpu_count() or 1)
    p50, p95 = p50_p95([d.ms for d in decisions]) if decisions else (0.0, 0.0)
    ms_each = 1000 / max(1, len(decisions))
    return {
        "reviewers": n,
        "decisions": len(decisions),
        "seconds": round(elapsed, 2),
        "decisions_per_s": round(len(decisions) / elapsed, 1) if elapsed else 0.0,
        "p50_ms": p50,
        "p95_ms": p95,
        "failed": sum(d.status != 200 or d.outcome != _answer(bool(workers)) for d in decisions),
        # With workers: from the level's start until they had run all its runs.
        "drained_s": round(drained, 2),
        "cpu_cores": {
            "clients": round(client_cpu / wall, 2),
            "daphne": round(server_cpu / wall, 2),
            "workers": round(worker_cpu / wall, 2),
            "postgres": round(pg_cpu / wall, 2),
            "machine": round(machine, 2),
            # Everything else on the machine meanwhile (other work sharing its CPUs).
            "others": round(machine - (client_cpu + server_cpu + worker_cpu + pg_cpu) / wall, 2),
        },
        "cpu_ms_per_decision": {
            "clients": round(client_cpu * ms_each, 2),
            "daphne": round(server_cpu * ms_each, 2),
            "workers": round(worker_all * ms_each, 2),
            "postgres": round(pg_all * ms_each, 2),
        },
        "pool_exhausted": runs.exhausted,
        "_decisions": decisions,
    }


def _answer(in_workers: bool) -> str:
    """The outcome the decision's answer shows: the run's end, or "continuing" when workers run it."""
    return "continuing" if in_workers else "completed"


# -- exactly-once -----------------------------------------------------------------------------------


def check_exactly_once(
    decisions: Iterable[tuple[str, str, str, str]],
    audit: Iterable[tuple[str, str, str, str, str]],
    executions: Iterable[tuple[str, str]],
    in_store: Iterable[tuple[str, str, str | None]],
) -> list[str]:
    """What is wrong (empty: nothing): ``decisions`` are what the clients posted, ``(run, call,
    action, username)``; ``audit`` every audit row, ``(run, call, action, outcome, username)``;
    ``executions`` every line of the tool's log, ``(run, call)``; ``in_store`` every call still in the
    run store, ``(run, call, action or None)``."""
    problems: list[str] = []
    posted: dict[tuple[str, str], list[tuple[str, str]]] = collections.defaultdict(list)
    for run_id, call_id, action, username in decisions:
        posted[(run_id, call_id)].append((action, username))
    effective: dict[tuple[str, str], list[tuple[str, str, str]]] = collections.defaultdict(list)
    for run_id, call_id, action, outcome, username in audit:
        if outcome not in NO_EFFECT_OUTCOMES:
            effective[(run_id, call_id)].append((action, outcome, username))
    ran = collections.Counter(executions)
    store = {(run_id, call_id): action for run_id, call_id, action in in_store}
    for call, sent in posted.items():
        label = f"{call[0]}/{call[1]}"
        if len(sent) > 1:
            problems.append(f"{label}: posted {len(sent)} times by the bench ({sent})")
        action, username = sent[0]
        rows = effective.get(call, [])
        if len(rows) != 1:
            problems.append(f"{label}: {len(rows)} audit rows took effect, not 1: {rows}")
        elif rows[0] != (action, "completed", username):
            problems.append(f"{label}: audit row {rows[0]}, posted {action} by {username}")
        expected = 1 if action == "approve" else 0
        if ran[call] != expected:
            problems.append(f"{label}: {action}d, the tool ran {ran[call]} times")
        if call in store:
            problems.append(f"{label}: still in the run store (action {store[call]})")
    for call, rows in effective.items():
        if call not in posted:
            problems.append(f"{call[0]}/{call[1]}: decided though no reviewer posted it: {rows}")
    for call, count in ran.items():
        if call not in posted:
            problems.append(f"{call[0]}/{call[1]}: the tool ran {count} times on a call nobody decided")
    for call, stored in store.items():
        if stored is not None and call not in posted:
            problems.append(f"{call[0]}/{call[1]}: {stored} in the store, nobody decided it")
    return problems


def read_record(database_url: str, tool_log: Path) -> dict[str, list[tuple[Any, ...]]]:
    import psycopg

    with psycopg.connect(database_url) as conn:
        audit = conn.execute(
            "SELECT run_id, tool_call_id, action, outcome, username FROM approvals_auditentry"
        ).fetchall()
        in_store = conn.execute(
            "SELECT r.run_id, c.tool_call_id, c.action FROM approvals_parked_call c"
            " JOIN approvals_run r ON r.id = c.run_id"
        ).fetchall()
        ended = conn.execute("SELECT run_id, status FROM approvals_ended_run").fetchall()
    lines = tool_log.read_text().splitlines() if tool_log.exists() else []
    executions = [(run_id, call_id) for run_id, call_id, _pid in (line.split() for line in lines)]
    return {"audit": audit, "in_store": in_store, "ended": ended, "executions": executions}


# -- the driver -------------------------------------------------------------------------------------


@contextmanager
def servers(
    env: dict[str, str], count: int, logs: Path, profiles: list[Path], workers: int
) -> Iterator[tuple[list[Any], list[Any]]]:
    """``count`` Daphne processes, under cProfile when ``profiles`` names a stats file for each, and
    ``workers`` task workers."""
    from tests.support import server

    with ExitStack() as stack:
        daphnes = [server.Daphne(env, logs / f"daphne-{i}.log") for i in range(count)]
        for daphne, stats in zip(daphnes, profiles, strict=False):
            daphne.env = {**env, "BENCH_PROFILE": str(stats)}
            python, _, _, *arguments = daphne.command  # python -m daphne ...
            daphne.command = [python, str(ROOT / "bench" / "_profiled_server.py"), *arguments]
        db_workers = [server.db_worker(env, logs / f"worker-{i}.log", f"bench-{i}") for i in range(workers)]
        stack.enter_context(server.running(*daphnes, *db_workers))
        yield daphnes, db_workers


def profile_tops(stats_path: Path, rows: int = 15) -> str:
    """The profile's top ``rows`` entries by cumulative time, then by own time."""
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(str(stats_path), stream=out)
    for order in ("cumulative", "tottime"):
        stats.sort_stats(order).print_stats(rows)
    return out.getvalue()


def _profiling(pids: list[int], profiles: list[Path], signal_number: int) -> None:
    """Starts (SIGUSR1) or stops and writes (SIGUSR2) the servers' profilers."""
    for pid in pids:
        os.kill(pid, signal_number)
    if signal_number == signal.SIGUSR2:
        deadline = time.monotonic() + 60
        while not all(p.exists() for p in profiles) and time.monotonic() < deadline:
            time.sleep(0.2)
        for stats in profiles:
            tops = profile_tops(stats)
            stats.with_suffix(".txt").write_text(tops)
            print(f"profile {stats}:\n{tops}", file=sys.stderr)


def one_configuration(processes: int, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    with (
        scratch_database("postgres", "countersign_bench_decide") as database_url,
        tempfile.TemporaryDirectory(prefix="bench-decide-") as tmp,
    ):
        tool_log = Path(tmp) / "tool-executions.log"
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"REDIS_URL", "TASKS_BACKEND", "DATABASE_URL", "AGENTS_MODEL"}
        }
        env.update(
            TASKS_BACKEND="database" if args.workers else "immediate",
            REDIS_URL=args.redis,
            DATABASE_URL=database_url,
            DJANGO_SETTINGS_MODULE="config.settings",
            AGENTS_RUNTIME=RUNTIME,
            PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "bench")]),
            LOG_LEVEL="WARNING",
            DEBUG="0",
            SECURE_COOKIES="0",  # plain HTTP on 127.0.0.1
            STATIC_ROOT=str(Path(tmp) / "static"),
            SECRET_KEY="bench-decide-" + "x" * 50,
            BENCH_TOOL_LOG=str(tool_log),
            # The decision itself, taken at once: with an undo window the view only holds it.
            DECISION_UNDO_SECONDS="0",
        )
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--seed", "--runs", str(args.runs)], cwd=ROOT, env=env, check=True
        )
        print(
            f"[{processes}p] seeded {args.runs:,} runs in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
        import psycopg

        with psycopg.connect(database_url) as conn:
            calls = conn.execute(
                "SELECT r.run_id, c.tool_call_id FROM approvals_parked_call c"
                " JOIN approvals_run r ON r.id = c.run_id ORDER BY r.suspended_at"
            ).fetchall()
        runs = Runs([(run_id, call_id) for run_id, call_id in calls])
        rows, decisions = [], []
        logs.mkdir(parents=True, exist_ok=True)
        profiles = (
            [args.profile.resolve() / f"{processes}p-daphne-{i}.pstats" for i in range(processes)]
            if args.profile
            else []
        )
        for stats in profiles:
            stats.parent.mkdir(parents=True, exist_ok=True)
            stats.unlink(missing_ok=True)
        with servers(env, processes, logs, profiles, args.workers) as (daphnes, workers):
            pids = [d.popen.pid for d in daphnes]
            worker_pids = [w.popen.pid for w in workers]
            reviewers = [Reviewer(i, daphnes[i % processes].url) for i in range(REVIEWERS)]
            for r in reviewers:  # warm-up, every reviewer and process: pools, caches, imports
                for _ in range(2):
                    taken = runs.take()
                    assert taken is not None
                    decisions.append(r.decide(0, *taken))
            if workers:
                _drain(database_url, [d.run_id for d in decisions])
            if profiles:
                _profiling(pids, profiles, signal.SIGUSR1)
            for n in args.levels:
                row = level(n, reviewers, runs, args.seconds, pids, database_url, worker_pids)
                decisions += row.pop("_decisions")
                rows.append(row)
                print(f"[{processes}p] N={n}: {json.dumps(row)}", file=sys.stderr)
            if profiles:
                _profiling(pids, profiles, signal.SIGUSR2)
            for r in reviewers:
                r.browser.close()
        record = read_record(database_url, tool_log)
    errors = [
        line
        for log in sorted(logs.glob("*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if "Error" in line or "Traceback" in line
    ]
    problems = check_exactly_once(
        [(d.run_id, d.tool_call_id, d.action, d.username) for d in decisions],
        record["audit"],
        record["executions"],
        record["in_store"],
    )
    ended = dict(record["ended"])
    problems += [
        f"{d.run_id}: ended {ended.get(d.run_id)!r}" for d in decisions if ended.get(d.run_id) != "completed"
    ]
    level_of = {d.run_id: d.level for d in decisions}
    by_level = collections.Counter(level_of.get(re.split("[/: ]", p, maxsplit=1)[0], -1) for p in problems)
    for row in rows:
        row["exactly_once_problems"] = by_level.get(row["reviewers"], 0)
    bad = [d for d in decisions if d.status != 200 or d.outcome != _answer(args.workers > 0)]
    return {
        "server_processes": processes,
        "workers": args.workers,
        "redis": bool(args.redis),
        "runs_seeded": args.runs,
        "seconds_per_level": args.seconds,
        "levels": rows,
        "decisions_checked": len(decisions),
        "audit_rows": len(record["audit"]),
        "tool_executions": len(record["executions"]),
        "exactly_once": not problems,
        "problem_count": len(problems),
        "problems": problems[:50],
        "failed_requests": [asdict(d) for d in bad[:20]],
        "server_log_errors": sorted(set(errors))[:20],
    }


def report(entries: list[dict[str, Any]]) -> None:
    print(
        f"{'procs':>5} {'N':>3} {'decided':>7} {'dec/s':>7} {'p50 ms':>8} {'p95 ms':>8} {'failed':>6}"
        f" {'cpu clients':>11} {'daphne':>6} {'workers':>7} {'pg':>5} {'others':>6}"
        f" {'ms/dec daphne':>13} {'workers':>7} {'once':>5}"
    )
    for e in entries:
        for row in e["levels"]:
            cpu, ms, wrong = row["cpu_cores"], row["cpu_ms_per_decision"], row["exactly_once_problems"]
            print(
                f"{e['server_processes']:5} {row['reviewers']:3} {row['decisions']:7}"
                f" {row['decisions_per_s']:7} {row['p50_ms']:8} {row['p95_ms']:8} {row['failed']:6}"
                f" {cpu['clients']:11} {cpu['daphne']:6} {cpu['workers']:7} {cpu['postgres']:5}"
                f" {cpu['others']:6} {ms['daphne']:13} {ms['workers']:7} {'ok' if wrong == 0 else wrong:>5}"
            )
        verdict = "ok" if e["exactly_once"] else f"FAILED: {e['problem_count']} problems"
        print(
            f"{e['server_processes']} process(es), {e['workers']} worker(s)"
            f"{', Redis' if e['redis'] else ''}:"
            f" {e['decisions_checked']} decisions checked"
            f" (warm-up included), exactly-once {verdict}; {e['audit_rows']} audit rows,"
            f" {e['tool_executions']} tool executions"
        )
        for problem in e["problems"][:10]:
            print(f"  {problem}")


def save(entries: list[dict[str, Any]]) -> None:
    kept: list[dict[str, Any]] = json.loads(RESULTS.read_text()) if RESULTS.exists() else []

    def key(e: dict[str, Any]) -> tuple[Any, ...]:
        return e.get("server_processes"), e.get("workers", 0), e.get("redis", False)

    replaced = {key(e) for e in entries}
    kept = [e for e in kept if key(e) not in replaced]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(kept + entries, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server-processes", type=int, nargs="+", default=[1])
    parser.add_argument("--levels", type=int, nargs="+", default=list(LEVELS), choices=list(LEVELS))
    parser.add_argument("--seconds", type=float, default=15.0, help="how long each level decides")
    parser.add_argument("--runs", type=int, default=8_000, help="suspended runs to seed (enough for all)")
    parser.add_argument(
        "--workers", type=int, default=0, help="continuations in this many db_worker processes (0: inline)"
    )
    parser.add_argument("--redis", default="", help="REDIS_URL of the processes (default: none, the outbox)")
    parser.add_argument("--logs", type=Path, default=None, help="keep the servers' logs in this folder")
    parser.add_argument(
        "--profile", type=Path, default=None, help="profile the servers; their stats in this folder"
    )
    parser.add_argument("--seed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed:
        seed(args.runs)
        return
    entries = []
    with tempfile.TemporaryDirectory(prefix="bench-decide-logs-") as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        for processes in args.server_processes:
            entries.append(one_configuration(processes, args, logs / f"{processes}p"))
    report(entries)
    save(entries)
    print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
