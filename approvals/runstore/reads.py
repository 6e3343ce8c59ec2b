"""Reading one run and its calls by run id: the statement the ORM builds, compiled once per shape.

Every decision, claim and continuation reads one run this way. Building that query (a join over some
thirty columns) costs about a millisecond of CPU, several times running it, and it never changes: it
is compiled once per shape (by run id or by run id and agent, with or without the snapshot, locked
or not) and database, then run on the calling thread's connection through the ORM's own converters.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections

from approvals.models import RunRecord
from approvals.runstore.records import _JOINED_CALL_COLUMNS, _LEASE_COLUMNS, _RUN_COLUMNS, Row

#: Stand-ins for the values, found again among the compiled statement's parameters.
_RUN_ID = "\x00run_id"
_AGENT_ID = "\x00agent_id"


@dataclass(frozen=True)
class _Statement:
    sql: str
    params: tuple[Any, ...]
    names: tuple[str, ...]
    #: The ORM's converters by column position (JSON, datetimes on SQLite...), as its iterables use them.
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]


_compiled: dict[tuple[Any, ...], _Statement] = {}
_compiling = threading.Lock()


def _columns(with_snapshot: bool) -> tuple[str, ...]:
    return (*_RUN_COLUMNS, *_LEASE_COLUMNS, *(("snapshot",) if with_snapshot else ()), *_JOINED_CALL_COLUMNS)


def _compile(using: str, by_agent: bool, with_snapshot: bool, lock: bool) -> _Statement:
    runs = RunRecord.objects.using(using).filter(run_id=_RUN_ID)
    if by_agent:
        runs = runs.filter(agent_id=_AGENT_ID)
    if lock:
        # OF: lock the run row only (PostgreSQL refuses to lock the nullable side of a join).
        runs = runs.select_for_update(of=("self",))
    query = runs.order_by("calls__position").values(*_columns(with_snapshot)).query
    compiler = query.get_compiler(using)
    sql, params = compiler.as_sql()
    names = (*query.extra_select, *query.values_select, *query.annotation_select)
    if len(names) != len(compiler.select) or set(params) - {_RUN_ID, _AGENT_ID}:
        raise AssertionError(f"Unexpected shape of the one-run statement: {sql}")
    converters = compiler.get_converters([expression for expression, _, _ in compiler.select])
    return _Statement(
        sql=sql,
        params=tuple(params),
        names=names,
        converters=tuple((pos, tuple(convs), expression) for pos, (convs, expression) in converters.items()),
    )


def one_run_rows(
    using: str, *, run_id: str, agent_id: str | None, with_snapshot: bool, lock: bool
) -> list[Row]:
    """The run's row joined with each of its calls (one row with empty call columns when it has none),
    calls in their order; empty when no run has this id (and agent)."""
    connection = connections[using]
    key = (using, connection.vendor, agent_id is not None, with_snapshot, lock)
    statement = _compiled.get(key)
    if statement is None:
        with _compiling:
            statement = _compiled.get(key) or _compile(using, agent_id is not None, with_snapshot, lock)
            _compiled[key] = statement
    values = {_RUN_ID: run_id, _AGENT_ID: agent_id}
    with connection.cursor() as cursor:
        cursor.execute(statement.sql, [values[p] for p in statement.params])
        fetched = cursor.fetchall()
    rows: list[Row] = []
    for fetched_row in fetched:
        row = list(fetched_row)
        for pos, convs, expression in statement.converters:
            value = row[pos]
            for convert in convs:
                value = convert(value, expression, connection)
            row[pos] = value
        rows.append(dict(zip(statement.names, row, strict=True)))
    return rows
