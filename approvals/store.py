"""``DjangoRunStore``: the runtime's run store on the Django ORM (SQLite by default, PostgreSQL).

Behaves exactly like ``agents_runtime.store.InMemoryRunStore`` (the reference), but the runs live in
the database, so every process and server instance on it sees the same suspended runs.

- Listings filter, order, count and page in SQL: one COUNT and one page query, snapshots never
  loaded, the page's calls fetched in one more query.
- Exactly once: claims, and decisions on SQLite, happen in a short transaction that locks the run
  row (``SELECT ... FOR UPDATE`` on PostgreSQL; on SQLite ``BEGIN IMMEDIATE`` serializes writers),
  then write with conditional UPDATEs (``action IS NULL``; ``status`` and ``version`` unchanged), so
  a lost race changes nothing. On PostgreSQL a decision is one conditional statement at the version
  read instead (the approval path's round trips), tried again when another decision came first.
- No transaction outlives a store call, and no store call waits on a model or a tool.
- Reads use plain rows (``values()``), not model instances: listings are on the dashboard's hot path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, cast, get_args

from django.conf import settings
from django.db import IntegrityError, connections, transaction

from agents_runtime.errors import RunAlreadyDecided, RunNotFound
from agents_runtime.store import (
    CallKind,
    Decision,
    DecisionAction,
    DecisionReceipt,
    DecisionRule,
    Delegation,
    ParkedCall,
    RunEnding,
    RunQuery,
    RunStore,
    StoredRun,
    Suspension,
    decision_conflict,
)

from . import db_threads, decision_records
from .models import AuditEntry, ParkedCallRecord, RunRecord, ThreadMessage
from .models.audit import AuditOutcome
from .models.runs import ParkedCallRecordQuerySet, RunRecordQuerySet, RunStatus

logger = logging.getLogger(__name__)

__all__ = ["CorruptRow", "DjangoRunStore"]

_CALL_KINDS = frozenset(get_args(CallKind))
_ACTIONS = frozenset(get_args(DecisionAction))
_DEFAULT_LEASE_SECONDS = 300

#: Columns a StoredRun is built from (the snapshot is added only where it is handed out).
_RUN_COLUMNS = (
    "pk",
    "run_id",
    "agent_id",
    "thread_id",
    "resource_id",
    "parent_run_id",
    "created_at",
    "suspended_at",
    "status",
    "version",
    "interrupted",
    "history",
)
#: Also read where one run is fetched to act on, to reclaim it first if its lease ran out.
_LEASE_COLUMNS = ("lease_expires_at",)
_CALL_COLUMNS = (
    "id",
    "run_id",  # the run row's primary key
    "tool_call_id",
    "tool_name",
    "kind",
    "args",
    "suspend_payload",
    "suspend_schema",
    "resume_schema",
    "delegation",
    "action",
    "actor",
    "decided_at",
    "reason",
    "resume_data",
    "edited_args",
)

Row = Mapping[str, Any]
_JOINED_CALL_COLUMNS = tuple(f"calls__{name}" for name in _CALL_COLUMNS if name != "run_id")

# Uses the partial index run_running_lease_idx; the status is a literal so SQLite can prove that.
_EXPIRED_SQL = (
    f"SELECT id, version FROM {RunRecord._meta.db_table}"
    f" WHERE status = '{RunStatus.RUNNING.value}' AND lease_expires_at < %s"
)


_FINISH_SQL = (
    f"DELETE FROM {RunRecord._meta.db_table}"
    f" WHERE run_id = %s AND version = %s AND status = '{RunStatus.RUNNING.value}' AND lease_expires_at >= %s"
    " RETURNING agent_id, thread_id"
)
#: PostgreSQL: the same and the thread's new messages, in one statement.
_FINISH_REMEMBERING_SQL = (
    f"WITH ended AS ({_FINISH_SQL}), remembered AS ("
    f" INSERT INTO {ThreadMessage._meta.db_table} (agent_id, thread_id, messages, created_at)"
    " SELECT agent_id, thread_id, %s, now() FROM ended WHERE thread_id IS NOT NULL AND %s"
    " RETURNING 1),"
    f" settled AS ({decision_records.settle_sql(guard=' AND EXISTS (SELECT 1 FROM ended)')} RETURNING 1)"
    " SELECT count(*) FROM ended"
)


_DECISION_COLUMN_ORDER = ("action", "actor", "decided_at", "reason", "resume_data", "edited_args")
#: PostgreSQL: record a decision if the run is still at the version it was read at (see
#: ``DjangoRunStore._write_decision_at_version``).
_DECIDE_AT_VERSION_SQL = (
    f"WITH run AS (UPDATE {RunRecord._meta.db_table} SET version = %s, status = %s, lease_expires_at = %s"
    f" WHERE id = %s AND version = %s AND status = '{RunStatus.SUSPENDED.value}' RETURNING id),"
    f" call AS (UPDATE {ParkedCallRecord._meta.db_table}"
    f" SET {', '.join(f'{name} = %s' for name in _DECISION_COLUMN_ORDER)}"
    " WHERE id = %s AND action IS NULL AND EXISTS (SELECT 1 FROM run) RETURNING id),"
    # The decision's audit row, in the same statement: written exactly when the call's is.
    " audit AS ({audit})"
    " SELECT (SELECT count(*) FROM run), (SELECT count(*) FROM call)"
)


@cache
def _decide_at_version_sql() -> str:
    # Built on first use: naming the user table needs the app registry.
    return _DECIDE_AT_VERSION_SQL.replace("{audit}", decision_records.insert_sql("call"))


#: How often a decision is tried again on PostgreSQL when other decisions on the run come first.
_OPTIMISTIC_ATTEMPTS = 16


@dataclass(frozen=True)
class _DecisionPlan:
    run: StoredRun
    run_pk: int
    call: ParkedCall
    call_pk: int
    decision: Decision
    #: The run's calls once the decision is recorded.
    calls: tuple[ParkedCall, ...]
    version: int
    #: Set when this decision claims the run.
    lease_expires_at: datetime | None

    @property
    def claimed(self) -> bool:
        return self.lease_expires_at is not None

    def audit_values(self) -> dict[str, Any]:
        return decision_records.decision_values(
            self.run, self.call, self.decision, claims=self.claimed, calls_after=self.calls
        )

    def receipt(self) -> DecisionReceipt:
        decided = next(c for c in self.calls if c.tool_call_id == self.call.tool_call_id)
        after = replace(
            self.run,
            calls=self.calls,
            version=self.version,
            status="running" if self.claimed else "suspended",
        )
        return DecisionReceipt(
            run=after, call=decided, claimed_version=self.version if self.claimed else None
        )


def _now() -> datetime:
    return datetime.now(UTC)


def _utc(value: datetime) -> datetime:
    # Naive datetimes are taken as UTC, like everywhere else in the runtime.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class CorruptRow(ValueError):
    """A stored row that cannot be turned back into the runtime's records."""


class DjangoRunStore(RunStore):
    """The run store on the default database (or ``using``); safe to share between threads.

    ``lease`` defaults to ``settings.RUN_LEASE_SECONDS`` (300), read when first needed. Building a
    store never touches the database, so it may be built at import time.
    """

    def __init__(
        self,
        lease: timedelta | None = None,
        *,
        using: str = "default",
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._lease = lease
        self.using = using
        #: Where "now" comes from (lease expiry); tests move it instead of sleeping.
        self.clock = clock

    def __repr__(self) -> str:
        return f"DjangoRunStore(lease={self._lease!r}, using={self.using!r})"

    @property
    def lease(self) -> timedelta:
        if self._lease is not None:
            return self._lease
        return timedelta(seconds=getattr(settings, "RUN_LEASE_SECONDS", _DEFAULT_LEASE_SECONDS))

    @lease.setter
    def lease(self, value: timedelta) -> None:
        self._lease = value

    # -- plumbing ---------------------------------------------------------------------------------

    #: How the runtime calls this store from async code: on the thread that holds the caller's
    #: database connection, so a request never needs a second one (see ``db_threads``).
    run_sync = staticmethod(db_threads.run_sync)

    def _runs(self) -> RunRecordQuerySet:
        return RunRecord.objects.using(self.using)

    def _calls(self) -> ParkedCallRecordQuerySet:
        return ParkedCallRecord.objects.using(self.using)

    @contextmanager
    def _connection_scope(self) -> Iterator[None]:
        """Give a server connection back after each call made outside a transaction.

        From purely async code the runtime's calls run on asgiref's shared thread (``run_sync``),
        which Django's request cycle never cleans up: without this it would keep a PostgreSQL
        connection (a pool slot) for its lifetime. In a request, the connection is not held while the
        run waits on a model. Only closed when ``CONN_MAX_AGE`` says so. SQLite connections are a
        file handle, cheap to keep and slow to reopen (pragmas), so they stay with their thread.
        """
        try:
            yield
        finally:
            connection = connections[self.using]
            if connection.in_atomic_block:
                pass
            elif connection.vendor != "sqlite":
                connection.close_if_unusable_or_obsolete()
            elif connection.errors_occurred and not connection.is_usable():
                connection.close()

    def _one_run(
        self, runs: RunRecordQuerySet, *, with_snapshot: bool, lock: bool = False
    ) -> tuple[Row, list[Row]] | None:
        """One run row and its call rows, in one query (a LEFT JOIN; the run row locked if asked)."""
        if lock:
            # OF: lock the run row only (PostgreSQL refuses to lock the nullable side of a join).
            runs = runs.select_for_update(of=("self",))
        columns = (
            *_RUN_COLUMNS,
            *_LEASE_COLUMNS,
            *(("snapshot",) if with_snapshot else ()),
            *_JOINED_CALL_COLUMNS,
        )
        rows = list(runs.order_by("calls__position").values(*columns))
        if not rows:
            return None
        run = {name: rows[0][name] for name in columns if not name.startswith("calls__")}
        calls: list[Row] = [
            {name: row[f"calls__{name}"] for name in _CALL_COLUMNS if name != "run_id"}
            | {"run_id": run["pk"]}
            for row in rows
            if row["calls__id"] is not None
        ]
        return run, calls

    def _call_rows(self, run_pks: Sequence[int]) -> dict[int, list[Row]]:
        """The parked calls of these runs, in their original order, by run primary key."""
        by_run: dict[int, list[Row]] = {pk: [] for pk in run_pks}
        if run_pks:
            rows = self._calls().filter(run__in=run_pks).order_by("run", "position").values(*_CALL_COLUMNS)
            for row in rows:
                by_run[row["run_id"]].append(row)
        return by_run

    def _current_run(
        self, runs: RunRecordQuerySet, *, with_snapshot: bool, lock: bool = False
    ) -> tuple[Row, list[Row]] | None:
        """``_one_run`` as of after lease reclaim: a run whose claim ran out comes back suspended.

        Only this run is checked (its row says when its lease ends), not every claimed run: a
        global sweep would cost a query on every decision. A sub-agent's run also changes when its
        supervisor is reclaimed, so for those the sweep runs after all.
        """
        found = self._one_run(runs, with_snapshot=with_snapshot, lock=lock)
        if found is None:
            return None
        row = found[0]
        now = self.clock()
        expires = row["lease_expires_at"]
        if row["status"] == RunStatus.RUNNING and expires is not None and _utc(expires) < now:
            self._reclaim(row["pk"], row["version"], now)
        elif row["parent_run_id"] is None or not self._reclaim_expired():
            return found
        return self._one_run(runs, with_snapshot=with_snapshot, lock=lock)

    # -- lease reclaim ----------------------------------------------------------------------------

    def _reclaim_expired(self) -> bool:
        """Suspend again every claimed run whose lease ran out (an indexed probe; usually empty).

        True when it reclaimed any.
        """
        now = self.clock()
        # Raw SQL: this runs before every listing, and the ORM would double its cost.
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(_EXPIRED_SQL, [connection.ops.adapt_datetimefield_value(now)])
            expired = cursor.fetchall()
        for pk, version in expired:
            self._reclaim(pk, version, now)
        return bool(expired)

    def _reclaim(self, pk: int, version: int, now: datetime) -> None:
        with transaction.atomic(using=self.using):
            held = self._runs().select_for_update().filter(pk=pk, version=version, lease_expires_at__lt=now)
            run = held.running().values("pk", "run_id", "version", "history").first()
            if run is None:  # renewed, finished or reclaimed by someone else meanwhile
                return
            self._park_again(run, suspend=True)
            AuditEntry.objects.using(self.using).settle(
                run["run_id"], AuditOutcome.INTERRUPTED, decision_records.INTERRUPTED_DETAIL
            )
            inner_runs = self._runs().select_for_update().children_of(run["run_id"]).suspended()
            for inner in inner_runs.values("pk", "run_id", "version", "history"):
                self._park_again(inner, suspend=False)
        logger.warning(
            "Run %s: its continuation lost the lease; its calls wait for a decision again", run["run_id"]
        )

    def _park_again(self, run: Row, *, suspend: bool) -> None:
        """Move the run's decisions to its history and clear them (inside a transaction)."""
        decided = list(
            self._calls().filter(run=run["pk"]).decided().order_by("position").values(*_CALL_COLUMNS)
        )
        if not decided and not suspend:
            return
        history = run["history"] if isinstance(run["history"], list) else []
        self._calls().filter(pk__in=[row["id"] for row in decided]).update(
            action=None, actor=None, decided_at=None, reason=None, resume_data=None, edited_args=None
        )
        changes: dict[str, Any] = {
            "version": run["version"] + 1,
            "interrupted": True,
            "history": [*history, *(_overturned(row) for row in decided)],
        }
        if suspend:
            changes.update(status=RunStatus.SUSPENDED, lease_expires_at=None)
        self._runs().filter(pk=run["pk"], version=run["version"]).update(**changes)

    # -- protocol ---------------------------------------------------------------------------------

    def insert_suspended(self, suspension: Suspension) -> StoredRun:
        with self._connection_scope():
            try:
                with transaction.atomic(using=self.using):
                    record = self._runs().create(
                        run_id=suspension.run_id,
                        agent_id=suspension.agent_id,
                        thread_id=suspension.thread_id,
                        resource_id=suspension.resource_id,
                        parent_run_id=suspension.parent_run_id,
                        created_at=_utc(suspension.created_at),
                        suspended_at=_utc(suspension.suspended_at),
                        status=RunStatus.SUSPENDED,
                        version=1,
                        interrupted=False,
                        snapshot=suspension.snapshot,
                        history=[],
                    )
                    self._calls().bulk_create(_call_records(record.pk, suspension.calls))
            except IntegrityError as exc:
                if self._runs().filter(run_id=suspension.run_id).exists():
                    raise ValueError(f"Run {suspension.run_id!r} already exists") from exc
                raise
            return StoredRun(
                run_id=suspension.run_id,
                agent_id=suspension.agent_id,
                thread_id=suspension.thread_id,
                resource_id=suspension.resource_id,
                parent_run_id=suspension.parent_run_id,
                created_at=_utc(suspension.created_at),
                suspended_at=_utc(suspension.suspended_at),
                status="suspended",
                version=1,
                interrupted=False,
                calls=tuple(_stored_call(c) for c in suspension.calls),
                snapshot=suspension.snapshot,
            )

    def resuspend(self, suspension: Suspension, *, expected_version: int) -> StoredRun | None:
        with self._connection_scope(), transaction.atomic(using=self.using):
            found = self._current_run(
                self._runs().filter(run_id=suspension.run_id), with_snapshot=False, lock=True
            )
            if found is None:
                return None
            row = found[0]
            if row["status"] != RunStatus.RUNNING or row["version"] != expected_version:
                return None
            changes: dict[str, Any] = {
                "status": RunStatus.SUSPENDED,
                "version": expected_version + 1,
                "interrupted": False,
                "suspended_at": _utc(suspension.suspended_at),
                "lease_expires_at": None,
                "snapshot": suspension.snapshot,
            }
            self._runs().filter(pk=row["pk"]).update(**changes)
            run = {**row, **changes}
            # Replace, never append: repeated suspensions of one run keep the same row count.
            self._calls().filter(run=run["pk"]).delete()
            self._calls().bulk_create(_call_records(run["pk"], suspension.calls))
            waiting = [c for c in suspension.calls if c.decision is None]
            AuditEntry.objects.using(self.using).settle(
                suspension.run_id,
                AuditOutcome.SUSPENDED_AGAIN,
                decision_records.suspended_again_detail(waiting),
            )
        return _stored_run(run, tuple(_stored_call(c) for c in suspension.calls), with_snapshot=True)

    def get_run(self, run_id: str) -> StoredRun | None:
        with self._connection_scope():
            found = self._current_run(self._runs().filter(run_id=run_id), with_snapshot=True)
            if found is None:
                return None
            run, call_rows = found
            try:
                return _stored_run(run, _parked_calls(call_rows), with_snapshot=True)
            except CorruptRow as exc:
                logger.warning("Run %s is unreadable and treated as missing: %s", run_id, exc)
                return None

    def list_suspended(self, query: RunQuery) -> tuple[list[StoredRun], int]:
        with self._connection_scope():
            self._reclaim_expired()
            matches = (
                self._runs()
                .for_agent(query.agent_id)
                .suspended()
                .created_between(
                    None if query.created_from is None else _utc(query.created_from),
                    None if query.created_to is None else _utc(query.created_to),
                )
                .waiting_on(tool_name=query.tool_name, kind=query.kind)
            )
            if query.thread_id is not None:
                matches = matches.filter(thread_id=query.thread_id)
            if query.resource_id is not None:
                matches = matches.filter(resource_id=query.resource_id)
            total = matches.count()
            if total == 0 or (query.limit is not None and (query.limit <= 0 or query.offset >= total)):
                return [], total
            ordered = matches.in_suspension_order(oldest_first=query.oldest_first)
            page = ordered
            if query.limit is not None:
                window = slice(query.offset, query.offset + query.limit)
                page = ordered[window]
                if query.created_from is not None or query.created_to is not None:
                    # Pick the page's ids first: from the creation-date index alone (it holds the
                    # sort columns), without visiting the rows of every match in the range, which
                    # is what SQLite's planner does otherwise (2-3x slower at 100k).
                    page = self._runs().filter(pk__in=ordered.values("pk")[window])
                    page = page.in_suspension_order(oldest_first=query.oldest_first)
            runs = list(page.values(*_RUN_COLUMNS))
            calls = self._call_rows([run["pk"] for run in runs])
            listed = []
            for run in runs:
                try:
                    listed.append(_stored_run(run, _parked_calls(calls[run["pk"]]), with_snapshot=False))
                except CorruptRow as exc:
                    logger.warning(
                        "Suspended run %s is unreadable and left out of the listing: %s", run["run_id"], exc
                    )
            return listed, total

    def decide(
        self,
        *,
        agent_id: str,
        run_id: str,
        rule: DecisionRule,
        claim_when_complete: bool = True,
    ) -> DecisionReceipt:
        runs = self._runs().filter(run_id=run_id, agent_id=agent_id)
        with self._connection_scope():
            if connections[self.using].vendor != "postgresql":
                with transaction.atomic(using=self.using):
                    found = self._current_run(runs, with_snapshot=True, lock=True)
                    plan = self._plan_decision(run_id, found, rule, claim_when_complete)
                    if not self._write_decision_locked(plan):
                        raise self._conflict(plan.run, plan.call_pk, plan.call.tool_call_id)
                    decision_records.create_decision_row(self.using, plan.audit_values())
                    return plan.receipt()
            # PostgreSQL: read, then one conditional statement, no transaction around them (two
            # round trips instead of five on every approval). Optimistic: when the run changed in
            # between (another call of it was decided), read it again and decide on what is current.
            for _ in range(_OPTIMISTIC_ATTEMPTS):
                found = self._current_run(runs, with_snapshot=True)
                plan = self._plan_decision(run_id, found, rule, claim_when_complete)
                if self._write_decision_at_version(plan):
                    return plan.receipt()
            raise self._conflict(plan.run, plan.call_pk, plan.call.tool_call_id)

    def _plan_decision(
        self, run_id: str, found: tuple[Row, list[Row]] | None, rule: DecisionRule, claim_when_complete: bool
    ) -> _DecisionPlan:
        """What a decision will write on the run as read, or the error that refuses it."""
        if found is None:
            raise RunNotFound(run_id)
        row, call_rows = found
        try:
            run = _stored_run(row, _parked_calls(call_rows), with_snapshot=True)
        except CorruptRow as exc:
            logger.warning("Run %s is unreadable and treated as missing: %s", run_id, exc)
            raise RunNotFound(run_id) from exc
        tool_call_id, decision = rule(run)
        index = next((i for i, c in enumerate(run.calls) if c.tool_call_id == tool_call_id), None)
        if index is None:
            raise decision_conflict(run, None, tool_call_id)
        call, call_pk = run.calls[index], call_rows[index]["id"]
        if call.decision is not None or run.status != "suspended":
            raise self._conflict(run, call_pk, tool_call_id)
        decided = _decided(call, decision)
        calls = tuple(c if i != index else decided for i, c in enumerate(run.calls))
        claim = claim_when_complete and all(c.decision is not None for c in calls)
        return _DecisionPlan(
            run=run,
            run_pk=row["pk"],
            call=call,
            call_pk=call_pk,
            decision=decision,
            calls=calls,
            version=run.version + (2 if claim else 1),
            lease_expires_at=self.clock() + self.lease if claim else None,
        )

    def _write_decision_locked(self, plan: _DecisionPlan) -> bool:
        """Both writes, in the transaction that locked the run row."""
        recorded = self._calls().filter(pk=plan.call_pk).undecided()
        if recorded.update(**_decision_columns(plan.decision)) != 1:
            return False
        changes: dict[str, Any] = {"version": plan.version}
        if plan.claimed:
            changes.update(status=RunStatus.RUNNING, lease_expires_at=plan.lease_expires_at)
        runs = self._runs().filter(pk=plan.run_pk, version=plan.run.version).suspended()
        return runs.update(**changes) == 1

    def _write_decision_at_version(self, plan: _DecisionPlan) -> bool:
        """Both writes in one statement, if the run is still at the version the plan was made on.

        The run row is updated first, so the statement holds its lock while it records the call.
        Every writer of a run's calls locks its run row first and moves its version, so a run
        still at that version has its calls as read: the call's update cannot miss.
        """
        connection = connections[self.using]
        ops = connection.ops
        columns = _decision_columns(plan.decision)
        with connection.cursor() as cursor:
            cursor.execute(
                _decide_at_version_sql(),
                [
                    plan.version,
                    (RunStatus.RUNNING if plan.claimed else RunStatus.SUSPENDED).value,
                    ops.adapt_datetimefield_value(plan.lease_expires_at),
                    plan.run_pk,
                    plan.run.version,
                    *(
                        ParkedCallRecord._meta.get_field(name).get_db_prep_save(columns[name], connection)  # type: ignore[union-attr]
                        for name in _DECISION_COLUMN_ORDER
                    ),
                    plan.call_pk,
                    *decision_records.insert_params(plan.audit_values(), connection),
                ],
            )
            runs_written, calls_written = cursor.fetchone()
        if runs_written and not calls_written:
            logger.error("Run %s: moved to version %s without its decision", plan.run.run_id, plan.version)
        return bool(runs_written and calls_written)

    def _conflict(self, run: StoredRun, call_pk: int, tool_call_id: str) -> Exception:
        """The error for a call someone else decided, with who and when as committed.

        Read again in a statement of its own: on PostgreSQL the locking query's joined call rows
        may predate the decision that won (only the locked run row is re-read after the wait).
        """
        row = self._calls().filter(pk=call_pk).values(*_CALL_COLUMNS).first()
        try:
            call = None if row is None else _parked_call(row)
        except CorruptRow:
            call = None
        if call is None or call.decision is None:
            return RunAlreadyDecided(run_id=run.run_id, tool_call_id=tool_call_id)
        return decision_conflict(run, call, tool_call_id)

    def claim(
        self,
        run_id: str,
        *,
        expected_version: int | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> StoredRun | None:
        with self._connection_scope(), transaction.atomic(using=self.using):
            found = self._current_run(self._runs().filter(run_id=run_id), with_snapshot=True, lock=True)
            if found is None or found[0]["status"] != RunStatus.SUSPENDED:
                return None
            if expected_version is not None and found[0]["version"] != expected_version:
                return None
            row, call_rows = found
            try:
                run = _stored_run(row, _parked_calls(call_rows), with_snapshot=True)
            except CorruptRow as exc:
                logger.warning("Run %s is unreadable and cannot be continued: %s", run_id, exc)
                return None
            calls = list(run.calls)
            for i, call in enumerate(calls):
                decision = (decisions or {}).get(call.tool_call_id)
                if call.decision is None and decision is not None:
                    recorded = self._calls().filter(pk=call_rows[i]["id"]).undecided()
                    if recorded.update(**_decision_columns(decision)) != 1:
                        transaction.set_rollback(True, using=self.using)
                        return None
                    calls[i] = _decided(call, decision)
            swapped = (
                self._runs()
                .filter(pk=row["pk"], version=run.version)
                .suspended()
                .update(
                    status=RunStatus.RUNNING,
                    version=run.version + 1,
                    lease_expires_at=self.clock() + self.lease,
                )
            )
            if swapped != 1:
                transaction.set_rollback(True, using=self.using)
                return None
            return replace(run, status="running", version=run.version + 1, calls=tuple(calls))

    def heartbeat(self, run_id: str, *, version: int) -> bool:
        with self._connection_scope():
            now = self.clock()
            # A claim whose lease already ran out is given back (reclaimed), never renewed.
            held = self._runs().filter(run_id=run_id, version=version, lease_expires_at__gte=now).running()
            if held.update(lease_expires_at=now + self.lease) == 1:
                return True
            self._reclaim_expired()
            return False

    def finish(
        self,
        run_id: str,
        *,
        version: int,
        thread_messages: Sequence[Any] = (),
        ending: RunEnding | None = None,
    ) -> bool:
        # One conditional DELETE: the claim must be current and its lease not run out (an expired
        # claim is reclaimed, never finished). The calls go with it (ON DELETE CASCADE). Raw SQL
        # for RETURNING, which tells the run's thread without a read of its own.
        connection = connections[self.using]
        now = connection.ops.adapt_datetimefield_value(self.clock())
        outcome, detail = decision_records.ending_outcome(ending)
        with self._connection_scope():
            if connection.vendor == "postgresql":
                # One statement and no transaction around it: three round trips fewer on a path
                # every approval takes.
                messages = ThreadMessage._meta.get_field("messages").get_db_prep_value(
                    list(thread_messages), connection
                )
                with connection.cursor() as cursor:
                    cursor.execute(
                        _FINISH_REMEMBERING_SQL,
                        [run_id, version, now, messages, bool(thread_messages), outcome, detail, run_id],
                    )
                    (ended,) = cursor.fetchone()
                return bool(ended)
            with transaction.atomic(using=self.using), connection.cursor() as cursor:
                cursor.execute(_FINISH_SQL, [run_id, version, now])
                row = cursor.fetchone()
                if row is None:
                    return False
                agent_id, thread_id = row
                if thread_id is not None and thread_messages:
                    ThreadMessage.objects.using(self.using).create(
                        agent_id=agent_id, thread_id=thread_id, messages=list(thread_messages)
                    )
                AuditEntry.objects.using(self.using).settle(run_id, outcome, detail)
                return True

    def append_thread_messages(self, agent_id: str, thread_id: str, messages: Sequence[Any]) -> None:
        if not messages:
            return
        with self._connection_scope():
            ThreadMessage.objects.using(self.using).create(
                agent_id=agent_id, thread_id=thread_id, messages=list(messages)
            )

    def thread_messages(self, agent_id: str, thread_id: str) -> list[Any]:
        with self._connection_scope():
            messages: list[Any] = []
            rows = ThreadMessage.objects.using(self.using).for_thread(agent_id, thread_id)
            for pk, chunk in rows.values_list("pk", "messages"):
                if isinstance(chunk, list):
                    messages.extend(chunk)
                else:
                    logger.warning(
                        "Thread message row %s of %s/%s is not a JSON list; skipped", pk, agent_id, thread_id
                    )
            return messages


# -- rows <-> records -----------------------------------------------------------------------------


def _decision_columns(decision: Decision) -> dict[str, Any]:
    return {
        "action": decision.action,
        "actor": decision.actor,
        "decided_at": _utc(decision.decided_at),
        "reason": decision.reason,
        "resume_data": decision.resume_data,
        "edited_args": decision.edited_args,
    }


def _decided(call: ParkedCall, decision: Decision) -> ParkedCall:
    # What a round trip through the database gives back (aware UTC times).
    return replace(call, decision=replace(decision, decided_at=_utc(decision.decided_at)))


def _stored_call(call: ParkedCall) -> ParkedCall:
    return call if call.decision is None else _decided(call, call.decision)


def _overturned(row: Row) -> dict[str, Any]:
    """A history entry for a decision an interrupted continuation did not carry out.

    Same shape as ``agents_runtime.store.reclaimed_calls`` writes; tolerant of odd rows, because
    reclaiming must never fail.
    """
    decided_at = row["decided_at"]
    return {
        "tool_call_id": row["tool_call_id"],
        "tool_name": row["tool_name"],
        "action": row["action"],
        "decided_at": None if decided_at is None else _utc(decided_at).isoformat(),
        "actor": row["actor"],
        "reason": row["reason"],
        "resume_data": row["resume_data"],
        "edited_args": row["edited_args"],
    }


def _call_records(run_pk: int, calls: Iterable[ParkedCall]) -> list[ParkedCallRecord]:
    records = []
    for position, call in enumerate(calls):
        delegation = call.delegation
        records.append(
            ParkedCallRecord(
                run_id=run_pk,
                position=position,
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                kind=call.kind,
                args=call.args,
                suspend_payload=call.suspend_payload,
                suspend_schema=call.suspend_schema,
                resume_schema=call.resume_schema,
                delegation=None
                if delegation is None
                else {
                    "tool_call_id": delegation.tool_call_id,
                    "inner_run_id": delegation.inner_run_id,
                    "inner_tool_call_id": delegation.inner_tool_call_id,
                },
                **({} if call.decision is None else _decision_columns(call.decision)),
            )
        )
    return records


def _optional_dict(row: Row, name: str) -> dict[str, Any] | None:
    value = row[name]
    if value is not None and not isinstance(value, dict):
        raise CorruptRow(f"call {row['tool_call_id']!r}: {name} is a {type(value).__name__}, not an object")
    return value


def _parked_call(row: Row) -> ParkedCall:
    tool_call_id, tool_name, kind = row["tool_call_id"], row["tool_name"], row["kind"]
    if not isinstance(tool_call_id, str) or not tool_call_id or not isinstance(tool_name, str):
        raise CorruptRow(f"call row {row['id']} has no tool call id or tool name")
    if kind not in _CALL_KINDS:
        raise CorruptRow(f"call {tool_call_id!r} has an unknown kind {kind!r}")
    delegation = _optional_dict(row, "delegation")
    try:
        parsed_delegation = (
            None
            if delegation is None
            else Delegation(
                tool_call_id=str(delegation["tool_call_id"]),
                inner_run_id=str(delegation["inner_run_id"]),
                inner_tool_call_id=str(delegation["inner_tool_call_id"]),
            )
        )
    except KeyError as exc:
        raise CorruptRow(f"call {tool_call_id!r}: delegation lacks {exc}") from exc
    decision = None
    if row["action"] is not None:
        if row["action"] not in _ACTIONS or row["decided_at"] is None:
            raise CorruptRow(f"call {tool_call_id!r} has an invalid decision ({row['action']!r})")
        decision = Decision(
            action=cast(DecisionAction, row["action"]),
            decided_at=_utc(row["decided_at"]),
            actor=row["actor"],
            reason=row["reason"],
            resume_data=row["resume_data"],
            edited_args=_optional_dict(row, "edited_args"),
        )
    return ParkedCall(
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        kind=cast(CallKind, kind),
        args=_optional_dict(row, "args"),
        suspend_payload=row["suspend_payload"],
        suspend_schema=_optional_dict(row, "suspend_schema"),
        resume_schema=_optional_dict(row, "resume_schema"),
        delegation=parsed_delegation,
        decision=decision,
    )


def _parked_calls(rows: Iterable[Row]) -> tuple[ParkedCall, ...]:
    return tuple(_parked_call(row) for row in rows)


def _stored_run(row: Row, calls: tuple[ParkedCall, ...], *, with_snapshot: bool) -> StoredRun:
    history = row["history"]
    if not isinstance(history, list) or not all(isinstance(entry, dict) for entry in history):
        raise CorruptRow("history is not a list of objects")
    snapshot: dict[str, Any] | None = None
    if with_snapshot:
        snapshot = row["snapshot"]
        if not isinstance(snapshot, dict):
            raise CorruptRow(f"snapshot is a {type(snapshot).__name__}, not an object")
    return StoredRun(
        run_id=row["run_id"],
        agent_id=row["agent_id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        parent_run_id=row["parent_run_id"],
        created_at=_utc(row["created_at"]),
        suspended_at=_utc(row["suspended_at"]),
        status=cast(Any, str(row["status"])),
        version=row["version"],
        interrupted=row["interrupted"],
        calls=calls,
        snapshot=snapshot,
        history=tuple(history),
    )
