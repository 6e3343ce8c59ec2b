"""Database access from the async server, in three parts, each replacing one framework part and
saying below what it replaces, why, and when to delete it:

- **Threads** (``run_sync``, ``RequestThreads``): which thread runs database work for async code, and
  every request's connections given back (replaces asgiref's per-call thread hops and Django's
  request-end clean-up under ASGI).
- **The pool** (``ConnectionPool``, its figures, ``outage``): psycopg's pool, failing a request
  within ``DATABASE_UNREACHABLE_SECONDS`` when the server cannot be reached, its figures in the log
  (psycopg's pool reports nothing by itself), which errors mean the database is out of reach.
  ``approvals.server.postgresql`` is Django's backend building that pool.
- **Prepared statements** (``cursor``, ``fixed_rows``, ``fixed_models``): the run store's and a
  request's fixed statements prepared once per connection on PostgreSQL (Django prepares none),
  compiled once per process (Django builds and compiles a query each time); the signed-in session's
  read among them (``SessionStore``, the ``SESSION_ENGINE``), an API token's, the webhook endpoints',
  a page's claims and held decisions (a list of ids: compiled once for each length).

One module because they are one job: how the app's async server reaches its database (a request's
thread holds one pooled connection, on which the fixed statements are prepared)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, NamedTuple, cast

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.contrib.sessions.backends import db as db_sessions
from django.db import close_old_connections, connections, models, router
from django.db.backends.utils import CursorWrapper
from django.db.models.query import get_related_populators
from django.utils import timezone
from psycopg import OperationalError as PsycopgOperationalError
from psycopg_pool import ConnectionPool as PsycopgPool
from psycopg_pool import PoolTimeout

# Threads ------------------------------------------------------------------------------------------
# Which thread runs database work for async code, and how every such thread gives its connection back.
#
# Django's database connections belong to threads. Under Daphne each HTTP request has one thread of its
# own for its synchronous code (sync middleware, the view). Two rules keep a request to one connection
# at a time and return every connection to the pool:
#
# - ``run_sync``: the run store's methods, called by the runtime from async code, run thread-sensitive.
#   Under a view that called the runtime through ``async_to_sync``, that is the request's own thread, on
#   the connection the request already holds; never a worker thread that would need a second one (ten
#   requests holding a pool of ten while their worker threads waited for an eleventh deadlocked the
#   pool). The same goes for ``db_worker`` and management commands. From purely async code (consumers,
#   the outbox relay) it is asgiref's one shared thread, which no request cycle cleans up; the store
#   gives the connection back after each call there (the store's ``connection_scope``), as Channels'
#   ``database_sync_to_async`` does for other ORM calls.
# - ``RequestThreads``: each request's thread gives its connections back once it has nothing left to
#   run (``close_old_connections``: to the pool on PostgreSQL, ``CONN_MAX_AGE`` 0; a SQLite connection,
#   kept for the thread's life, only when unusable), even when the request was cancelled (the client
#   went away) while its view still ran. Django's own clean-up (``request_finished``) is skipped or
#   fails in that case, and the thread then ended holding its connection: a pool slot lost for good,
#   until a server had none left.
#
# Delete ``RequestThreads`` when Django closes a request's connections however its request ended
# (cancelled included) under ASGI; ``run_sync`` stays while the store is synchronous code called from
# the runtime's async code.

ASGIApp = Callable[..., Any]


async def run_sync[T](fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on the thread that owns the caller's database connection (see above)."""
    return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)


class RequestThreads:
    """ASGI middleware: one thread at a time per HTTP request for its sync code, whose connections
    are closed when it is done, whatever became of the request.

    This is the thread Django would give the request anyway (its handler enters a
    ``ThreadSensitiveContext`` of its own, which defers to this one); the differences are the ending
    and the reuse. The clean-up is queued on the thread itself, so it runs after anything the thread
    still has to do (a view outliving its cancelled request) and no cancellation can drop it. Only
    once it has run does the thread wait for the next request: starting a thread per request cost
    a quarter of a millisecond on the event loop.
    """

    #: Threads kept waiting for requests beyond those busy; more are ended.
    IDLE_THREADS = 32

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._idle: list[ThreadPoolExecutor] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            executor = self._idle.pop()
        except IndexError:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="countersign-request")
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
        finally:
            executor.submit(close_old_connections).add_done_callback(lambda _: self._release(executor))

    def _release(self, executor: ThreadPoolExecutor) -> None:
        # (Once its clean-up is done: on the executor's thread, or on the loop's if it was done before
        # the callback was added; list appends and pops are atomic either way.)
        if len(self._idle) < self.IDLE_THREADS:
            self._idle.append(executor)
        else:
            executor.shutdown(wait=False)


# The pool -----------------------------------------------------------------------------------------
# The PostgreSQL connection pool: psycopg's, told when the server cannot be reached; its figures
# in the log now and then, and when the pool ran dry; which errors mean the database is out of reach.
#
# **Unreachable server.** psycopg's pool makes a request wait out its whole ``timeout`` for a
# connection, whatever the reason none comes. That is right when the pool is busy (every connection is
# lent to a request that will give it back) and wrong when the server does not answer: a request then
# failed after 10 s, so a client retrying three times waited 40. ``ConnectionPool`` gives a request at
# most ``unreachable_after`` seconds (``DATABASE_UNREACHABLE_SECONDS``) while the pool is *making* a
# connection, or when its last attempt failed: past that it raises ``DatabaseUnreachable`` (a
# ``PoolTimeout``). A busy pool, with nothing to make, keeps the whole ``timeout``. Delete it when
# psycopg's pool can fail its waiting clients on connection errors (not as of psycopg_pool 3.3).
#
# **Figures.**
#
# psycopg's pool keeps its own figures (``get_stats()``): its size and idle connections, requests
# waiting for one now, how many waited and how long in all, how many timed out, connections lost. This
# part logs them at INFO at most every ``DATABASE_POOL_STATS_SECONDS`` of traffic (from the end of a
# request; 0 turns it off), and at WARNING with the error when a request failed because no connection
# came within the pool's ``timeout`` (``DATABASE_POOL_TIMEOUT``). ``pool_stats()`` hands them to anyone
# else who wants them. SQLite has no pool: nothing is logged.

logger = logging.getLogger(__name__)


class DatabaseUnreachable(PoolTimeout):
    """No connection: the pool could not make one (its attempt failed, or has not answered)."""


class ConnectionPool(PsycopgPool):
    """psycopg's pool, whose requests learn within ``unreachable_after`` seconds that the server
    cannot be reached (see the module's docstring)."""

    def __init__(self, *args: Any, unreachable_after: float = 1.0, **kwargs: Any) -> None:
        self.unreachable_after = unreachable_after
        self._attempts_lock = threading.Lock()
        self._connecting = 0
        self._last_attempt_failed = False
        super().__init__(*args, **kwargs)

    def _connect(self, timeout: float | None = None) -> Any:
        with self._attempts_lock:
            self._connecting += 1
        failed = True
        try:
            conn = super()._connect(timeout)
            failed = False
            return conn
        finally:
            with self._attempts_lock:
                self._connecting -= 1
                self._last_attempt_failed = failed

    def cannot_connect(self) -> bool:
        """Whether the pool is failing to make connections: its last attempt failed, or one is
        still going (asked when a request has waited ``unreachable_after``: far longer than a
        connection takes to make)."""
        return self._last_attempt_failed or self._connecting > 0

    def getconn(self, timeout: float | None = None) -> Any:
        whole = self.timeout if timeout is None else timeout
        first = min(whole, self.unreachable_after)
        started = time.monotonic()
        try:
            return super().getconn(first)
        except PoolTimeout:
            if self.cannot_connect():
                raise DatabaseUnreachable(
                    f"cannot reach the database server: no connection made within {first:g} s"
                ) from None
            if first >= whole:
                raise
        # Busy: every connection is lent to a request, which will give it back.
        return super().getconn(max(0.0, whole - (time.monotonic() - started)))


#: The figures worth a log line, in this order (``get_stats`` has a few more).
_SHOWN = (
    "pool_size",
    "pool_available",
    "pool_max",
    "requests_waiting",
    "requests_num",
    "requests_queued",
    "requests_wait_ms",
    "requests_errors",
    "usage_ms",
    "connections_num",
    "connections_lost",
    "returns_bad",
)

_lock = threading.Lock()
_last_logged = time.monotonic()


def pool_stats(using: str = "default") -> dict[str, int] | None:
    """The pool's figures (cumulative counters and current sizes), or None when there is no pool."""
    pool = getattr(connections[using], "pool", None)
    if pool is None:
        return None
    stats: dict[str, int] = pool.get_stats()
    return stats


def describe(stats: dict[str, int]) -> str:
    return " ".join(f"{name}={stats.get(name, 0)}" for name in _SHOWN)


def log_now_and_then(sender: Any = None, **kwargs: Any) -> None:
    """``request_finished``: the pool's figures at INFO, at most every ``DATABASE_POOL_STATS_SECONDS``."""
    global _last_logged
    interval = float(getattr(settings, "DATABASE_POOL_STATS_SECONDS", 60))
    if interval <= 0:
        return
    now = time.monotonic()
    with _lock:
        if now - _last_logged < interval:
            return
        _last_logged = now
    stats = pool_stats()
    if stats is not None:
        logger.info("Database pool: %s", describe(stats))


def log_exhaustion(sender: Any = None, **kwargs: Any) -> None:
    """``got_request_exception``: a request that got no connection in time logs the pool's figures."""
    error = sys.exc_info()[1]
    if not _timed_out(error):
        return
    stats = pool_stats()
    unreachable = any(isinstance(e, DatabaseUnreachable) for e in _causes(error))
    logger.warning(
        "Database unreachable: %s. %s"
        if unreachable
        else "Database pool exhausted: no connection within the pool's timeout (%s). %s",
        error,
        describe(stats) if stats is not None else "",
    )


def _causes(error: BaseException | None) -> list[BaseException]:
    """``error`` and what caused it, nearest first (Django wraps psycopg's errors in its own)."""
    found: list[BaseException] = []
    while error is not None and len(found) < 10:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


def _timed_out(error: BaseException | None) -> bool:
    """Whether ``error`` is (or was caused by) psycopg's ``PoolTimeout``."""
    return any(isinstance(e, PoolTimeout) for e in _causes(error))


#: SQLSTATE classes of a lost or refused connection: 08 connection exception, 57P operator
#: intervention (admin shutdown: ``pg_terminate_backend``, crash shutdown, cannot connect now).
_CONNECTION_LOST = ("08", "57P")


def outage(error: BaseException) -> str | None:
    """How the database failed a request: ``"unreachable"`` (no connection could be had: nothing
    to retry at once), ``"dropped"`` (the connection was lost under it), or None (another error)."""
    for cause in _causes(error):
        if isinstance(cause, PoolTimeout):
            return "unreachable"
        if isinstance(cause, PsycopgOperationalError):
            state = cause.sqlstate
            # (No SQLSTATE: the client lost the server, "server closed the connection unexpectedly".)
            if state is None or state.startswith(_CONNECTION_LOST):
                return "dropped"
            return None
    return None


def log_outage(error: BaseException, *, retried: bool) -> None:
    """A request the database failed, answered 503 (or, ``retried``, read again)."""
    stats = pool_stats()
    figures = describe(stats) if stats is not None else ""
    if retried:
        logger.warning("Database connection lost under a read: reading again (%s). %s", error, figures)
    else:
        logger.warning("Database unavailable: answered 503 (%s). %s", error, figures)


# Prepared statements ------------------------------------------------------------------------------
# Cursors for fixed statements (the run store's, a request's fixed reads): prepared on PostgreSQL, the
# usual cursor elsewhere.
#
# A listing's or a run's read is the same SQL every time with other values (the run store compiles each
# shape once). Sent the ORM's way, with the values quoted into the text, PostgreSQL parses and plans it
# anew on every call: about half a millisecond of a one-millisecond listing. Here the values are bound
# on the server and the statement is prepared on its connection the first time it runs there
# (psycopg keeps the names, at most ``prepared_max`` per connection, and prepares again after a
# ``DISCARD``); later calls send only the values. Their timestamps are read by psycopg's own loader
# when the session is in UTC, as Django's always is unless ``TIME_ZONE`` says otherwise (see ``cursor``).
#
# Django leaves psycopg's automatic preparing off for the sake of transaction-pooling proxies, and that
# stays so for every other query: only these cursors ask for it, statement by statement.
# ``DATABASE_PREPARED_STATEMENTS=0`` turns them off too, behind a proxy that cannot keep prepared
# statements (PgBouncer before 1.21, or without ``max_prepared_statements``).
#
# Delete it when Django can ask for a prepared statement query by query (it has only the
# connection-wide ``prepare_threshold``, which would prepare every query).

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


class _Compiled(NamedTuple):
    """A fixed read, compiled."""

    sql: str
    #: For each parameter, the name of the value that goes there and, for a list of values, the
    #: position in it (name None: a constant, sent as compiled).
    slots: tuple[tuple[str | None, int | None, Any], ...]
    #: The ORM's converters of the selected columns, by position.
    converters: dict[int, tuple[list[Any], Any]]
    #: ``fixed_models``: the model's own columns (first, past the last, their attribute names) and the
    #: populators of its ``select_related`` objects, as Django's ``ModelIterable`` makes them.
    columns: tuple[int, int, tuple[str, ...]] | None
    related: list[Any]


#: Compiled fixed reads by (name, database alias, vendor, the length of each list of values).
_fixed: dict[tuple[str, str, str, tuple[int, ...]], _Compiled] = {}
_fixing = threading.Lock()
#: A read of a longer list is compiled for itself, not kept: one compiled read is kept per length, and
#: a page lists at most 100 runs (``forms.filters.MAX_PER_PAGE``).
LONGEST_KEPT_LIST = 100


def fixed_rows(
    name: str, model: type[Any], build: Callable[..., Any], **values: Any
) -> list[tuple[Any, ...]]:
    """The rows of a read every request makes, the same query with other values.

    ``build(**stand_ins)`` makes the query (a ``values_list()`` queryset of ``model``'s database) with
    a stand-in of the same type in place of each of ``values``; it is compiled the first time for the
    database and run with ``values`` in their places from then on. Building and compiling such a
    queryset cost more of the server's CPU than its round trip. Values are ids, names and times (the
    last adapted for the database as the ORM would), or lists of them (``__in`` lookups: compiled once
    for each length, a page's ids); rows come as the cursor gives them, unconverted.
    """
    return _fixed_read(name, model, build, values, instances=False)[1]


def fixed_models[M: models.Model](
    name: str, model: type[M], build: Callable[..., Any], **values: Any
) -> list[M]:
    """``fixed_rows`` as instances of ``model``: ``build(**stand_ins)`` makes a queryset of them (every
    field, and the objects it ``select_related``), each column converted as the ORM's own iteration
    converts it."""
    compiled, rows, connection = _fixed_read(name, model, build, values, instances=True)
    assert compiled.columns is not None
    first, past, names = compiled.columns
    instances = []
    for fetched in rows:
        row = list(fetched)
        for position, (converters, expression) in compiled.converters.items():
            for convert in converters:
                row[position] = convert(row[position], expression, connection)
        instance = model.from_db(connection.alias, names, row[first:past])
        for populator in compiled.related:
            populator.populate(row, instance)
        instances.append(instance)
    return instances


def _fixed_read(
    name: str, model: type[Any], build: Callable[..., Any], values: dict[str, Any], *, instances: bool
) -> tuple[_Compiled, list[tuple[Any, ...]], Any]:
    using = router.db_for_read(model)
    connection = connections[using]
    shape = tuple(len(value) for value in values.values() if isinstance(value, list))
    key = (name, using, connection.vendor, shape)
    compiled = _fixed.get(key)
    if compiled is None:
        with _fixing:
            compiled = _compile(connection, using, build, values, instances=instances)
            if max(shape, default=0) <= LONGEST_KEPT_LIST:
                _fixed[key] = compiled
    params = [
        constant
        if slot is None
        else _adapted(connection, values[slot] if index is None else values[slot][index])
        for slot, index, constant in compiled.slots
    ]
    with cursor(using) as fixed:
        fixed.execute(compiled.sql, params)
        return compiled, cast(list[tuple[Any, ...]], fixed.fetchall()), connection


def _compile(
    connection: Any, using: str, build: Callable[..., Any], values: dict[str, Any], *, instances: bool
) -> _Compiled:
    stand_ins: dict[str, Any] = {}
    by_sent: dict[str, tuple[str, int | None]] = {}
    for position, (name, value) in enumerate(values.items()):
        if isinstance(value, list):
            stand_ins[name] = [_stand_in(position, item, index) for index, item in enumerate(value)]
            by_sent.update((repr(_adapted(connection, s)), (name, i)) for i, s in enumerate(stand_ins[name]))
        else:
            stand_ins[name] = _stand_in(position, value)
            by_sent[repr(_adapted(connection, stand_ins[name]))] = (name, None)
    queryset = build(**stand_ins)
    compiler = queryset.query.get_compiler(using)
    sql, params = compiler.as_sql()
    slots = tuple((*by_sent.get(repr(param), (None, None)), param) for param in params)
    if {(name, index) for name, index, _ in slots if name is not None} != set(by_sent.values()):
        raise AssertionError(f"A fixed read does not hold each of its values as sent: {sql}")
    columns, related = None, []
    if instances:
        # What Django's ModelIterable reads of the compiler to make instances, kept with the SQL.
        klass_info = compiler.klass_info
        if klass_info is None:
            raise AssertionError(f"A fixed read of instances is not a queryset of model instances: {sql}")
        own = klass_info["select_fields"]
        first, past = own[0], own[-1] + 1
        columns = (first, past, tuple(e.target.attname for e, _, _ in compiler.select[first:past]))
        related = get_related_populators(klass_info, compiler.select, using, queryset._fetch_mode)
    return _Compiled(
        sql=sql,
        slots=tuple((slot, index, None if slot else param) for slot, index, param in slots),
        converters=compiler.get_converters([expression for expression, _, _ in compiler.select]),
        columns=columns,
        related=related,
    )


def _stand_in(position: int, value: Any, index: int = 0) -> Any:
    """A value of ``value``'s type that no other stand-in of the read has (``index``: in a list)."""
    if isinstance(value, datetime):
        return datetime(2001, 2, 3, 4, 5, 6, 700 + position, tzinfo=UTC) + timedelta(minutes=index)
    if isinstance(value, int):
        # Within a 32-bit column's range: the ORM drops a lookup of a value that a column cannot hold.
        return -1_734_091_700 - position - 1000 * index
    if isinstance(value, str):
        return f"countersign-stand-in-{position}-{index}"
    raise TypeError(f"No stand-in for a {type(value).__name__} in a fixed read")


def _adapted(connection: Any, value: Any) -> Any:
    return connection.ops.adapt_datetimefield_value(value) if isinstance(value, datetime) else value


class SessionStore(db_sessions.SessionStore):
    """Django's database sessions (``SESSION_ENGINE``), their read a fixed one.

    Every signed-in request reads its session, and Django builds and compiles ``Session.objects.get``
    for it each time: several times the CPU of the read itself (``bench/decide_throughput.py``,
    docs/scaling.md). The same statement, compiled once: the session's data, if the key is one and it
    has not expired. Writes (login, logout, a changed session) are Django's. Delete when Django's
    ORM keeps compiled queries, or its session backend a compiled read.
    """

    #: It reads the rows Django's engine reads, as it reads them: the live pages' session checks
    #: (``approvals.live.sessions``) may read many at once the same way.
    reads_as_the_database_engine = True

    def _get_session_from_db(self) -> Any:
        key = self.session_key
        if key is None:
            return None
        rows = fixed_rows("session", self.model, _session_read, session_key=key, now=timezone.now())
        if not rows:
            self._session_key = None  # (as Django's: a key that matches no live session is dropped)
            return None
        return self.model(session_key=key, session_data=rows[0][0])

    async def _aget_session_from_db(self) -> Any:
        return await sync_to_async(self._get_session_from_db)()


def _session_read(session_key: str, now: datetime) -> Any:
    from django.contrib.sessions.models import Session

    return Session.objects.filter(session_key=session_key, expire_date__gt=now).values_list("session_data")
