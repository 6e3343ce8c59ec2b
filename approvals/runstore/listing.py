"""One page of an agent's suspended runs and how many match: the two statements of a listing.

``querysets`` builds them with the ORM from a ``RunQuery``: the count of the matches, and the page's
run rows in order. Building them (filters, subqueries, ordering) and compiling them to SQL costs a few
milliseconds of CPU per listing, more than running them at 100,000 runs. A listing's *shape* (which
filters it has, its order and its window) fixes the SQL; only the values differ. So ``page`` builds
each shape once with stand-in values, keeps the SQL, and runs it with the query's values in their
places. A query the stand-ins cannot stand for (``escalated_to``: a list of groups) is built each time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import Value
from django.db.models.functions import Coalesce

from agents_runtime.records import RunQuery
from approvals.models.runs import RunRecordQuerySet
from approvals.runstore import reads
from approvals.runstore.records import _RUN_COLUMNS, Row

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
#: Shapes kept (page windows make shapes too: the first pages of the common filters stay).
_KEPT = 512


def querysets(runs: RunRecordQuerySet, query: RunQuery) -> tuple[RunRecordQuerySet, Any]:
    """The matches of ``query`` among ``runs`` (to count) and its page of run rows, in order."""
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
    order = {"oldest_first": query.oldest_first, "by_deadline": query.by_deadline}
    page = ordered = listed_matches.in_suspension_order(**order)
    if query.limit is not None:
        window = slice(query.offset, query.offset + query.limit)
        page = ordered[window]
        if query.created_from is not None or query.created_to is not None:
            # Pick the page's ids first: from the creation-date index alone (it holds the sort
            # columns), without visiting the rows of every match in the range, which is what
            # SQLite's planner does otherwise (2-3x slower at 100k).
            page = runs.filter(pk__in=ordered.values("pk")[window]).in_suspension_order(**order)
    return matches, page.values(*_RUN_COLUMNS)


def page(runs: RunRecordQuerySet, using: str, query: RunQuery) -> tuple[list[Row], int]:
    """The page of run rows ``query`` asks for, and how many runs match it."""
    if query.escalated_to is not None:
        matches, rows = querysets(runs, query)
        total = matches.count()
        return ([] if _past_the_end(query, total) else list(rows)), total
    connection = connections[using]
    # (A window of no rows compiles to no statement: only the count is run for it.)
    count, rows_statement = _statements(
        runs, using, query if (query.limit or 0) > 0 else replace(query, limit=None)
    )
    values = _values(connection, query)
    with connection.cursor() as cursor:
        cursor.execute(count.sql, [values.get(p, p) for p in count.params])
        fetched = cursor.fetchone()
    total = int(fetched[0]) if fetched else 0
    if _past_the_end(query, total):
        return [], total
    params = [values.get(p, p) for p in rows_statement.params]
    return reads.run_statement(using, rows_statement.sql, params, rows_statement), total


def _past_the_end(query: RunQuery, total: int) -> bool:
    return total == 0 or (query.limit is not None and (query.limit <= 0 or query.offset >= total))


@dataclass(frozen=True)
class _Count:
    sql: str
    params: tuple[Any, ...]


_compiled: OrderedDict[tuple[Any, ...], tuple[_Count, reads.Statement]] = OrderedDict()
_compiling = threading.Lock()


def _shape(using: str, vendor: str, query: RunQuery) -> tuple[Any, ...]:
    present = tuple(getattr(query, name) is not None for name in _STAND_INS)
    window = (query.limit, query.offset if query.limit is not None else 0)
    return (using, vendor, present, query.delegated, query.oldest_first, query.by_deadline, window)


def _statements(runs: RunRecordQuerySet, using: str, query: RunQuery) -> tuple[_Count, reads.Statement]:
    key = _shape(using, connections[using].vendor, query)
    with _compiling:
        found = _compiled.get(key)
        if found is not None:
            _compiled.move_to_end(key)
            return found
    stand_in = replace(
        query, **{name: value for name, value in _STAND_INS.items() if getattr(query, name) is not None}
    )
    matches, rows = querysets(runs, stand_in)
    compiled = (_count_statement(matches, using), reads.statement_of(rows.query, using))
    with _compiling:
        _compiled[key] = compiled
        while len(_compiled) > _KEPT:
            _compiled.popitem(last=False)
    return compiled


def _count_statement(matches: RunRecordQuerySet, using: str) -> _Count:
    """A count of the matches: over their primary keys, which both databases' planners flatten into
    the plain count the ORM's ``count()`` sends (the same indexes, no rows visited for it)."""
    sql, params = matches.order_by().values("pk").query.get_compiler(using).as_sql()
    return _Count(f"SELECT COUNT(*) FROM ({sql}) matches", tuple(params))


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
