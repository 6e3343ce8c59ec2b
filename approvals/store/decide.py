"""Deciding a call: the plan a decision makes on the run as read, and its conditional writes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from django.db import connections, transaction

from agents_runtime import RunAlreadyDecided, RunNotFound
from agents_runtime.grants import GrantUnavailable
from agents_runtime.records import (
    Decision,
    DecisionReceipt,
    DecisionRule,
    ParkedCall,
    StoredRun,
    Vote,
    decision_conflict,
)
from approvals.models import ParkedCallRecord, RunStatus
from approvals.server import database
from approvals.store import audit as decision_records
from approvals.store.grants import Grants
from approvals.store.records import (
    CALL_COLUMNS,
    CorruptRow,
    Row,
    decided_call,
    decision_columns,
    parked_call,
    parked_calls,
    stored_run,
    utc,
    votes_column,
)
from approvals.store.sql import (
    DECISION_COLUMN_ORDER,
    OPTIMISTIC_ATTEMPTS,
    decide_at_version_sql,
    vote_at_version_sql,
)
from approvals.store.tables import Tables

logger = logging.getLogger(__name__)


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
    #: Whether this decision claims the run (without a lease: its continuation takes one when it starts).
    claimed: bool
    #: Set when the rule recorded an approval as one vote of several (``decision`` is that approval).
    vote: Vote | None = None

    def audit_values(self) -> dict[str, Any]:
        return decision_records.decision_values(
            self.run, self.call, self.decision, claims=self.claimed, calls_after=self.calls, vote=self.vote
        )

    def call_columns(self) -> dict[str, Any]:
        """What the call's row gets: its decision, or (a vote) its votes."""
        if self.vote is not None:
            return {"votes": votes_column(self.vote.votes)}
        return decision_columns(self.decision)

    def receipt(self, record_id: int | None) -> DecisionReceipt:
        decided = next(c for c in self.calls if c.tool_call_id == self.call.tool_call_id)
        after = replace(
            self.run,
            calls=self.calls,
            version=self.version,
            status="running" if self.claimed else "suspended",
        )
        return DecisionReceipt(
            run=after,
            call=decided,
            claimed_version=self.version if self.claimed else None,
            vote=self.vote,
            record_id=record_id,
        )


class Decisions:
    """``RunStore.decide`` on the ORM: the part of ``DjangoRunStore`` that records decisions."""

    def __init__(self, tables: Tables, grants: Grants) -> None:
        self.tables = tables
        self.grants = grants

    def decide(
        self,
        *,
        agent_id: str,
        run_id: str,
        rule: DecisionRule,
        claim_when_complete: bool = True,
    ) -> DecisionReceipt:
        with self.tables.connection_scope():
            if connections[self.tables.using].vendor != "postgresql":
                return self._decide_locked(agent_id, run_id, rule, claim_when_complete)
            # PostgreSQL: read, then one conditional statement, no transaction around them (two
            # round trips instead of five on every approval). Optimistic: when the run changed in
            # between (another call of it was decided), read it again and decide on what is current.
            for _ in range(OPTIMISTIC_ATTEMPTS):
                found = self.tables.current_run(run_id, agent_id=agent_id, with_snapshot=True)
                plan = self._plan_decision(run_id, found, rule, claim_when_complete)
                if plan.decision.grant_id is not None:
                    # A grant's use commits with the approval it gives, or not at all.
                    return self._decide_locked(agent_id, run_id, rule, claim_when_complete)
                record_id = self._write_decision_at_version(plan)
                if record_id is not None:
                    return plan.receipt(record_id)
            raise self._conflict(plan.run, plan.call_pk, plan.call.tool_call_id)

    def _decide_locked(
        self, agent_id: str, run_id: str, rule: DecisionRule, claim_when_complete: bool
    ) -> DecisionReceipt:
        """The decision in one transaction holding the run row's lock (SQLite, and grants' uses)."""
        with transaction.atomic(using=self.tables.using):
            found = self.tables.current_run(run_id, agent_id=agent_id, with_snapshot=True, lock=True)
            plan = self._plan_decision(run_id, found, rule, claim_when_complete)
            if not self._write_decision_locked(plan):
                raise self._conflict(plan.run, plan.call_pk, plan.call.tool_call_id)
            grant_id = plan.decision.grant_id
            if grant_id is not None and not self.grants.take_use(
                grant_id, agent_id=agent_id, tool_name=plan.call.tool_name, at=plan.decision.decided_at
            ):
                raise GrantUnavailable(grant_id)  # rolls the decision back with the transaction
            return plan.receipt(decision_records.create_decision_row(self.tables.using, plan.audit_values()))

    def _plan_decision(
        self, run_id: str, found: tuple[Row, list[Row]] | None, rule: DecisionRule, claim_when_complete: bool
    ) -> _DecisionPlan:
        """What a decision will write on the run as read, or the error that refuses it."""
        if found is None:
            raise RunNotFound(run_id)
        row, call_rows = found
        try:
            run = stored_run(row, parked_calls(call_rows), with_snapshot=True)
        except CorruptRow as exc:
            logger.warning("Run %s is unreadable and treated as missing: %s", run_id, exc)
            raise RunNotFound(run_id) from exc
        tool_call_id, verdict = rule(run)
        index = next((i for i, c in enumerate(run.calls) if c.tool_call_id == tool_call_id), None)
        if index is None:
            raise decision_conflict(run, None, tool_call_id)
        call, call_pk = run.calls[index], call_rows[index]["id"]
        if call.decision is not None or run.status != "suspended":
            raise self._conflict(run, call_pk, tool_call_id)
        vote = verdict if isinstance(verdict, Vote) else None
        decision = verdict.approval if isinstance(verdict, Vote) else verdict
        if vote is not None:
            votes = tuple(replace(v, decided_at=utc(v.decided_at)) for v in vote.votes)
            decided = replace(call, votes=votes)
        else:
            decided = decided_call(call, decision)
        calls = tuple(c if i != index else decided for i, c in enumerate(run.calls))
        claim = vote is None and claim_when_complete and all(c.decision is not None for c in calls)
        return _DecisionPlan(
            run=run,
            run_pk=row["pk"],
            call=call,
            call_pk=call_pk,
            decision=decision,
            calls=calls,
            version=run.version + (2 if claim else 1),
            claimed=claim,
            vote=vote,
        )

    def _write_decision_locked(self, plan: _DecisionPlan) -> bool:
        """Both writes, in the transaction that locked the run row."""
        recorded = self.tables.calls().filter(pk=plan.call_pk).undecided()
        if recorded.update(**plan.call_columns()) != 1:
            return False
        changes: dict[str, Any] = {"version": plan.version}
        if plan.claimed:
            changes.update(status=RunStatus.RUNNING, lease_expires_at=None)
        runs = self.tables.runs().filter(pk=plan.run_pk, version=plan.run.version).suspended()
        return runs.update(**changes) == 1

    def _write_decision_at_version(self, plan: _DecisionPlan) -> int | None:
        """Both writes in one statement, if the run is still at the version the plan was made on: the
        audit row's id (None: the run moved on, nothing written).

        The run row is updated first, so the statement holds its lock while it records the call.
        Every writer of a run's calls locks its run row first and moves its version, so a run
        still at that version has its calls as read: the call's update cannot miss.
        """
        connection = connections[self.tables.using]
        columns = plan.call_columns()
        names = DECISION_COLUMN_ORDER if plan.vote is None else ("votes",)
        with database.cursor(self.tables.using) as cursor:
            cursor.execute(
                decide_at_version_sql() if plan.vote is None else vote_at_version_sql(),
                [
                    plan.version,
                    (RunStatus.RUNNING if plan.claimed else RunStatus.SUSPENDED).value,
                    plan.run_pk,
                    plan.run.version,
                    *(
                        ParkedCallRecord._meta.get_field(name).get_db_prep_save(columns[name], connection)  # type: ignore[union-attr]
                        for name in names
                    ),
                    plan.call_pk,
                    *decision_records.insert_params(plan.audit_values(), connection),
                ],
            )
            runs_written, calls_written, record_id = cursor.fetchone()
        if runs_written and not calls_written:
            logger.error("Run %s: moved to version %s without its decision", plan.run.run_id, plan.version)
        return int(record_id) if runs_written and calls_written and record_id is not None else None

    def _conflict(self, run: StoredRun, call_pk: int, tool_call_id: str) -> Exception:
        """The error for a call someone else decided, with who and when as committed.

        Read again in a statement of its own: on PostgreSQL the locking query's joined call rows
        may predate the decision that won (only the locked run row is re-read after the wait).
        """
        row = self.tables.calls().filter(pk=call_pk).values(*CALL_COLUMNS).first()
        try:
            call = None if row is None else parked_call(row)
        except CorruptRow:
            call = None
        if call is None or call.decision is None:
            return RunAlreadyDecided(run_id=run.run_id, tool_call_id=tool_call_id)
        return decision_conflict(run, call, tool_call_id)
