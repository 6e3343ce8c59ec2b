"""The run store's hottest reads: the statements the ORM builds, compiled once per shape.

Every decision, claim and continuation reads one run and its calls by run id (a listing's statement is
``listing``'s, compiled the same way). Building those queries (some thirty columns) costs about a millisecond
of CPU each, several times running them, and they never change: each is compiled once per shape (by
run id or by run id and agent, with or without the snapshot, locked or not) and
database, then run on the calling thread's connection through the ORM's own converters.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from django.db import connections, models

from approvals.models import RunRecord
from approvals.server import prepared
from approvals.store.records import _JOINED_CALL_COLUMNS, _LEASE_COLUMNS, _RUN_COLUMNS, Row

#: Stand-ins for the values, found again among the compiled statement's parameters.
_RUN_ID = "\x00run_id"
_AGENT_ID = "\x00agent_id"
_RUN_PKS = -424242  # (a primary key: the ORM checks the type of what ``run__in`` takes)


@dataclass(frozen=True)
class Statement:
    sql: str
    params: tuple[Any, ...]
    names: tuple[str, ...]
    #: The ORM's converters by column position (JSON, datetimes on SQLite...), as its iterables use them.
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]


#: Compiled statements by shape (and database), the least recently used dropped past ``_KEPT``:
#: a listing's page window is part of its shape, so shapes are not a fixed few.
_compiled: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_compiling = threading.Lock()
_KEPT = 512


def _columns(with_snapshot: bool) -> tuple[str, ...]:
    return (*_RUN_COLUMNS, *_LEASE_COLUMNS, *(("snapshot",) if with_snapshot else ()), *_JOINED_CALL_COLUMNS)


def statement_of(query: Any, using: str) -> Statement:
    """A ``values()`` query's SQL, parameters, column names and the ORM's converters for them."""
    compiler = query.get_compiler(using)
    sql, params = compiler.as_sql()
    names = (*query.extra_select, *query.values_select, *query.annotation_select)
    if len(names) != len(compiler.select):
        raise AssertionError(f"Unexpected shape of a compiled read: {sql}")
    converters = compiler.get_converters([expression for expression, _, _ in compiler.select])
    return Statement(
        sql=sql,
        params=tuple(params),
        names=names,
        converters=tuple(
            (pos, tuple(_json_empties_first(c) for c in convs), expression)
            for pos, (convs, expression) in converters.items()
        ),
    )


def _json_empties_first(convert: Callable[..., Any]) -> Callable[..., Any]:
    """A JSON field's decoding, which gives the value most rows hold without the decoder: a run's
    history and a call's votes are ``[]`` nearly always; decoding them cost about an eighth of turning a
    listing's rows into records. Any other converter is kept as it is."""
    if not isinstance(getattr(convert, "__self__", None), models.JSONField):
        return convert

    def converted(value: Any, expression: Any, connection: Any) -> Any:
        if value == "[]":
            return []
        if value == "{}":
            return {}
        return convert(value, expression, connection)

    return converted


def _statement(query: Any, using: str, stand_ins: set[Any]) -> Statement:
    statement = statement_of(query, using)
    if set(statement.params) - stand_ins:
        raise AssertionError(f"Unexpected parameters in a compiled read: {statement.sql}")
    return statement


def compiled_for[T](key: tuple[Any, ...], compile_: Callable[[], T]) -> T:
    """What ``compile_()`` gives for the shape ``key``: compiled the first time it is asked for."""
    with _compiling:
        found = _compiled.get(key)
        if found is None:
            found = _compiled[key] = compile_()
            while len(_compiled) > _KEPT:
                _compiled.popitem(last=False)
        else:
            _compiled.move_to_end(key)
        return cast(T, found)


def run_statement(using: str, sql: str, params: list[Any], statement: Statement) -> list[Row]:
    """``sql`` (``statement``'s, or a variant of it) run with ``params``, its rows converted."""
    connection = connections[using]
    with prepared.cursor(using) as cursor:
        cursor.execute(sql, params)
        fetched = cursor.fetchall()
    names = statement.names
    converting = [(names[pos], convs, expression) for pos, convs, expression in statement.converters]
    rows: list[Row] = []
    for fetched_row in fetched:
        row = dict(zip(names, fetched_row, strict=True))
        for name, convs, expression in converting:
            value = row[name]
            if value is not None:  # every converter of ours and Django's gives NULL back as None
                for convert in convs:
                    value = convert(value, expression, connection)
                row[name] = value
        rows.append(row)
    return rows


def _compile_one_run(using: str, by_agent: bool, with_snapshot: bool, lock: bool) -> Statement:
    runs = RunRecord.objects.using(using).filter(run_id=_RUN_ID)
    if by_agent:
        runs = runs.filter(agent_id=_AGENT_ID)
    if lock:
        # OF: lock the run row only (PostgreSQL refuses to lock the nullable side of a join).
        runs = runs.select_for_update(of=("self",))
    query = runs.order_by("calls__position").values(*_columns(with_snapshot)).query
    return _statement(query, using, {_RUN_ID, _AGENT_ID})


def one_run_rows(
    using: str, *, run_id: str, agent_id: str | None, with_snapshot: bool, lock: bool
) -> list[Row]:
    """The run's row joined with each of its calls (one row with empty call columns when it has none),
    calls in their order; empty when no run has this id (and agent)."""
    vendor = connections[using].vendor
    statement = compiled_for(
        ("one run", using, vendor, agent_id is not None, with_snapshot, lock),
        lambda: _compile_one_run(using, agent_id is not None, with_snapshot, lock),
    )
    values = {_RUN_ID: run_id, _AGENT_ID: agent_id}
    return run_statement(using, statement.sql, [values[p] for p in statement.params], statement)
