"""Cursors for fixed statements (the run store's, a request's fixed reads): prepared on PostgreSQL, the
usual cursor elsewhere.

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

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any, cast

from django.conf import settings
from django.db import connections, router
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


# -- fixed reads --------------------------------------------------------------------------------------

#: Compiled fixed reads by (name, database alias, vendor): their SQL and, for each parameter, the name
#: of the value that goes there (None: a constant of the query, sent as compiled).
_fixed: dict[tuple[str, str, str], tuple[str, tuple[tuple[str | None, Any], ...]]] = {}
_fixing = threading.Lock()


def fixed_rows(
    name: str, model: type[Any], build: Callable[..., Any], **values: Any
) -> list[tuple[Any, ...]]:
    """The rows of a read every request makes, the same query with other values.

    ``build(**stand_ins)`` makes the query (a ``values_list()`` queryset of ``model``'s database) with
    a stand-in of the same type in place of each of ``values``; it is compiled the first time for the
    database and run with ``values`` in their places from then on. Building and compiling such a
    queryset cost more of the server's CPU than its round trip. Values are ids, names and times (the
    last adapted for the database as the ORM would); rows come as the cursor gives them, unconverted.
    """
    using = router.db_for_read(model)
    connection = connections[using]
    key = (name, using, connection.vendor)
    compiled = _fixed.get(key)
    if compiled is None:
        with _fixing:
            compiled = _fixed[key] = _compile(connection, using, build, values)
    sql, slots = compiled
    params = [constant if slot is None else _adapted(connection, values[slot]) for slot, constant in slots]
    with cursor(using) as fixed:
        fixed.execute(sql, params)
        return cast(list[tuple[Any, ...]], fixed.fetchall())


def _compile(
    connection: Any, using: str, build: Callable[..., Any], values: dict[str, Any]
) -> tuple[str, tuple[tuple[str | None, Any], ...]]:
    stand_ins = {name: _stand_in(position, value) for position, (name, value) in enumerate(values.items())}
    sql, params = build(**stand_ins).query.get_compiler(using).as_sql()
    by_sent = {repr(_adapted(connection, stand_in)): name for name, stand_in in stand_ins.items()}
    slots = tuple((by_sent.get(repr(param)), param) for param in params)
    if {slot for slot, _ in slots} - {None} != set(values):
        raise AssertionError(f"A fixed read does not hold each of its values as sent: {sql}")
    return sql, tuple((slot, None if slot else param) for slot, param in slots)


def _stand_in(position: int, value: Any) -> Any:
    if isinstance(value, datetime):
        return datetime(2001, 2, 3, 4, 5, 6, 700 + position, tzinfo=UTC)
    if isinstance(value, int):
        # Within a 32-bit column's range: the ORM drops a lookup of a value that a column cannot hold.
        return -1_734_091_700 - position
    if isinstance(value, str):
        return f"countersign-stand-in-{position}"
    raise TypeError(f"No stand-in for a {type(value).__name__} in a fixed read")


def _adapted(connection: Any, value: Any) -> Any:
    return connection.ops.adapt_datetimefield_value(value) if isinstance(value, datetime) else value
