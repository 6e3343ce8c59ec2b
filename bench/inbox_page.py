"""Benchmark: server time of the agent inbox page (50 cards) and the overview at 10,000 suspended runs
(``--sizes 10000,1000000``: also at a million, each size's figures against 10,000's in the same run).

Seeds N suspended runs of the demo agent ``ops`` (the release engineer) with COPY (PostgreSQL) or
multi-row INSERTs (SQLite) into the store's tables, in a fresh database: SQLite (a temporary file)
and PostgreSQL (a database ``countersign_bench_inbox_<random>`` on the server of ``DATABASE_URL``, default
``postgres://root@127.0.0.1:5432/``, created here and dropped at the end). The runs look like the
demo's: three in four wait for the approval of a ``deploy_service`` call, one in four for the answer
to a ``request_change_window`` call, whose card carries the resume form built from the tool's
schema (five fields: string, integer, boolean, enum, string); the schemas, payloads and snapshot are
copied from real runs of the demo agents.

Then, in the same process, Django's test ``Client`` (``force_login`` as a member of Admins) asks for
``/agents/ops/?per_page=50`` (page 1, oldest first: the default), so the figures are server time: URL routing,
middleware (sessions, CSRF, CSP...), the view, the runtime's ``list_suspended_runs`` on the Django
store, building the cards and their forms, and rendering. Cases:

- ``page``: the whole page, as a browser's first load;
- ``partial (HX-Request)``: the ``run-list`` partial that htmx swaps in (filters, paging, live refetch);
- ``floor: partial, no cards``: the partial's request with everything but its cards: the middleware,
  the session and the user, the access check, the filter form, the listing and the claims and held
  decisions of its runs, and the partial's markup around an empty list. What a page of cards can cost
  no less than, whatever its cards' markup; the partial's figure over it is what the cards cost;
- ``overview``: ``/agents/``, every agent with its count of waiting runs and the oldest;
- ``inbox by deadline``: the page in deadline order (``sort=deadline``);
- ``queue``: ``/queue/``, the reviewer's queue across agents (20 cards) with its filters' suggestions;
- ``queue, tool filter``: the queue filtered by part of a tool's name (``?tool=deploy``);
- ``queue, thread filter``: the queue filtered by a thread (``?thread=release-123``, one in 500).

Each case: warm-up requests, then ``--requests`` timed ones (at least 30), the two cases taking
turns so that both see the same machine; wall time is what is reported, the process's CPU time is
printed beside it (on a busy machine it tells the work from the waiting). After the timings, one
request of each case is taken apart (its queries from every thread and their time; the view's steps
timed alone; with ``--profile``, the functions with the most own time), so that a missed target says
what is slow. ``--per-page 20`` shows the default page size (not saved).

Prints a table and writes ``bench/results/inbox_page.json`` as a list of
``{backend, n, case, p50_ms, p95_ms, server_cpu_ms}`` (the last the process's CPU, p50). Targets: p50
<= 50 ms; at a larger size, p50 <= 1.5x its p50 at 10,000 (issue 15).

    .venv/bin/python bench/inbox_page.py                       # both backends, 10,000 runs
    .venv/bin/python bench/inbox_page.py --backends sqlite --profile
    .venv/bin/python bench/inbox_page.py --backends postgres --sizes 10000,1000000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from _common import (
    ROOT,
    analyze_run_tables,
    demo_server_env,
    insert_rows,
    next_id,
    p50_p95,
    scratch_database,
    worker_report,
)

RESULTS = ROOT / "bench" / "results" / "inbox_page.json"
AGENT = "ops"
PER_PAGE = 50
TARGET_P50_MS = 50.0
T0 = datetime(2026, 10, 1, tzinfo=UTC)
SERVICES = ["billing-api", "search", "checkout", "ledger", "payments", "notifications", "auth", "catalog"]
FLOOR = "floor: partial, no cards"
CASES = {
    "page": {},
    "partial (HX-Request)": {"HX-Request": "true"},
    FLOOR: {"HX-Request": "true"},
    "overview": {},
    "inbox by deadline": {},
    "queue": {},
    "queue, tool filter": {},
    "queue, thread filter": {},
}
#: Cases on another page than the inbox's first: the overview (counts per agent), the inbox in
#: deadline order, the reviewer's queue across agents, and the queue filtered by part of a tool's name
#: and by a thread (one of the 500 the runs are spread over).
PATHS = {
    "overview": "/agents/",
    "inbox by deadline": f"/agents/{AGENT}/?per_page={PER_PAGE}&sort=deadline",
    "queue": "/queue/",
    "queue, tool filter": "/queue/?tool=deploy",
    "queue, thread filter": "/queue/?thread=release-123",
}
#: The queue's cards a page (its default).
QUEUE_PAGE = 20
#: How much slower the largest size may be than 10,000 (issue 15).
GROWTH = 1.5


# -- the worker: one backend, in a process whose DATABASE_URL points at a fresh database -----------


def worker(sizes: list[int], requests: int, warmup: int, profile: bool) -> dict[str, Any]:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    backend = connection.vendor
    results = []
    anatomy: dict[str, Any] = {}
    seconds: dict[int, float] = {}
    for n in sizes:
        started = time.perf_counter()
        seed(n)
        seeded = time.perf_counter() - started
        seconds[n] = round(seeded, 1)
        print(f"[{backend}] seeded {n:,} runs in {seeded:.1f} s", file=sys.stderr, flush=True)

        client = _client()
        url = f"/agents/{AGENT}/?per_page={PER_PAGE}"
        timings = _timed(client, url, requests=requests, warmup=warmup)
        for case, headers in CASES.items():
            wall, cpu, size = timings[case]
            p50, p95 = p50_p95(wall)
            name = case if PER_PAGE == 50 or case in PATHS else f"{case}, {PER_PAGE} cards"
            row = {"backend": backend, "n": n, "case": name, "p50_ms": p50, "p95_ms": p95}
            results.append({**row, "server_cpu_ms": p50_p95(cpu)[0]})
            if n == sizes[-1]:
                found = _anatomy(client, PATHS.get(case, url), headers, case, profile=profile)
                anatomy[case] = {"bytes": size, "cpu": p50_p95(cpu), **found}
    anatomy["parts"] = _parts(requests)
    return {"results": results, "anatomy": anatomy, "seconds": seconds}


def _templates() -> dict[str, Any]:
    """Real parked calls of the demo agents (schemas, payload shapes) and a real snapshot to copy."""
    from asgiref.sync import async_to_sync

    from approvals import agents
    from approvals.models import RunRecord

    runtime = agents.runtime()
    ops = runtime.get_agent(AGENT)
    store = ops.storage
    window = async_to_sync(ops.generate)("deploy billing-api to production", thread_id="bench-template")
    deploy = async_to_sync(ops.generate)("deploy search to staging", thread_id="bench-template")
    found = {}
    for name, result in (("window", window), ("deploy", deploy)):
        assert result.status == "suspended", result
        stored = store.get_run(result.run_id)
        assert stored is not None and stored.snapshot is not None
        found[name] = stored
    RunRecord.objects.filter(run_id__in=[window.run_id, deploy.run_id]).delete()
    return found


def seed(n: int) -> None:
    """Empty the run tables, then bulk-load n suspended runs of ``ops`` with one parked call each,
    like the demo's (COPY on PostgreSQL, multi-row INSERTs on SQLite)."""
    from django.db import connection, transaction

    from approvals.models import ParkedCallRecord, RunRecord

    tables = [ParkedCallRecord._meta.db_table, RunRecord._meta.db_table]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"TRUNCATE {', '.join(tables)}")
        else:
            for table in tables:
                cursor.execute(f"DELETE FROM {table}")
    real = _templates()
    window_call, deploy_call = real["window"].calls[0], real["deploy"].calls[0]
    dumped = {name: json.dumps(stored.snapshot) for name, stored in real.items()}
    window_json = {
        name: json.dumps(getattr(window_call, name))
        for name in ("suspend_schema", "resume_schema", "context")
    }
    deploy_context = json.dumps(deploy_call.context)
    rng = random.Random(n)
    first = next_id(RunRecord._meta.db_table)
    runs: list[tuple[Any, ...]] = []
    calls: list[tuple[Any, ...]] = []
    for pk in range(first, first + n):
        created = T0 + timedelta(seconds=rng.randrange(30 * 86_400))
        service = rng.choice(SERVICES)
        asks_for_window = rng.random() < 0.25
        run_id = uuid.UUID(int=rng.getrandbits(128)).hex
        thread_id, resource_id = f"release-{rng.randrange(500)}", f"team-{rng.randrange(40)}"
        suspended = created + timedelta(seconds=rng.randrange(3_600))
        snapshot = dumped["window" if asks_for_window else "deploy"]
        runs.append((pk, run_id, AGENT, thread_id, resource_id, created, suspended, "suspended", 1, False))
        runs[-1] += (snapshot, "[]")
        call_id = f"call_{uuid.UUID(int=rng.getrandbits(128)).hex[:16]}"
        if asks_for_window:
            payload = {"service": service, "question": f"When may we deploy {service} to production?"}
            # Why the call waits, as the demo's call carries it (the card's "why").
            row: list[Any] = [pk, 0, call_id, window_call.tool_name, window_call.kind]
            row += [json.dumps({"service": service}), json.dumps(payload), window_json["suspend_schema"]]
            row += [window_json["resume_schema"], window_json["context"], "[]"]
            calls.append(tuple(row))
        else:
            version = f"v{rng.randrange(1, 5)}.{rng.randrange(20)}.{rng.randrange(10)}"
            environment = rng.choice(["staging", "production"])
            args = json.dumps({"service": service, "version": version, "environment": environment})
            calls.append(
                (
                    pk,
                    0,
                    call_id,
                    deploy_call.tool_name,
                    deploy_call.kind,
                    args,
                    None,
                    None,
                    None,
                    deploy_context,
                    "[]",
                )
            )
    run_columns: tuple[str, ...] = (
        "id",
        "run_id",
        "agent_id",
        "thread_id",
        "resource_id",
        "created_at",
        "suspended_at",
    )
    run_columns += ("status", "version", "interrupted", "snapshot", "history")
    call_columns: tuple[str, ...] = (
        "run_id",
        "position",
        "tool_call_id",
        "tool_name",
        "kind",
        "args",
        "suspend_payload",
    )
    call_columns += ("suspend_schema", "resume_schema", "context", "votes")
    with transaction.atomic():
        insert_rows(RunRecord._meta.db_table, run_columns, runs)
        insert_rows(ParkedCallRecord._meta.db_table, call_columns, calls)
    analyze_run_tables()
    connection.close()


def _client() -> Any:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(username="bench-reviewer")
    user.groups.add(Group.objects.get(name="Admins"))
    client = Client()
    client.force_login(user)
    return client


def _get(client: Any, url: str, headers: dict[str, str], case: str = "") -> int:
    with _without_cards() if case == FLOOR else contextlib.nullcontext():
        response = client.get(url, headers=headers)
    assert response.status_code == 200, (response.status_code, response.content[:500])
    body = response.content
    if url.startswith(f"/agents/{AGENT}/"):
        cards = 0 if case == FLOOR else PER_PAGE
        assert body.count(b'class="card run-card') == cards, f"expected {cards} cards"
    if url.startswith("/queue/"):
        cards = body.count(b'class="card run-card')
        assert cards == QUEUE_PAGE or ("thread=" in url and 0 < cards < QUEUE_PAGE), f"{cards} cards"
    return len(body)


@contextlib.contextmanager
def _without_cards() -> Iterator[None]:
    """The inbox view as it is, but its cards neither built nor written (their reads still made)."""
    from approvals import queries
    from approvals.views import pages

    def reads_only(request: Any, runs: list[Any], *args: Any, **kwargs: Any) -> list[Any]:
        run_ids = [run.run_id for run in runs]
        queries.call_claims(run_ids)
        queries.call_holds(run_ids)
        return []

    built = pages._cards
    pages._cards = reads_only  # type: ignore[assignment]
    try:
        yield
    finally:
        pages._cards = built


def _timed(
    client: Any, url: str, *, requests: int, warmup: int
) -> dict[str, tuple[list[float], list[float], int]]:
    """Wall and CPU milliseconds of each case; the cases take turns, so both see the same machine."""
    sizes = {}
    for _ in range(warmup):  # connections, template and schema caches, imports
        for case, headers in CASES.items():
            sizes[case] = _get(client, PATHS.get(case, url), headers, case)
    wall: dict[str, list[float]] = {case: [] for case in CASES}
    cpu: dict[str, list[float]] = {case: [] for case in CASES}
    for _ in range(requests):
        for case, headers in CASES.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            _get(client, PATHS.get(case, url), headers, case)
            wall[case].append((time.perf_counter() - started) * 1000)
            cpu[case].append((time.process_time() - started_cpu) * 1000)
    return {case: (wall[case], cpu[case], sizes[case]) for case in CASES}


def _anatomy(client: Any, url: str, headers: dict[str, str], case: str, *, profile: bool) -> dict[str, Any]:
    """One request taken apart: its queries (from every thread: the store runs in asgiref's) and time."""
    from django.db.backends.utils import CursorWrapper

    captured: list[tuple[float, str]] = []
    original = CursorWrapper._execute

    def timed_execute(self: Any, sql: str, params: Any, *ignored: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(self, sql, params, *ignored)
        finally:
            captured.append(((time.perf_counter() - started) * 1000, sql))

    CursorWrapper._execute = timed_execute  # type: ignore[method-assign]
    try:
        _get(client, url, headers, case)
    finally:
        CursorWrapper._execute = original  # type: ignore[method-assign]
    queries = [{"ms": round(ms, 2), "sql": " ".join(sql.split())[:150]} for ms, sql in captured]
    found: dict[str, Any] = {"queries": len(queries), "sql_ms": round(sum(q["ms"] for q in queries), 2)}
    found["slowest_queries"] = sorted(queries, key=lambda q: -q["ms"])[:4]
    if profile:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(10):
            _get(client, url, headers, case)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        found["profile"] = out.getvalue()
    return found


def _parts(requests: int) -> dict[str, tuple[float, float]]:
    """The inbox view's steps timed one by one, outside the request cycle (p50, p95 in ms)."""
    from django.contrib.auth import get_user_model
    from django.template import engines
    from django.template.loader import render_to_string
    from django.test import RequestFactory

    from approvals import agents, queries
    from approvals.cards import run as cards
    from approvals.forms.filters import InboxFilterForm

    agent = agents.get(AGENT)
    request = RequestFactory().get(f"/agents/{AGENT}/", {"per_page": PER_PAGE})
    request.user = get_user_model().objects.get(username="bench-reviewer")
    form = InboxFilterForm(request.GET)
    assert form.is_valid()
    page = queries.inbox_page(agent, **form.filters())

    def build() -> list[Any]:
        return [cards.run_card(r, agent_name=agent.name or agent.id, next_url="/") for r in page.runs]

    def render(template: str) -> str:
        context = {"agent": agent, "form": form, "can_decide": True, "page": page, "cards": build()}
        return render_to_string(template, context, request=request)

    # One page's cards, built once: only their markup (the run card's partial, as the list loops
    # over it) is timed.
    built = build()
    card_list = engines["django"].from_string(
        '{% for card in cards %}{% include "approvals/partials/run_card.html#run-card" %}{% endfor %}'
    )

    def cards_alone() -> None:
        card_list.render({"cards": built, "bulk": True, "can_decide": True, "user": request.user})

    steps: dict[str, Callable[[], Any]] = {
        "list_suspended_runs (runtime + store)": lambda: queries.inbox_page(agent, **form.filters()),
        f"build {PER_PAGE} cards (their forms)": build,
        "build + render run-list partial": lambda: render("approvals/inbox.html#run-list"),
        "build + render whole page": lambda: render("approvals/inbox.html"),
        f"  of which the {PER_PAGE} cards alone": cards_alone,
    }
    timed = {}
    for name, step in steps.items():
        for _ in range(3):
            step()
        samples = []
        for _ in range(requests):
            started = time.perf_counter()
            step()
            samples.append((time.perf_counter() - started) * 1000)
        timed[name] = p50_p95(samples)
    return timed


# -- the driver: databases, one worker per backend, the table --------------------------------------


def _run_worker(database_url: str, args: argparse.Namespace) -> dict[str, Any]:
    env = demo_server_env(DATABASE_URL=database_url)
    command = [sys.executable, __file__, "--worker", "--sizes", args.sizes, "--requests", str(args.requests)]
    command += ["--warmup", str(args.warmup), "--per-page", str(args.per_page)]
    command += ["--profile"] if args.profile else []
    report: dict[str, Any] = worker_report(command, env)
    return report


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    with scratch_database(backend, "countersign_bench_inbox") as database_url:
        return _run_worker(database_url, args)


def print_table(results: list[dict[str, Any]]) -> None:
    print(f"{'backend':<12}{'n':>10}  {'case':<32}{'p50 ms':>9}{'p95 ms':>9}")
    for r in results:
        print(f"{r['backend']:<12}{r['n']:>10,}  {r['case']:<32}{r['p50_ms']:9.2f}{r['p95_ms']:9.2f}")


def print_anatomy(backend: str, anatomy: dict[str, Any]) -> None:
    print(f"\n{backend}: where the time goes")
    for case in CASES:
        found = anatomy[case]
        print(
            f"  {case}: {found['bytes'] / 1024:.0f} KiB; CPU p50 {found['cpu'][0]:.1f} ms, p95 "
            f"{found['cpu'][1]:.1f} ms; {found['queries']} queries, {found['sql_ms']:.1f} ms in SQL"
        )
        for query in found["slowest_queries"]:
            print(f"      {query['ms']:6.2f} ms  {query['sql']}")
        if "profile" in found:
            print(found["profile"])
    print("  the view's steps alone (p50 / p95 ms):")
    for name, (p50, p95) in anatomy["parts"].items():
        print(f"      {name:<42}{p50:8.2f}{p95:8.2f}")


def main() -> None:
    global PER_PAGE
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000", help="comma-separated run counts, e.g. 10000,1000000")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--requests", type=int, default=40, help="timed requests per case (at least 30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed requests before each case")
    parser.add_argument("--per-page", type=int, default=PER_PAGE, help="cards on the page (default 50)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of each case")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    PER_PAGE = args.per_page
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    if args.worker:
        print(json.dumps(worker(sizes, args.requests, args.warmup, args.profile)))
        return
    if args.requests < 30:
        parser.error("--requests must be at least 30")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for backend in backends:
        if backend not in {"sqlite", "postgres"}:
            parser.error(f"unknown backend {backend!r}")
    results: list[dict[str, Any]] = []
    anatomies: dict[str, Any] = {}
    for backend in backends:
        report = run_backend(backend, args)
        results.extend(report["results"])
        anatomies[report["results"][0]["backend"]] = report["anatomy"]
        for n, seconds in report["seconds"].items():
            print(
                f"{report['results'][0]['backend']}: seeded {int(n):,} runs in {seconds:.1f} s"
                " (COPY on PostgreSQL, INSERTs on SQLite)"
            )
    print_table(results)
    for backend, anatomy in anatomies.items():
        print_anatomy(backend, anatomy)
    if args.per_page == 50:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nwritten to {RESULTS.relative_to(ROOT)}")
    else:
        print(
            f"\n--per-page {args.per_page}: not written to {RESULTS.relative_to(ROOT)} (the 50-card figures)"
        )
    for r in results:
        base = next(
            (b for b in results if (b["backend"], b["n"], b["case"]) == (r["backend"], 10_000, r["case"])),
            None,
        )
        if base is not None and r["n"] > 10_000:
            ratio = r["p50_ms"] / base["p50_ms"]
            print(f"{r['backend']} {r['case']}: {r['n']:,} / 10,000 = {ratio:.2f}x (target <= {GROWTH}x)")
            if ratio > GROWTH:
                print(f"TARGET MISSED: {r['backend']} {r['case']}: {ratio:.2f}x its p50 at 10,000")
    for r in results:
        if r["p50_ms"] > TARGET_P50_MS:
            print(f"TARGET MISSED: {r['backend']} {r['case']}: p50 {r['p50_ms']} ms > {TARGET_P50_MS:.0f} ms")


if __name__ == "__main__":
    main()
