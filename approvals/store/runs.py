"""``DjangoRunStore``: the runtime's run store on the Django ORM (SQLite by default, PostgreSQL).

Behaves exactly like ``agents_runtime.store.InMemoryRunStore`` (the reference), but the runs live in
the database, so every process and server instance on it sees the same suspended runs.

- Listings filter, order, count and page in SQL, in one statement (``listing``): the page with its
  calls, the exact total (a counter the database keeps, or a COUNT of a filter's matches), snapshots
  never loaded.
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connections, transaction

from agents_runtime import Continuation
from agents_runtime.grants import Grant, GrantRequest, GrantStore
from agents_runtime.records import (
    DeadlineRule,
    Decision,
    DecisionReceipt,
    DecisionRule,
    RunEnding,
    RunQuery,
    StoredRun,
    Suspension,
)
from agents_runtime.routing import Rule, RuleRequest, RuleStore
from agents_runtime.store import RunStore
from agents_runtime.untrusted import clean_text
from agents_runtime.vocabulary import Outcome, recheck_detail, suspended_again_detail
from approvals.models import (
    AuditEntry,
    EndedRun,
    RunRecord,
    RunRecordQuerySet,
    RunStatus,
    Series,
    ThreadMessage,
    add_counts,
)
from approvals.server import database
from approvals.store import audit as decision_records
from approvals.store import listing, queue
from approvals.store.deadlines import Deadlines
from approvals.store.decide import Decisions
from approvals.store.grants import Grants
from approvals.store.records import (
    CorruptRow,
    call_records,
    decided_call,
    decision_columns,
    parked_calls,
    stored_call,
    stored_run,
    utc,
)
from approvals.store.rules import Rules
from approvals.store.sql import (
    FINISH_REMEMBERING_SQL,
    FINISH_SQL,
    MARK_TOOL_STARTED_SQL,
    START_CONTINUATION_SQL,
)
from approvals.store.tables import Tables, utc_now

logger = logging.getLogger(__name__)


class DjangoRunStore(RunStore, GrantStore, RuleStore):
    """The run store on the default database (or ``using``); safe to share between threads.

    ``lease`` defaults to ``settings.RUN_LEASE_SECONDS`` (300), read when first needed. Building a
    store never touches the database, so it may be built at import time. The run's life (parking,
    claiming, finishing) is written here; its parts do the rest on the same ``Tables``: decisions
    (``decide``), grants (``grants``), routing rules (``rules``), deadlines (``deadlines``),
    listings (``listing``).
    """

    def __init__(
        self,
        lease: timedelta | None = None,
        *,
        using: str = "default",
        listings_using: str | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.tables = Tables(lease, using=using, listings_using=listings_using, clock=clock)
        self.grants = Grants(self.tables)
        self.rules = Rules(self.tables)
        self.decisions = Decisions(self.tables, self.grants)
        self.deadlines = Deadlines(self.tables)

    def __repr__(self) -> str:
        return f"DjangoRunStore(lease={self.tables.lease!r}, using={self.tables.using!r})"

    @property
    def using(self) -> str:
        return self.tables.using

    @property
    def lease(self) -> timedelta:
        return self.tables.lease

    @lease.setter
    def lease(self, value: timedelta) -> None:
        self.tables.lease = value

    #: How the runtime calls this store from async code: on the thread that holds the caller's
    #: database connection, so a request never needs a second one (``approvals.server.database``).
    run_sync = staticmethod(database.run_sync)

    # -- its parts --------------------------------------------------------------------------------

    def decide(
        self, *, agent_id: str, run_id: str, rule: DecisionRule, claim_when_complete: bool = True
    ) -> DecisionReceipt:
        return self.decisions.decide(
            agent_id=agent_id, run_id=run_id, rule=rule, claim_when_complete=claim_when_complete
        )

    def due_calls(self, agent_id: str, before: datetime, *, limit: int) -> list[tuple[str, str]]:
        return self.deadlines.due_calls(agent_id, before, limit=limit)

    def change_deadline(self, *, agent_id: str, run_id: str, rule: DeadlineRule) -> StoredRun:
        return self.deadlines.change_deadline(agent_id=agent_id, run_id=run_id, rule=rule)

    def add_rule(self, request: RuleRequest) -> Rule:
        return self.rules.add_rule(request)

    def change_rule(self, rule_id: int, request: RuleRequest) -> Rule:
        return self.rules.change_rule(rule_id, request)

    def delete_rule(self, rule_id: int, *, actor: str, at: datetime) -> Rule:
        return self.rules.delete_rule(rule_id, actor=actor, at=at)

    def get_rule(self, rule_id: int) -> Rule | None:
        return self.rules.get_rule(rule_id)

    def rules_for(self, agent_id: str, tool_name: str) -> list[Rule]:
        return self.rules.rules_for(agent_id, tool_name)

    def add_grant(self, request: GrantRequest) -> Grant:
        return self.grants.add_grant(request)

    def revoke_grant(self, grant_id: int, *, actor: str, at: datetime) -> Grant:
        return self.grants.revoke_grant(grant_id, actor=actor, at=at)

    def get_grant(self, grant_id: int) -> Grant | None:
        return self.grants.get_grant(grant_id)

    def live_grants(
        self, agent_id: str, tool_name: str, *, thread_id: str | None, resource_id: str | None, at: datetime
    ) -> list[Grant]:
        return self.grants.live_grants(
            agent_id, tool_name, thread_id=thread_id, resource_id=resource_id, at=at
        )

    def note_condition_failure(self, grant_id: int, *, error: str, at: datetime) -> None:
        self.grants.note_condition_failure(grant_id, error=error, at=at)

    # -- the run's life ---------------------------------------------------------------------------

    def insert_suspended(self, suspension: Suspension) -> StoredRun:
        with self.tables.connection_scope():
            try:
                with transaction.atomic(using=self.tables.using):
                    record = self.tables.runs().create(
                        run_id=suspension.run_id,
                        agent_id=suspension.agent_id,
                        thread_id=suspension.thread_id,
                        resource_id=suspension.resource_id,
                        parent_run_id=suspension.parent_run_id,
                        created_at=utc(suspension.created_at),
                        suspended_at=utc(suspension.suspended_at),
                        status=RunStatus.SUSPENDED,
                        version=1,
                        interrupted=False,
                        snapshot=suspension.snapshot,
                        history=[],
                        started_by=suspension.started_by,
                    )
                    self.tables.calls().bulk_create(call_records(record.pk, suspension.calls))
            except IntegrityError as exc:
                if self.tables.runs().filter(run_id=suspension.run_id).exists():
                    raise ValueError(f"Run {suspension.run_id!r} already exists") from exc
                raise
            return StoredRun(
                run_id=suspension.run_id,
                agent_id=suspension.agent_id,
                thread_id=suspension.thread_id,
                resource_id=suspension.resource_id,
                parent_run_id=suspension.parent_run_id,
                created_at=utc(suspension.created_at),
                suspended_at=utc(suspension.suspended_at),
                status="suspended",
                version=1,
                interrupted=False,
                calls=tuple(stored_call(c) for c in suspension.calls),
                snapshot=suspension.snapshot,
                started_by=suspension.started_by,
            )

    def resuspend(self, suspension: Suspension, *, expected_version: int) -> StoredRun | None:
        with self.tables.connection_scope(), transaction.atomic(using=self.tables.using):
            found = self.tables.current_run(suspension.run_id, with_snapshot=False, lock=True)
            if found is None:
                return None
            row = found[0]
            if row["status"] != RunStatus.RUNNING or row["version"] != expected_version:
                return None
            changes: dict[str, Any] = {
                "status": RunStatus.SUSPENDED,
                "version": expected_version + 1,
                "interrupted": False,
                "suspended_at": utc(suspension.suspended_at),
                "lease_expires_at": None,
                "snapshot": suspension.snapshot,
            }
            self.tables.runs().filter(pk=row["pk"]).update(**changes)
            run = {**row, **changes}
            # Replace, never append: repeated suspensions of one run keep the same row count.
            self.tables.calls().filter(run=run["pk"]).delete()
            self.tables.calls().bulk_create(call_records(run["pk"], suspension.calls))
            waiting = [c for c in suspension.calls if c.decision is None]
            audit = AuditEntry.objects.using(self.tables.using)
            for call in waiting:
                # An approval its recheck sent back (``tool(recheck=True)``): it did not run, and why.
                recheck = (call.context or {}).get("recheck")
                if isinstance(recheck, dict):
                    error = recheck.get("error")
                    outcome = Outcome.RECHECK_FAILED if error else Outcome.RECHECK_CHANGED
                    detail = recheck_detail(error if isinstance(error, str) else None)
                    audit.settle(suspension.run_id, outcome, detail, tool_call_ids=[call.tool_call_id])
            audit.settle(
                suspension.run_id,
                Outcome.SUSPENDED_AGAIN,
                suspended_again_detail(c.tool_name for c in waiting),
            )
        return stored_run(run, tuple(stored_call(c) for c in suspension.calls), with_snapshot=True)

    def get_run(self, run_id: str, *, with_snapshot: bool = True) -> StoredRun | None:
        with self.tables.connection_scope():
            found = self.tables.current_run(run_id, with_snapshot=with_snapshot)
            if found is None:
                return None
            run, call_rows = found
            try:
                return stored_run(run, parked_calls(call_rows), with_snapshot=with_snapshot)
            except CorruptRow as exc:
                logger.warning("Run %s is unreadable and treated as missing: %s", run_id, exc)
                return None

    def list_suspended(self, query: RunQuery) -> tuple[list[StoredRun], int]:
        reading = self.tables.listings_using
        with self.tables.connection_scope(reading), self.tables.connection_scope():
            query = replace(
                query,
                created_from=None if query.created_from is None else utc(query.created_from),
                created_to=None if query.created_to is None else utc(query.created_to),
                expiring_before=None if query.expiring_before is None else utc(query.expiring_before),
            )
            # One statement: the page, its calls, the total, and whether a claim's lease ran out (then
            # those runs are reclaimed, waiting again, and the listing is read again).
            runs_read = RunRecord.objects.using(reading)
            runs, total, expired = listing.page(runs_read, reading, query, now=self.tables.clock())
            if expired and self.tables.reclaim_expired():
                runs, total, _ = listing.page(runs_read, reading, query, now=self.tables.clock())
            listed = []
            for run, call_rows in runs:
                try:
                    listed.append(stored_run(run, parked_calls(call_rows), with_snapshot=False))
                except CorruptRow as exc:
                    logger.warning(
                        "Suspended run %s is unreadable and left out of the listing: %s", run["run_id"], exc
                    )
            return listed, total

    def queue(self, query: queue.QueueQuery) -> queue.QueuePage:
        """A page of the reviewer's queue across agents (``store.queue``; beyond the runtime's
        protocol: the dashboard's own read)."""
        with self.tables.connection_scope():
            # (An indexed probe, as before a listing: a run whose claim ran out waits again.)
            self.tables.reclaim_expired()
            return queue.page(self.tables.using, query)

    def claim(
        self,
        run_id: str,
        *,
        expected_version: int | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> StoredRun | None:
        with self.tables.connection_scope(), transaction.atomic(using=self.tables.using):
            found = self.tables.current_run(run_id, with_snapshot=True, lock=True)
            if found is None or found[0]["status"] != RunStatus.SUSPENDED:
                return None
            if expected_version is not None and found[0]["version"] != expected_version:
                return None
            row, call_rows = found
            try:
                run = stored_run(row, parked_calls(call_rows), with_snapshot=True)
            except CorruptRow as exc:
                logger.warning("Run %s is unreadable and cannot be continued: %s", run_id, exc)
                return None
            calls = list(run.calls)
            for i, call in enumerate(calls):
                decision = (decisions or {}).get(call.tool_call_id)
                if call.decision is None and decision is not None:
                    recorded = self.tables.calls().filter(pk=call_rows[i]["id"]).undecided()
                    if recorded.update(**decision_columns(decision)) != 1:
                        transaction.set_rollback(True, using=self.tables.using)
                        return None
                    calls[i] = decided_call(call, decision)
            swapped = (
                self.tables.runs()
                .filter(pk=row["pk"], version=run.version)
                .suspended()
                # No lease until its continuation starts (``start_continuation``).
                .update(status=RunStatus.RUNNING, version=run.version + 1, lease_expires_at=None)
            )
            if swapped != 1:
                transaction.set_rollback(True, using=self.tables.using)
                return None
            return replace(run, status="running", version=run.version + 1, calls=tuple(calls))

    def _held_claim(self, run_id: str, version: int, now: datetime) -> RunRecordQuerySet:
        """The run while the claim at ``version`` holds: current version, lease not run out."""
        return self.tables.runs().filter(run_id=run_id, version=version, lease_expires_at__gte=now).running()

    def start_continuation(self, run_id: str, *, version: int) -> bool:
        connection = connections[self.tables.using]
        expires = connection.ops.adapt_datetimefield_value(self.tables.clock() + self.tables.lease)
        with self.tables.connection_scope(), database.cursor(self.tables.using) as cursor:
            cursor.execute(START_CONTINUATION_SQL, [expires, run_id, version])
            return bool(cursor.rowcount == 1)

    def reclaim_expired(self) -> list[tuple[str, str]]:
        with self.tables.connection_scope():
            return self.tables.reclaim_expired()

    def unstarted_claims(self, *, decided_before: datetime) -> list[Continuation]:
        """The continuations of claimed runs nobody started, though their last decision was before
        ``decided_before`` (beyond the protocol: for the sweep that queues them again)."""
        with self.tables.connection_scope():
            rows = self.tables.runs().unstarted_claims(decided_before)
            return [
                Continuation(agent_id=agent_id, run_id=run_id, version=version)
                for agent_id, run_id, version in rows.values_list("agent_id", "run_id", "version")
            ]

    def mark_tool_started(self, run_id: str, tool_call_id: str, *, version: int) -> bool:
        # Only while this claim holds (current version, lease not run out): a continuation that lost
        # its run must not run the tool. Committed (autocommit) before the tool is called.
        connection = connections[self.tables.using]
        now = connection.ops.adapt_datetimefield_value(self.tables.clock())
        with self.tables.connection_scope(), database.cursor(self.tables.using) as cursor:
            cursor.execute(MARK_TOOL_STARTED_SQL, [now, tool_call_id, run_id, version, now])
            return bool(cursor.rowcount == 1)

    def heartbeat(self, run_id: str, *, version: int) -> bool:
        with self.tables.connection_scope():
            now = self.tables.clock()
            # A claim whose lease already ran out is given back (reclaimed), never renewed.
            held = self._held_claim(run_id, version, now)
            if held.update(lease_expires_at=now + self.tables.lease) == 1:
                return True
            self.tables.reclaim_expired()
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
        connection = connections[self.tables.using]
        outcome, detail = decision_records.ending_outcome(ending)
        ended_at = self.tables.clock()
        now = connection.ops.adapt_datetimefield_value(ended_at)
        with self.tables.connection_scope():
            if connection.vendor == "postgresql":
                # One statement and no transaction around it: three round trips fewer on a path
                # every approval takes.
                messages = ThreadMessage._meta.get_field("messages").get_db_prep_value(
                    list(thread_messages), connection
                )
                record = ended_record(ending)
                transcript = EndedRun._meta.get_field("transcript").get_db_prep_value(
                    record["transcript"], connection
                )
                with database.cursor(self.tables.using) as cursor:
                    cursor.execute(
                        FINISH_REMEMBERING_SQL,
                        [
                            *(run_id, version, now, messages, bool(thread_messages)),
                            *(run_id, now, record["status"], record["detail"], transcript),
                            *(outcome, detail, run_id),
                        ],
                    )
                    (ended,) = cursor.fetchone()
                return bool(ended)
            with transaction.atomic(using=self.tables.using), connection.cursor() as cursor:
                cursor.execute(FINISH_SQL, [run_id, version, now])
                row = cursor.fetchone()
                if row is None:
                    return False
                agent_id, thread_id, resource_id, parent_run_id, created_at = row
                if thread_id is not None and thread_messages:
                    ThreadMessage.objects.using(self.tables.using).create(
                        agent_id=agent_id, thread_id=thread_id, messages=list(thread_messages)
                    )
                EndedRun.objects.using(self.tables.using).bulk_create(
                    [
                        EndedRun(
                            run_id=run_id,
                            agent_id=agent_id,
                            thread_id=thread_id,
                            resource_id=resource_id,
                            parent_run_id=parent_run_id,
                            created_at=_raw_datetime(created_at),
                            ended_at=ended_at,
                            **ended_record(ending),
                        )
                    ],
                    ignore_conflicts=True,
                )
                AuditEntry.objects.using(self.tables.using).settle(run_id, outcome, detail)
                return True

    def append_thread_messages(self, agent_id: str, thread_id: str, messages: Sequence[Any]) -> None:
        if not messages:
            return
        with self.tables.connection_scope():
            ThreadMessage.objects.using(self.tables.using).create(
                agent_id=agent_id, thread_id=thread_id, messages=list(messages)
            )

    def count_calls(self, agent_id: str, calls: Mapping[str, int], *, at: datetime) -> None:
        # Into the health rollup's hourly rows as the fold counts a parked run's transcript
        # (``approvals.health.counting.count_ended``): one upsert.
        hour = utc(at).replace(minute=0, second=0, microsecond=0)
        rows = [(Series.CALLS.value, hour, agent_id, tool, "", n, 0.0) for tool, n in sorted(calls.items())]
        with self.tables.connection_scope():
            add_counts(rows, using=self.tables.using)

    def thread_messages(self, agent_id: str, thread_id: str, *, last_runs: int | None = None) -> list[Any]:
        with self.tables.connection_scope():
            messages: list[Any] = []
            rows = ThreadMessage.objects.using(self.tables.using).for_thread(agent_id, thread_id)
            read = rows.values_list("pk", "messages")
            chunks: Iterable[tuple[int, Any]] = read
            if last_runs is not None:
                # One row per ended run: the newest from the thread's index, then oldest first.
                chunks = reversed(list(read.reverse()[: max(last_runs, 0)]))
            for pk, chunk in chunks:
                if isinstance(chunk, list):
                    messages.extend(chunk)
                else:
                    logger.warning(
                        "Thread message row %s of %s/%s is not a JSON list; skipped", pk, agent_id, thread_id
                    )
            return messages


def ended_record(ending: RunEnding | None) -> dict[str, Any]:
    """The ``EndedRun`` columns that come from how the run ended (a run dropped without an ending,
    e.g. a sub-agent's run its supervisor no longer waits on, is recorded as failed)."""
    status, detail = Outcome.FAILED, ""
    transcript: list[Any] = []
    if ending is not None:
        status = Outcome.COMPLETED if ending.status == "completed" else Outcome.FAILED
        detail, transcript = clean_text(ending.detail), list(ending.transcript)
    return {"status": status, "detail": detail, "transcript": transcript}


def _raw_datetime(value: Any) -> datetime:
    """A datetime column read with raw SQL: SQLite hands back the stored text (UTC)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return utc(value)


# -- rows <-> records -----------------------------------------------------------------------------
