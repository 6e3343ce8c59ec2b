"""What the benchmarks share: percentiles, a scratch database per backend, fresh table statistics.

Each benchmark runs its measuring worker in a subprocess whose ``DATABASE_URL`` points at a scratch
database (``scratch_database``), so the figures never touch a developer's data.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent


def demo_server_env(**overrides: str) -> dict[str, str]:
    """The environment of a worker that serves the demo's agents as production would, in process:
    production settings (no query log, cached templates), the scripted demo model, the in-process
    channel layer, continuations run at once; ``overrides`` (``DATABASE_URL=...``) on top."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "AGENTS_RUNTIME": "demo.agents:runtime",
        "AGENTS_MODEL": "",  # the scripted demo model
        "REDIS_URL": "",
        "TASKS_BACKEND": "immediate",
        "DEBUG": "false",
        "ALLOWED_HOSTS": "testserver",
        "LOG_LEVEL": "WARNING",
        **overrides,
    }


def worker_report(command: Sequence[str], env: dict[str, str]) -> Any:
    """Run a bench's worker process (its output on stderr is shown as it goes); the JSON it printed
    last on stdout, its report."""
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, check=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def p50_p95(samples: list[float]) -> tuple[float, float]:
    """Median and 95th percentile (nearest rank) in the samples' unit, to two decimals."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return round(statistics.median(ordered), 2), round(p95, 2)


def postgres_url(database: str) -> str:
    """``database`` on the server of ``DATABASE_URL`` (default: the local one, as role root)."""
    url = os.environ.get("DATABASE_URL", "")
    if urlsplit(url).scheme not in {"postgres", "postgresql", "pgsql"}:
        url = "postgres://root@127.0.0.1:5432/postgres"
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


def bare_connection() -> Any:
    """A psycopg connection (autocommit) to ``DATABASE_URL``, for a bench's hand-written statements.

    Its session time zone is ``UTC``, as Django sets on its own connections (``TIME_ZONE``): psycopg
    reads a timestamp 2.5-3x faster in ``UTC`` than under any other zone name, the server's default
    ``Etc/UTC`` included (0.3-0.6 us against 0.8-1.8 us here), which made the bare twin of a page of
    50 runs ~6% slower than the floor it stands for.
    """
    import psycopg

    return psycopg.connect(
        os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1),
        autocommit=True,
        options="-c TimeZone=UTC",
    )


@contextmanager
def scratch_database(backend: str, name: str) -> Iterator[str]:
    """A ``DATABASE_URL`` of an empty database, removed afterwards: a temporary SQLite file, or a
    PostgreSQL database ``<name>_<random>`` created and dropped here."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
            yield f"sqlite:///{tmp}/bench.sqlite3"
        return
    if backend != "postgres":
        raise ValueError(f"unknown backend {backend!r} (sqlite or postgres)")
    import psycopg

    admin_url = postgres_url("postgres")
    database = f"{name}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    try:
        yield postgres_url(database)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def analyze_run_tables() -> None:
    """Fresh planner statistics after bulk seeding (call in the worker, after ``django.setup()``)."""
    from django.db import connection

    from approvals.models import ParkedCallRecord, RunRecord

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for model in (ParkedCallRecord, RunRecord):
                cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")
        else:
            cursor.execute("ANALYZE")


def next_id(table: str) -> int:
    """The first free primary key of ``table`` (rows seeded with explicit ids start there)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f'SELECT COALESCE(MAX(id), 0) + 1 FROM "{table}"')
        (found,) = cursor.fetchone()
    return int(found)


def insert_rows(table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Bulk-load ``rows`` (values as the database takes them, JSON as text) into ``table``: COPY on
    PostgreSQL (psycopg's ``cursor.copy``), multi-row INSERTs on SQLite. Rows with explicit ids move
    PostgreSQL's id sequence past them afterwards."""
    from django.db import connection

    names = ", ".join(f'"{c}"' for c in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f'COPY "{table}" ({names}) FROM STDIN') as copy:
                for row in rows:
                    copy.write_row(row)
            if "id" in columns:
                cursor.execute(
                    f"SELECT setval(pg_get_serial_sequence('\"{table}\"', 'id'), MAX(id)) FROM \"{table}\""
                )
            return
        adapt = connection.ops.adapt_datetimefield_value
        per_statement = max(1, 900 // len(columns))  # SQLite's limit on parameters per statement
        batch: list[Any] = []

        def flush() -> None:
            if batch:
                marks = ", ".join([f"({', '.join(['%s'] * len(columns))})"] * (len(batch) // len(columns)))
                cursor.execute(f'INSERT INTO "{table}" ({names}) VALUES {marks}', batch)
                batch.clear()

        for row in rows:
            batch.extend(adapt(v) if isinstance(v, datetime) else v for v in row)
            if len(batch) >= per_statement * len(columns):
                flush()
        flush()
