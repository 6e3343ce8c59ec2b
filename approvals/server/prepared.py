"""Cursors for the run store's fixed statements: prepared on PostgreSQL, the usual cursor elsewhere.

A listing's or a run's read is the same SQL every time with other values (``reads`` compiles each
shape once). Sent the ORM's way, with the values quoted into the text, PostgreSQL parses and plans it
anew on every call: about half a millisecond of a one-millisecond listing. Here the values are bound
on the server and the statement is prepared on its connection the first time it runs there
(psycopg keeps the names, at most ``prepared_max`` per connection, and prepares again after a
``DISCARD``); later calls send only the values. Their timestamps are read by psycopg's own loader
when the session is in UTC, as Django's always is unless ``TIME_ZONE`` says otherwise (see ``cursor``).

Django leaves psycopg's automatic preparing off for the sake of transaction-pooling proxies, and that
stays so for every other query: only these cursors ask for it, statement by statement.
``DATABASE_PREPARED_STATEMENTS=0`` turns them off too, behind a proxy that cannot keep prepared
statements (PgBouncer before 1.21, or without ``max_prepared_statements``).
"""

from __future__ import annotations

from datetime import UTC
from functools import cache
from typing import Any, cast

from django.conf import settings
from django.db import connections
from django.db.backends.utils import CursorWrapper

#: Never prepared by count (psycopg's threshold): only by the explicit ``prepare=True`` below.
_BY_COUNT_NEVER = 2**31 - 1


def cursor(using: str) -> CursorWrapper:
    """A cursor on ``using``'s connection whose statements are prepared (PostgreSQL, unless turned
    off), or its usual cursor. Either goes through the connection's execute wrappers."""
    connection = connections[using]
    # Where queries are logged (DEBUG, a test's CaptureQueriesContext) the usual cursor: Django's
    # log shows a statement with its values only as client-side binding sends it.
    if (
        connection.vendor != "postgresql"
        or not settings.DATABASE_PREPARED_STATEMENTS
        or connection.queries_logged
    ):
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw = connection.connection
        if raw.prepare_threshold is None:
            raw.prepare_threshold = _BY_COUNT_NEVER
        connection.validate_thread_sharing()
        prepared = _prepared_cursor_class()(raw)
        if connection.timezone is UTC and raw.info.timezone is UTC:
            # Django's loader of timestamptz wraps psycopg's in Python to set the tzinfo of every value
            # to ``connection.timezone``; in a UTC session psycopg's own (in C) already gives that
            # tzinfo, at a fraction of the cost per value (bench/list_suspended_runs.py, docs/scaling.md).
            prepared.adapters.register_loader("timestamptz", _timestamptz_loader())
        return connection.make_cursor(prepared)


@cache
def _timestamptz_loader() -> type[Any]:
    from psycopg.types.datetime import TimestamptzLoader

    return TimestamptzLoader


@cache
def _prepared_cursor_class() -> type[Any]:
    # Imported here: the PostgreSQL backend's module needs psycopg, which a SQLite-only setup may lack.
    from django.db.backends.postgresql.base import ServerBindingCursor

    class PreparedCursor(ServerBindingCursor):
        def execute(
            self, query: Any, params: Any = None, *, prepare: bool | None = None, **kwargs: Any
        ) -> Any:
            return cast(Any, super()).execute(query, params, prepare=True, **kwargs)

    return PreparedCursor
