"""Benchmark: the audit log's page at 1,000,000 and 10,000,000 rows on PostgreSQL, each read against its
floor, and what the indexes that carry it cost on insert.

Seeds the audit table of a scratch database (``countersign_audit_bench_<random>`` on the server of
``DATABASE_URL``, created here and dropped at the end) with COPY: a year of decisions at ~27,000 a
day over eight agents (one with 40% of the rows), 200 reviewers (a few decide most), the demo's kinds
of calls (refunds with an order id and a note, deploys, e-mails, payments; input calls' requests)
and its outcomes (2% failed, 0.3% invalid attempts...). The table's secondary indexes are dropped
before the COPY and built afterwards, each timed (the way to load a log this size; the figures say
what building each costs). Sizes grow in place: ``--sizes 1000000,10000000`` copies 1,000,000 rows,
measures, then copies 9,000,000 more and measures again; the rows are in time order, so the 1-day
window and the later pages hold the same rows at both sizes.

Cases, each the audit page's read for a member of Admins (every agent visible, invalid attempts
left out as the page leaves them): the 51 rows of the page and the count (in the page's order, it
stops at 1,001, a search's at 251; not read when the first page holds every match), built
as the view builds them (``AuditEntry.objects...matching(...)``, ``queries.audit_page``) and turned
into the page's rows (``cards.audit.audit_rows``: titles, agent names, links). Its **floor** is the
same two statements written by hand and run on a bare psycopg connection, fetching the same rows:
the two take turns, call by call. Cases: the newest page, one agent, one reviewer, one outcome
(``failed``), a 1-day window, a search inside the arguments for an order id (one row) and for a word
in 2% of them, then page 100 of the newest, of the agent and of the outcome, reached by following
each page's "Next" (the page starts below the previous page's last row: no offset). Also the
filter form's choices (``queries.audit_choices``: the agents, reviewers and tools in the log), which
every request of the page reads. And the API's ``GET /api/v1/audit``, page 1 and page 100 (it pages
with an offset; its total is counted up to 1,000 past the page's start).

The insert cost: the decision row's own INSERT (``approvals.store.insert_sql``) ``--inserts``
times in a transaction rolled back, with every index, then with the indexes migration 0034 adds
dropped in that transaction (rolled back with it), in turns.

Prints the figures and, at the largest size, each case's plans (EXPLAIN ANALYZE of the statements as
the ORM sends them), and writes all of it to ``bench/results/audit_log.json``. Target (issue 34): each case
<= 50 ms p95; page 100 as fast as page 1.

    .venv/bin/python bench/audit_log.py                           # 1,000,000 then 10,000,000 rows
    .venv/bin/python bench/audit_log.py --sizes 100000 --calls 30  # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from _common import ROOT, bare_connection, p50_p95, scratch_database, worker_report

RESULTS = ROOT / "bench" / "results" / "audit_log.json"
TARGET_P95_MS = 50.0
TABLE = "approvals_auditentry"
T0 = datetime(2025, 12, 1, tzinfo=UTC)
#: Rows a day: 10,000,000 rows make a year.
PER_DAY = 27_400
AGENTS = [f"agent-{i}" for i in range(8)]
AGENT_WEIGHTS = [40, 15, 12, 10, 8, 7, 5, 3]
REVIEWERS = [f"reviewer-{i:03d}" for i in range(200)]
REVIEWER_WEIGHTS = [1 / (i + 1) for i in range(200)]
NOTES = [
    "customer asked twice", "damaged in transit", "late delivery", "wrong size", "duplicate charge",
    "goodwill", "item never arrived", "cancelled order", "price match", "subscription lapse",
    "warranty claim", "missing parts", "partial refund", "store credit refused", "card expired",
    "gift return", "return label lost", "bank dispute", "courier lost it", "please expedite",
]  # fmt: skip
#: (weight, action, outcome, channel)
KINDS = [
    (60, "approve", "completed", "dashboard"),
    (12, "decline", "completed", "dashboard"),
    (8, "resume", "suspended_again", "api"),
    (6, "approve", "continuing", "api"),
    (5, "expire", "expired", "deadline"),
    (4, "approve", "vote_recorded", "dashboard"),
    (2.7, "approve", "lost_race", "dashboard"),
    (2, "approve", "failed", "dashboard"),
    (0.3, "approve", "invalid", "dashboard"),
]
COPY_COLUMNS = (
    "created_at", "parked_at", "username", "agent_id", "run_id", "thread_id", "resource_id",
    "tool_call_id", "tool_name", "args", "suspend_payload", "action", "reason", "edited_args",
    "outcome", "outcome_detail", "channel", "fingerprint",
)  # fmt: skip
#: What migration 0034 adds (the insert cost compares with and without them).
NEW_INDEXES = ("audit_args_trgm", "audit_outcome_created", "audit_tool_created")
PAGE_COLUMNS = (
    "id, created_at, user_id, username, agent_id, run_id, thread_id, resource_id, tool_call_id,"
    " tool_name, args, suspend_payload, action, reason, resume_data, edited_args, outcome,"
    " outcome_detail, channel, batch_id, grant_id, parked_at"
)
ARGS_TEXT = (
    "UPPER((COALESCE(args::text, suspend_payload::text, '') || ' ' || COALESCE(edited_args::text, ''))::text)"
)


def _setup() -> None:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()


# -- seeding -------------------------------------------------------------------------------------


def _row(i: int, rng: random.Random) -> tuple[Any, ...]:
    _, action, outcome, channel = rng.choices(KINDS, [k[0] for k in KINDS])[0]
    at = T0 + timedelta(seconds=i * 86_400 / PER_DAY + rng.uniform(0, 2))
    agent = rng.choices(AGENTS, AGENT_WEIGHTS)[0]
    user = "" if channel == "deadline" else rng.choices(REVIEWERS, REVIEWER_WEIGHTS)[0]
    kind = i % 10
    args: str | None = None
    payload: str | None = None
    edited: str | None = None
    if kind < 5:
        tool = "refund"
        cents = rng.randrange(100, 200_000)
        note = NOTES[rng.randrange(len(NOTES))]
        args = f'{{"order_id": "A-{i:08d}", "amount_cents": {cents}, "note": "{note}"}}'
        if action == "approve" and rng.random() < 0.02:
            edited = f'{{"order_id": "A-{i:08d}", "amount_cents": {cents // 2}, "note": "{note}"}}'
    elif kind < 7:
        tool = "deploy_service"
        args = f'{{"service": "svc-{i % 40}", "version": "v2.{i % 17}.{i % 9}", "environment": "production"}}'
    elif kind < 8:
        tool = "send_email"
        args = f'{{"to": "customer{i % 50_000}@example.com", "subject": "Your order {i % 90_000}"}}'
    elif kind < 9:
        tool = "pay_vendor"
        args = f'{{"vendor": "vendor-{i % 300}", "amount_cents": {rng.randrange(1000, 5_000_000)}}}'
    else:
        tool = "request_change_window"
        payload = f'{{"system": "db-{i % 60}", "question": "When may we take db-{i % 60} down?"}}'
    parked = None if outcome == "lost_race" else at - timedelta(seconds=rng.expovariate(1 / 900))
    return (
        at, parked, user, agent, f"run-{i}", f"thread-{i % 100_000}", f"customer-{i % 50_000}",
        f"call-{i}", tool, args, payload, action, "", edited, outcome, "", channel, "",
    )  # fmt: skip


def _indexes() -> list[tuple[str, str]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname <> %s"
            " ORDER BY indexname",
            [TABLE, f"{TABLE}_pkey"],
        )
        return list(cursor.fetchall())


def seed(start: int, stop: int, indexes: list[tuple[str, str]]) -> dict[str, Any]:
    """Rows ``start`` to ``stop`` by COPY, the secondary indexes dropped first and built again after
    (each timed, with its size); then VACUUM ANALYZE."""
    from django.db import connection

    rng = random.Random(start)
    report: dict[str, Any] = {"rows": stop - start}
    with connection.cursor() as cursor:
        for name, _ in indexes:
            cursor.execute(f"DROP INDEX IF EXISTS {name}")
        started = time.perf_counter()
        with cursor.cursor.copy(f"COPY {TABLE} ({', '.join(COPY_COLUMNS)}) FROM STDIN") as copy:
            for i in range(start, stop):
                copy.write_row(_row(i, rng))
        report["copy_s"] = round(time.perf_counter() - started, 1)
        print(f"  copied {stop - start:,} rows in {report['copy_s']} s", file=sys.stderr, flush=True)
        cursor.execute("SET maintenance_work_mem = '512MB'")
        built = {}
        for name, definition in indexes:
            started = time.perf_counter()
            cursor.execute(definition)
            cursor.execute("SELECT pg_relation_size(%s)", [name])
            (size,) = cursor.fetchone()
            built[name] = {"build_s": round(time.perf_counter() - started, 1), "mib": round(size / 2**20)}
            print(f"  built {name}: {built[name]}", file=sys.stderr, flush=True)
        report["indexes"] = built
        started = time.perf_counter()
        cursor.execute(f"VACUUM ANALYZE {TABLE}")
        report["vacuum_analyze_s"] = round(time.perf_counter() - started, 1)
        cursor.execute(f"SELECT pg_relation_size('{TABLE}'), pg_total_relation_size('{TABLE}')")
        table, total = cursor.fetchone()
        report["table_mib"], report["total_mib"] = round(table / 2**20), round(total / 2**20)
    return report


# -- the cases -----------------------------------------------------------------------------------


def _cases(n: int) -> dict[str, dict[str, Any]]:
    """Each case's filters (the view's keyword arguments of ``matching``); the window is a day the
    first million rows already hold."""
    day = T0 + timedelta(days=min(18, n // PER_DAY // 2))
    return {
        "newest": {},
        "agent": {"agent_id": AGENTS[3]},
        "reviewer": {"username": REVIEWERS[40]},
        "outcome failed": {"outcome": "failed"},
        "1-day window": {"start": day, "end": day + timedelta(days=1) - timedelta(microseconds=1)},
        "args: an order id": {"in_args": f"a-{n // 3 - (n // 3) % 10:08d}"},
        "args: a word in 2%": {"in_args": "expedite"},
    }


#: Page 100 of these cases (their first page is the case itself).
DEEP = ("newest", "agent", "outcome failed")


def _count_limit(filters: dict[str, Any]) -> int:
    """Where the page's count stops for these filters (a search stops sooner, as the view says)."""
    from approvals import queries

    return queries.AUDIT_SEARCH_COUNT_LIMIT if queries.is_search(filters) else queries.AUDIT_COUNT_LIMIT


def _bare_where(filters: dict[str, Any]) -> tuple[str, list[Any]]:
    """The hand-written WHERE of a case: what ``matching`` asks, as one would write it."""
    from approvals.models import json_fragment

    where, params = [f"agent_id IN ({', '.join(['%s'] * len(AGENTS))})"], list(AGENTS)
    if "outcome" in filters:
        where.append("outcome = %s")
        params.append(filters["outcome"])
    else:
        where.append("outcome <> 'invalid'")
    for key, column in (("agent_id", "agent_id"), ("username", "username")):
        if key in filters:
            where.append(f"{column} = %s")
            params.append(filters[key])
    if "in_args" in filters:
        fragment = json_fragment(filters["in_args"]).replace("\\", "\\\\").replace("%", "\\%")
        where.append(f"{ARGS_TEXT} LIKE UPPER(%s)")
        params.append(f"%{fragment.replace('_', chr(92) + '_')}%")
    if "start" in filters:
        where.append("created_at >= %s AND created_at <= %s")
        params += [filters["start"], filters["end"]]
    return " AND ".join(where), params


def _bare(conn: Any, filters: dict[str, Any], after: tuple[datetime, int] | None) -> list[Any]:
    import psycopg

    where, params = _bare_where(filters)
    # Values bound in the client, as Django binds them: the planner sees the same constants (a
    # server-side parameter would get a generic plan after five calls, blind to the pattern).
    with psycopg.ClientCursor(conn) as cursor:
        page_where, page_params = where, params
        if after is not None:
            page_where += " AND created_at <= %s AND NOT (created_at = %s AND id >= %s)"
            page_params = [*params, after[0], after[0], after[1]]
        cursor.execute(
            f"SELECT {PAGE_COLUMNS} FROM {TABLE} WHERE {page_where}"
            " ORDER BY created_at DESC, id DESC LIMIT 51",
            page_params,
        )
        rows = cursor.fetchall()
        if after is not None or len(rows) > 50:
            cursor.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {TABLE} WHERE {where}"
                f" ORDER BY created_at DESC, id DESC LIMIT {_count_limit(filters) + 1}) s",
                params,
            )
            cursor.fetchone()
        return rows


def _orm(filters: dict[str, Any], after: tuple[datetime, int] | None) -> Any:
    from approvals import queries
    from approvals.cards.audit import audit_rows
    from approvals.models import AuditEntry

    entries = AuditEntry.objects.filter(agent_id__in=AGENTS).matching(include_invalid=False, **filters)
    page = queries.audit_page(entries.select_related(None), after=after, searching=queries.is_search(filters))
    audit_rows(page.entries)
    return page


def _page_100(filters: dict[str, Any]) -> tuple[datetime, int] | None:
    """Where page 100 starts: below the last row of page 99, following "Next" from the top."""
    after = None
    for _ in range(99):
        page = _orm(filters, after)
        if page.next_after is None:
            return None
        after = (page.next_after.created_at, page.next_after.pk)
    return after


def _timed_pair(filters: dict[str, Any], after: Any, conn: Any, calls: int) -> dict[str, Any]:
    orm, bare = [], []
    for i in range(calls + 3):
        started = time.perf_counter()
        page = _orm(filters, after)
        middle = time.perf_counter()
        rows = _bare(conn, filters, after)
        ended = time.perf_counter()
        assert [e.pk for e in page.entries] == [r[0] for r in rows[:50]], "the floor reads other rows"
        if i >= 3:  # warm-up
            orm.append((middle - started) * 1000)
            bare.append((ended - middle) * 1000)
    (p50, p95), (floor50, floor95) = p50_p95(orm), p50_p95(bare)
    return {
        "p50_ms": p50, "p95_ms": p95, "floor_p50_ms": floor50, "floor_p95_ms": floor95,
        "count": page.count, "capped": page.count_capped,
    }  # fmt: skip


def _plans(filters: dict[str, Any], after: tuple[datetime, int] | None) -> dict[str, str]:
    """EXPLAIN ANALYZE of the count and of the page as the ORM sends them: what a slow case reads."""
    from approvals import queries
    from approvals.models import AuditEntry

    entries = AuditEntry.objects.filter(agent_id__in=AGENTS).matching(include_invalid=False, **filters)
    count = entries[: _count_limit(filters) + 1]
    page = (entries.below(*after) if after is not None else entries)[: queries.AUDIT_PER_PAGE + 1]
    return {
        "count": count.explain(analyze=True, buffers=True),
        "page": page.explain(analyze=True, buffers=True),
    }


def _api_timed(page: int, calls: int) -> tuple[float, float, dict[str, Any]]:
    """``GET /api/v1/audit?page=<page>`` as its view reads it (``_audit_page``: an offset page and
    the total counted in the page's order up to its limit), for an access to the bench's agents
    (they are not in the registry, so the access stands in for an Admins user's)."""
    from types import SimpleNamespace

    from approvals.api.v1 import schemas, views

    access = SimpleNamespace(agent_ids=frozenset(AGENTS), require=lambda *args, **kwargs: None)
    query = schemas.AuditQuery(page=page, per_page=50)
    samples = []
    for i in range(calls + 3):
        started = time.perf_counter()
        found = views._audit_page(access, query)  # type: ignore[arg-type]
        if i >= 3:  # warm-up
            samples.append((time.perf_counter() - started) * 1000)
    p50, p95 = p50_p95(samples)
    return p50, p95, {"count": found.total, "capped": found.total_capped}


def measure(n: int, calls: int, plans: dict[str, Any]) -> list[dict[str, Any]]:
    from approvals import queries

    conn = bare_connection()
    results = []
    cases = _cases(n)
    for name, filters in cases.items():
        found = _timed_pair(filters, None, conn, calls)
        results.append({"n": n, "case": name, **found})
        plans[name] = _plans(filters, None)
        print(f"  {name}: {found}", file=sys.stderr, flush=True)
    for name in DEEP:
        after = _page_100(cases[name])
        if after is None:
            continue  # fewer than 100 pages at this size
        found = _timed_pair(cases[name], after, conn, calls)
        results.append({"n": n, "case": f"{name}, page 100", **found})
        plans[f"{name}, page 100"] = _plans(cases[name], after)
        print(f"  {name}, page 100: {found}", file=sys.stderr, flush=True)
    for page in (1, 100):
        p50, p95, total = _api_timed(page, calls)
        results.append({"n": n, "case": f"API newest, page {page}", "p50_ms": p50, "p95_ms": p95, **total})
        print(f"  API newest, page {page}: {p50} / {p95} ms {total}", file=sys.stderr, flush=True)
    samples = []
    for _ in range(min(calls, 10)):
        started = time.perf_counter()
        queries.audit_choices(AGENTS)
        samples.append((time.perf_counter() - started) * 1000)
    p50, p95 = p50_p95(samples)
    results.append({"n": n, "case": "filter choices", "p50_ms": p50, "p95_ms": p95})
    print(f"  filter choices: {p50} / {p95} ms", file=sys.stderr, flush=True)
    conn.close()
    return results


def insert_cost(inserts: int, rounds: int) -> dict[str, Any]:
    """Per-insert time of the decision row's INSERT with every index and without migration 0034's,
    in transactions rolled back, taking turns."""
    from django.db import connection
    from django.utils import timezone

    from approvals import store as audit

    values = {
        "created_at": timezone.now(), "username": "reviewer-001", "agent_id": AGENTS[0], "run_id": "run-x",
        "thread_id": "t", "resource_id": "r", "tool_call_id": "call-x", "tool_name": "refund",
        "args": {"order_id": "A-99999999", "amount_cents": 89000, "note": "please expedite"},
        "action": "approve", "reason": "", "outcome": "continuing", "outcome_detail": "",
        "channel": "dashboard", "parked_at": timezone.now(),
    }  # fmt: skip
    sql, params = audit.insert_sql(None), audit.insert_params(values, connection)
    conn = bare_connection()
    timings: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(rounds):
        for case in ("with", "without"):
            conn.execute("BEGIN")
            if case == "without":
                for name in NEW_INDEXES:
                    conn.execute(f"DROP INDEX {name}")
            with conn.cursor() as cursor:
                for _ in range(inserts):
                    started = time.perf_counter()
                    cursor.execute(sql, params)
                    timings[case].append((time.perf_counter() - started) * 1000)
            conn.execute("ROLLBACK")
    conn.close()
    found = {}
    for case, samples in timings.items():
        p50, p95 = p50_p95(samples)
        found[case] = {"mean_ms": round(sum(samples) / len(samples), 3), "p50_ms": p50, "p95_ms": p95}
    found["inserts"] = inserts * rounds
    return found


def worker(sizes: list[int], calls: int, inserts: int) -> dict[str, Any]:
    _setup()
    from django.core.management import call_command
    from django.db import connection

    # Everything the cases run, loaded now: the code measured is the code as it was at the start.
    import approvals.cards.audit
    import approvals.queries
    import approvals.store  # noqa: F401

    call_command("migrate", verbosity=0)
    assert connection.vendor == "postgresql", "the audit bench is PostgreSQL's"
    indexes = _indexes()
    assert {name for name, _ in indexes} >= set(NEW_INDEXES), indexes
    results, seeding, inserting, plans = [], {}, {}, {}
    done = 0
    for n in sizes:
        print(f"[{n:,} rows]", file=sys.stderr, flush=True)
        seeding[n] = seed(done, n, indexes)
        done = n
        plans[n] = {}
        results += measure(n, calls, plans[n])
        inserting[n] = insert_cost(inserts, rounds=6)
        print(f"  inserts: {inserting[n]}", file=sys.stderr, flush=True)
    return {"results": results, "seeding": seeding, "inserts": inserting, "plans": plans}


# -- the driver ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000000,10000000", help="row counts, growing")
    parser.add_argument("--calls", type=int, default=40, help="timed calls per case (at least 30)")
    parser.add_argument("--inserts", type=int, default=500, help="inserts per block (six blocks each way)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    if args.worker:
        print(json.dumps(worker(sizes, args.calls, args.inserts), default=str))
        return
    if sizes != sorted(sizes):
        parser.error("--sizes must grow")
    with scratch_database("postgres", "countersign_audit_bench") as url:
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "REDIS_URL": "",
            "DEBUG": "false",
            "LOG_LEVEL": "WARNING",
        }
        command = [sys.executable, __file__, "--worker", "--sizes", args.sizes, "--calls", str(args.calls)]
        report = worker_report([*command, "--inserts", str(args.inserts)], env)
    print(f"{'n':>11}  {'case':<28}{'p50 ms':>8}{'p95 ms':>8}{'floor p50':>11}{'floor p95':>11}  count")
    for r in report["results"]:
        floor = f"{r['floor_p50_ms']:11.2f}{r['floor_p95_ms']:11.2f}" if "floor_p50_ms" in r else " " * 22
        count = f"{r['count']:,}{'+' if r.get('capped') else ''}" if "count" in r else ""
        print(f"{r['n']:>11,}  {r['case']:<28}{r['p50_ms']:8.2f}{r['p95_ms']:8.2f}{floor}  {count}")
    for n, seeded in report["seeding"].items():
        print(f"seeded {int(n):,}: {json.dumps(seeded)}")
    for n, cost in report["inserts"].items():
        print(f"inserts at {int(n):,}: {json.dumps(cost)}")
    largest = str(sizes[-1])
    print(f"\nplans at {int(largest):,} rows (EXPLAIN ANALYZE, as the ORM sends them):")
    for case, found in report["plans"][largest].items():
        print(f"-- {case}: count\n{found['count']}\n-- {case}: page\n{found['page']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")
    for r in report["results"]:
        if r["p95_ms"] > TARGET_P95_MS:
            print(f"TARGET MISSED: {r['n']:,} {r['case']}: p95 {r['p95_ms']} ms > {TARGET_P95_MS:.0f} ms")


if __name__ == "__main__":
    main()
