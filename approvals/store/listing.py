"""One page of an agent's suspended runs, their calls and how many match: one statement per listing.

``querysets`` builds a listing with the ORM from a ``RunQuery``: the matches (to count) and the
page's run rows joined with their calls, in order. A page is picked by run id from the listing's
index alone (``run_id`` and the sort columns are in it: an index-only scan, so a deep page skips
index entries, not rows), then its rows and calls are read by that id. A page near the start
(``NEAR_THE_START``), the one nearly every listing asks for, skips few runs: its run rows are read
straight from the index, in order, and joined with their calls (``_page_from_the_index``), which
spares the lookups by id and the sort after them. Building and compiling these
(filters, subqueries, ordering) costs a few milliseconds of CPU per listing, more than running them.
A listing's *shape* (which filters it has, its order and its window) fixes the SQL; only the values
differ. So ``page`` builds each shape once with stand-in values, keeps the SQL, and runs it with the
query's values in their places. A query the stand-ins cannot stand for (``escalated_to``: a list of
groups) is built each time.

The total rides in the same statement as a column: for a listing filtered only by agent (and
``delegated``) it is the sum of the agent's waiting counters (``approvals_waiting_count``, kept by
triggers on the run table in the statements that park, claim, reclaim and finish runs: migration
0025), exact and constant-time; on PostgreSQL a listing filtered by thread or by end user alone
sums that thread's or end user's counters, kept the same way (migration 0027); any other filtered
listing counts its matches from their index. A second column says whether some claim's lease ran
out (an indexed probe of the few running runs), so the store reclaims those and lists again only then,
never a sweep of its own per listing. A page past the end (no rows to carry them) reads the two
columns alone.

A deep page (``DEEP_OFFSET`` runs in or more) of a listing filtered by agent only, newest or oldest
first, on PostgreSQL, does not skip every run before it in the index one by one: the statement first
finds, from per-day waiting counters (``approvals_waiting_day``, kept by triggers like the others:
migration 0026), the day of suspension its first run falls on and how many runs come before that
day, then skips only the runs of that day before the page. The counters are read in the statement's
own snapshot, so the page is exactly the one an OFFSET would give.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import DateTimeField, Field, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from agents_runtime.records import RunQuery
from approvals.models import ParkedCallRecord, RunRecord, RunRecordQuerySet, RunStatus
from approvals.store import records
from approvals.store.records import CALL_COLUMNS, JOINED_CALL_COLUMNS, RUN_COLUMNS, Row

#: Stand-ins for the values of a query, found again among a compiled statement's parameters.
_STAND_INS: dict[str, Any] = {
    "agent_id": "\x00agent_id",
    "thread_id": "\x00thread_id",
    "resource_id": "\x00resource_id",
    "tool_name": "\x00tool_name",
    "kind": "\x00kind",
    "created_from": datetime(1901, 1, 1, 0, 0, 1, tzinfo=UTC),
    "created_to": datetime(1901, 1, 1, 0, 0, 2, tzinfo=UTC),
    "expiring_before": datetime(1901, 1, 1, 0, 0, 3, tzinfo=UTC),
}
_DATETIMES = ("created_from", "created_to", "expiring_before")
_NOW = "\x00now"
_OFFSET = "\x00offset"
#: The filters a waiting counter cannot answer (it is kept per agent and ``delegated`` only).
_FILTERS = (
    *("thread_id", "resource_id", "tool_name", "kind"),
    *("created_from", "created_to", "expiring_before", "escalated_to"),
)
_COUNTERS = "approvals_waiting_count"
#: The condition on the counters' ``delegated`` column for a query's ``delegated``.
_DELEGATED = {None: "", True: " AND delegated", False: " AND NOT delegated"}
#: The largest offset a page is read at (SQLite's and PostgreSQL's OFFSET are 64-bit integers).
_MAX_OFFSET = 2**62
#: From this offset on, an agent's listing starts at its page's day (PostgreSQL): skipping 1,000
#: index entries costs about what reading the day counters does.
DEEP_OFFSET = 1000
#: Pages that start before this offset are read straight from the listing's index: past it, skipping
#: runs' rows one by one costs more than picking the page's run ids from the index alone (where the two
#: cross: bench/list_suspended_runs.py, docs/scaling.md).
NEAR_THE_START = 200
#: Compiled into a deep page's statement in place of its offset, then replaced by the day's skip.
_DEEP_STAND_IN = 987_654_321_987
_DAYS = "approvals_waiting_day"
#: Waiting runs per agent and thread, and per agent and end user (migration 0027).
_THREADS = "approvals_waiting_thread"
_RESOURCES = "approvals_waiting_resource"

#: Whether a claim's lease ran out: the partial index run_running_lease_idx, status a literal.
_EXPIRED = (
    f"EXISTS (SELECT 1 FROM {RunRecord._meta.db_table}"
    f" WHERE status = '{RunStatus.RUNNING.value}' AND lease_expires_at < %s)"
)


def querysets(
    runs: RunRecordQuerySet, query: RunQuery, *, deep: bool = False
) -> tuple[RunRecordQuerySet, Any]:
    """The matches of ``query`` among ``runs`` (to count) and its page of run rows, each joined with
    its calls (one row with empty call columns for a run without), in order. ``deep``: the page is
    read from its day on (``_deep_day``), at ``_DEEP_STAND_IN`` for its offset in that day."""
    matches, ordered = _matches_in_order(runs, query, deep=deep)
    page = ordered
    if query.limit is not None:
        window = slice(query.offset, query.offset + query.limit)
        # The page's run ids first, from the listing's index alone, then its rows by id.
        page = runs.filter(run_id__in=ordered.values("run_id")[window]).in_suspension_order(**_order(query))
    page = page.order_by(*page.query.order_by, "calls__position")
    return matches, page.values(*RUN_COLUMNS, *JOINED_CALL_COLUMNS)


def _order(query: RunQuery) -> dict[str, bool]:
    return {"oldest_first": query.oldest_first, "by_deadline": query.by_deadline}


def _matches_in_order(
    runs: RunRecordQuerySet, query: RunQuery, *, deep: bool = False
) -> tuple[RunRecordQuerySet, RunRecordQuerySet]:
    """The matches of ``query`` (to count), and those it lists in its order (from its page's day on
    when ``deep``)."""
    matches = (
        runs.for_agent(query.agent_id)
        .suspended()
        .created_between(query.created_from, query.created_to)
        .waiting_on(tool_name=query.tool_name, kind=query.kind)
        .expiring_before(query.expiring_before)
        .escalated_to(query.escalated_to)
    )
    if query.thread_id is not None:
        matches = matches.filter(thread_id=query.thread_id)
    if query.resource_id is not None:
        matches = matches.filter(resource_id=query.resource_id)
    listed_matches = matches
    if query.delegated is not None:
        unfiltered = matches
        matches = listed_matches = matches.filter(parent_run_id__isnull=not query.delegated)
        if not query.delegated:
            # Counted from the (agent, status, parent_run_id) index, listed in the listing index's
            # order: written as an expression, the test cannot make the planner pick the counting
            # index (and sort every waiting run of the agent for a page).
            listed_matches = unfiltered.alias(parent_or_empty=Coalesce("parent_run_id", Value(""))).filter(
                parent_or_empty=""
            )
    ordered = listed_matches.in_suspension_order(**_order(query))
    if deep:
        bound = RawSQL("(SELECT bound FROM deep)", (), output_field=DateTimeField())
        ordered = (
            ordered.filter(suspended_at__gte=bound)
            if query.oldest_first
            else ordered.filter(suspended_at__lt=bound)
        )
    return matches, ordered


def page(runs: RunRecordQuerySet, using: str, query: RunQuery, *, now: datetime) -> tuple[Listing, int, bool]:
    """The page of runs ``query`` asks for (each with its call rows), how many runs match it, and
    whether some claim's lease ran out before ``now`` (then reclaim and list again)."""
    if query.limit is not None and query.offset > _MAX_OFFSET:
        # Past the end of any listing, and past what a database's OFFSET can hold: the total only.
        query = replace(query, limit=0, offset=0)
    connection = connections[using]
    values = _values(connection, query)
    values[_NOW] = connection.ops.adapt_datetimefield_value(now)
    if query.escalated_to is not None:
        matches, rows = querysets(runs, query)
        total = matches.count()
        return ([] if _past_the_end(query, total) else by_run(list(rows))), total, _expired(using, values)
    # (A window of no rows compiles to no page: only the header is run for it.)
    compiled_as = query if (query.limit or 0) > 0 else replace(query, limit=None)
    deep = _is_deep(connection.vendor, compiled_as)
    if deep:
        values[_OFFSET] = query.offset
        compiled_as = replace(compiled_as, offset=_DEEP_STAND_IN)
    near = not deep and _is_near_the_start(compiled_as)
    header, listing = records.compiled_for(
        ("listing", *_shape(using, connection.vendor, compiled_as), near),
        lambda: _compile(runs, using, compiled_as, deep=deep, near=near),
    )
    found: list[Row] = []
    if query.limit is None or query.limit > 0:
        found = records.run_statement(using, listing.sql, [values.get(p, p) for p in listing.params], listing)
    if not found:
        found = records.run_statement(using, header.sql, [values.get(p, p) for p in header.params], header)
    total, expired = int(found[0]["total"] or 0), bool(found[0]["expired"])
    return by_run([row for row in found if "pk" in row]), total, expired


#: A listing's runs in order, each with its call rows in theirs.
Listing = list[tuple[Row, list[Row]]]


#: Each call column's name in a joined row, by its own name.
_JOINED_NAMES = tuple((name, f"calls__{name}") for name in CALL_COLUMNS if name != "run_id")


def by_run(rows: list[Row]) -> Listing:
    # (A run's first joined row stands for the run: it holds the run's columns, and its call
    # columns are never read as the run's.)
    listed: Listing = []
    calls: list[Row] = []
    for row in rows:
        if not listed or listed[-1][0]["pk"] != row["pk"]:
            calls = []
            listed.append((row, calls))
        if row["calls__id"] is not None:
            call = {name: row[joined] for name, joined in _JOINED_NAMES}
            call["run_id"] = row["pk"]
            calls.append(call)
    return listed


def _expired(using: str, values: dict[Any, Any]) -> bool:
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT {_EXPIRED}", [values[_NOW]])
        return bool(cursor.fetchone()[0])


def _past_the_end(query: RunQuery, total: int) -> bool:
    return total == 0 or (query.limit is not None and (query.limit <= 0 or query.offset >= total))


def _shape(using: str, vendor: str, query: RunQuery) -> tuple[Any, ...]:
    present = tuple(getattr(query, name) is not None for name in _STAND_INS)
    window = (query.limit, query.offset if query.limit is not None else 0)
    return (using, vendor, present, query.delegated, query.oldest_first, query.by_deadline, window)


def _compile(
    runs: RunRecordQuerySet, using: str, query: RunQuery, *, deep: bool = False, near: bool = False
) -> tuple[records.Statement, records.Statement]:
    """The header (total, expired) and page statements of ``query``'s shape, built with stand-ins
    for its values; the page carries the header's columns too. ``near``: the page is read straight
    from the listing's index (``_page_from_the_index``)."""
    stand_in = replace(
        query, **{name: value for name, value in _STAND_INS.items() if getattr(query, name) is not None}
    )
    matches, rows = querysets(runs, stand_in, deep=deep)
    delegated = _DELEGATED[query.delegated]
    if all(getattr(query, name) is None for name in _FILTERS):
        total = f"SELECT COALESCE(SUM(n), 0) FROM {_COUNTERS} WHERE agent_id = %s{delegated}"
        total_params: tuple[Any, ...] = (_STAND_INS["agent_id"],)
    elif (keyed := _keyed_counter(connections[using].vendor, query)) is not None:
        table, column = keyed
        total = f"SELECT COALESCE(SUM(n), 0) FROM {table} WHERE agent_id = %s AND {column} = %s{delegated}"
        total_params = (_STAND_INS["agent_id"], _STAND_INS[column])
    else:
        # The count over the matches' primary keys, which both databases' planners flatten into the
        # plain count the ORM's ``count()`` sends (the same indexes, no rows visited for it).
        keys, params = matches.order_by().values("pk").query.get_compiler(using).as_sql()
        total, total_params = f"SELECT COUNT(*) FROM ({keys}) matches", tuple(params)
    columns = f"({total}) AS total, {_EXPIRED} AS expired"
    header = records.Statement(f"SELECT {columns}", (*total_params, _NOW), ("total", "expired"), ())
    if query.limit is not None and query.limit <= 0:
        return header, header
    listing = records.statement_of(rows.query, using)
    if near:
        sql, params = _page_from_the_index(runs, using, stand_in, columns)
        params = (*header.params, *params)
        return header, replace(listing, sql=sql, params=params, names=(*listing.names, *header.names))
    # The header's columns last in the select list (whose columns are plain: the first FROM is the
    # statement's), so the positions an ORDER BY may name stay right; their parameters come first.
    selected, found, rest = listing.sql.partition(" FROM ")
    if not found or not selected.startswith("SELECT ") or "(" in selected:
        raise AssertionError(f"Unexpected shape of a listing: {listing.sql}")
    sql, params = f"{selected}, {columns} FROM {rest}", (*header.params, *listing.params)
    if deep:
        window = f" OFFSET {_DEEP_STAND_IN}"
        if sql.count(window) != 1:
            raise AssertionError(f"Unexpected shape of a deep listing: {sql}")
        day, day_params = _deep_day(query)
        sql = f"WITH deep AS ({day}) " + sql.replace(window, " OFFSET (SELECT skip FROM deep)")
        params = (*day_params, *params)
    return header, records.Statement(
        sql=sql, params=params, names=(*listing.names, *header.names), converters=listing.converters
    )


def _is_near_the_start(query: RunQuery) -> bool:
    """Whether ``query``'s page is read straight from the listing's index (``_page_from_the_index``)
    rather than picked by run id first (``querysets``)."""
    return (
        query.limit is not None
        and query.limit > 0
        and query.offset < NEAR_THE_START
        and not query.by_deadline
        and query.escalated_to is None
    )


#: The calls' table, joined to a page read from the index.
_CALLS = ParkedCallRecord._meta.db_table


def _page_from_the_index(
    runs: RunRecordQuerySet, using: str, query: RunQuery, header: str
) -> tuple[str, tuple[Any, ...]]:
    """SQL (and parameters) of a page near the start of a listing: its run rows straight from the
    listing's index, in order, then joined with their calls; the header's columns after the calls'.
    Its columns are ``querysets``' rows' (the same names, in the same order), so their converters
    hold. PostgreSQL keeps the index's order through the join (an incremental sort of each run's few
    calls), where picking run ids first costs a hash of them, a lookup of each by run id and a full
    sort (bench/list_suspended_runs.py)."""
    _, ordered = _matches_in_order(runs, query)
    window = slice(query.offset, query.offset + (query.limit or 0))
    inner = records.statement_of(ordered.values(*RUN_COLUMNS)[window].query, using)
    if inner.names != RUN_COLUMNS or ' AS "pk"' not in inner.sql:
        raise AssertionError(f"Unexpected shape of a listing's page: {inner.sql}")
    connection = connections[using]
    quote = connection.ops.quote_name
    run_columns = ", ".join(f"page.{quote(name)}" for name in RUN_COLUMNS)
    calls = quote(_CALLS)
    call_columns = ", ".join(
        f"{calls}.{quote(_call_column(joined.removeprefix('calls__')))} AS {quote(joined)}"
        for joined in JOINED_CALL_COLUMNS
    )
    direction = "ASC" if query.oldest_first else "DESC"
    sql = (
        f"SELECT {run_columns}, {call_columns}, {header} FROM ({inner.sql}) page"
        f" LEFT OUTER JOIN {calls} ON (page.{quote('pk')} = {calls}.{quote(_call_column('run'))})"
        f" ORDER BY page.{quote('suspended_at')} {direction}, page.{quote('run_id')} ASC,"
        f" {calls}.{quote(_call_column('position'))} ASC"
    )
    return sql, inner.params


def _call_column(name: str) -> str:
    field = ParkedCallRecord._meta.get_field(name)
    if not isinstance(field, Field) or not field.column:
        raise AssertionError(f"{name} is not a column of the calls' table")
    return field.column


def _keyed_counter(vendor: str, query: RunQuery) -> tuple[str, str] | None:
    """The counters table (and its key column) that has the total of ``query``, a listing filtered
    by thread or by end user alone (PostgreSQL: migration 0027); None when its matches are counted."""
    if vendor != "postgresql":
        return None
    present = [name for name in _FILTERS if getattr(query, name) is not None]
    if present == ["thread_id"]:
        return _THREADS, "thread_id"
    if present == ["resource_id"]:
        return _RESOURCES, "resource_id"
    return None


def _is_deep(vendor: str, query: RunQuery) -> bool:
    """Whether ``query``'s page starts from its day's counters (see the module's docstring)."""
    return (
        vendor == "postgresql"
        and query.limit is not None
        and query.limit > 0
        and query.offset >= DEEP_OFFSET
        and not query.by_deadline
        and all(getattr(query, name) is None for name in _FILTERS)
    )


def _deep_day(query: RunQuery) -> tuple[str, tuple[Any, ...]]:
    """SQL for the one row (bound, skip) of a deep page: where its day begins in the listing's order
    (newest first: the end of the day; oldest first: its start) and how many of that day's runs come
    before the page. No row past the end of the listing (then the page is empty)."""
    delegated = _DELEGATED[query.delegated]
    direction, bound = ("ASC", "day") if query.oldest_first else ("DESC", "day + 1")
    days = (
        f"SELECT day, SUM(n) AS n, SUM(SUM(n)) OVER (ORDER BY day {direction}) - SUM(n) AS before"
        f" FROM {_DAYS} WHERE agent_id = %s{delegated} GROUP BY day"
    )
    sql = (
        f"SELECT ({bound})::timestamp AT TIME ZONE 'UTC' AS bound, (%s - before)::bigint AS skip"
        f" FROM ({days}) days WHERE before <= %s AND before + n > %s"
    )
    return sql, (_OFFSET, _STAND_INS["agent_id"], _OFFSET, _OFFSET)


def _values(connection: Any, query: RunQuery) -> dict[Any, Any]:
    """Each stand-in's parameter as the database gets it, mapped to the query's own value."""
    values: dict[Any, Any] = {}
    for name, stand_in in _STAND_INS.items():
        value = getattr(query, name)
        if value is None:
            continue
        if name in _DATETIMES:
            values[connection.ops.adapt_datetimefield_value(stand_in)] = (
                connection.ops.adapt_datetimefield_value(value)
            )
        else:
            values[stand_in] = str(value)
    return values
