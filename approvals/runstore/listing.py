"""One page of an agent's suspended runs and how many match: the two statements of a listing.

``querysets`` builds them with the ORM from a ``RunQuery``: the count of the matches, and the page's
run rows in order. Building them (filters, subqueries, ordering) and compiling them to SQL costs a few
milliseconds of CPU per listing, more than running them at 100,000 runs. A listing's *shape* (which
filters it has, its order and its window) fixes the SQL; only the values differ. So ``page`` builds
each shape once with stand-in values, keeps the SQL, and runs it with the query's values in their
places. A query the stand-ins cannot stand for (``escalated_to``: a list of groups) is built each time.
"""

from __future__ import annotations

from dataclasses import replace
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
    # (A window of no rows compiles to no statement: only the count is run for it.)
    compiled_as = query if (query.limit or 0) > 0 else replace(query, limit=None)
    count, rows = reads.compiled_for(
        ("listing", *_shape(using, connections[using].vendor, compiled_as)),
        lambda: _compile(runs, using, compiled_as),
    )
    values = _values(connections[using], query)
    counted = reads.run_statement(using, count.sql, [values.get(p, p) for p in count.params], count)
    total = int(counted[0]["total"]) if counted else 0
    if _past_the_end(query, total):
        return [], total
    return reads.run_statement(using, rows.sql, [values.get(p, p) for p in rows.params], rows), total


def _past_the_end(query: RunQuery, total: int) -> bool:
    return total == 0 or (query.limit is not None and (query.limit <= 0 or query.offset >= total))


def _shape(using: str, vendor: str, query: RunQuery) -> tuple[Any, ...]:
    present = tuple(getattr(query, name) is not None for name in _STAND_INS)
    window = (query.limit, query.offset if query.limit is not None else 0)
    return (using, vendor, present, query.delegated, query.oldest_first, query.by_deadline, window)


def _compile(runs: RunRecordQuerySet, using: str, query: RunQuery) -> tuple[reads.Statement, reads.Statement]:
    """The count and page statements of ``query``'s shape, built with stand-ins for its values."""
    stand_in = replace(
        query, **{name: value for name, value in _STAND_INS.items() if getattr(query, name) is not None}
    )
    matches, rows = querysets(runs, stand_in)
    # The count over the matches' primary keys, which both databases' planners flatten into the plain
    # count the ORM's ``count()`` sends (the same indexes, no rows visited for it).
    keys, params = matches.order_by().values("pk").query.get_compiler(using).as_sql()
    count = reads.Statement(f"SELECT COUNT(*) FROM ({keys}) matches", tuple(params), ("total",), ())
    return count, reads.statement_of(rows.query, using)


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
