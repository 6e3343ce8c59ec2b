"""Deadlines in the run store: the due calls the expiry sweep reads, and moving a call's deadline.

An expiry itself is a decision (``decide``); escalating a call or extending its deadline is not: the
call keeps waiting with a new deadline (and group), changed under the run row's lock with the run's
version moved, so a decision planned on the old deadline is planned again. Its audit row (outcome
``rescheduled``) is written in the same transaction.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.db import transaction

from agents_runtime import RunNotFound
from agents_runtime.records import DeadlineChange, DeadlineRule, StoredRun, decision_conflict
from agents_runtime.vocabulary import DecisionAction, Outcome
from approvals.models import RunStatus
from approvals.store import audit as decision_records
from approvals.store.records import CorruptRow, parked_calls, stored_run, utc
from approvals.store.tables import Tables

logger = logging.getLogger(__name__)


class Deadlines:
    """``DjangoRunStore.due_calls`` and ``change_deadline`` (a mixin on the store's queries)."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def due_calls(self, agent_id: str, before: datetime, *, limit: int) -> list[tuple[str, str]]:
        with self.tables.connection_scope():
            # A range scan of the partial index call_undecided_expiry_idx: only the due calls.
            rows = (
                self.tables.calls()
                .undecided()
                .filter(
                    expires_at__lte=utc(before),
                    run__agent_id=agent_id,
                    run__status=RunStatus.SUSPENDED,
                    run__parent_run_id__isnull=True,
                )
                .order_by("expires_at", "pk")
                .values_list("run__run_id", "tool_call_id")[:limit]
            )
            return [(str(run_id), str(tool_call_id)) for run_id, tool_call_id in rows]

    def change_deadline(self, *, agent_id: str, run_id: str, rule: DeadlineRule) -> StoredRun:
        with self.tables.connection_scope(), transaction.atomic(using=self.tables.using):
            found = self.tables.current_run(run_id, agent_id=agent_id, with_snapshot=False, lock=True)
            if found is None:
                raise RunNotFound(run_id)
            row, call_rows = found
            try:
                run = stored_run(row, parked_calls(call_rows), with_snapshot=False)
            except CorruptRow as exc:
                logger.warning("Run %s is unreadable and treated as missing: %s", run_id, exc)
                raise RunNotFound(run_id) from exc
            change = rule(run)
            index = next((i for i, c in enumerate(run.calls) if c.tool_call_id == change.tool_call_id), None)
            call = None if index is None else run.calls[index]
            if index is None or call is None or call.decision is not None or run.status != "suspended":
                raise decision_conflict(run, call, change.tool_call_id)
            expires_at = None if change.expires_at is None else utc(change.expires_at)
            self.tables.calls().filter(pk=call_rows[index]["id"]).undecided().update(
                expires_at=expires_at, escalated_to=change.escalated_to
            )
            self.tables.runs().filter(pk=row["pk"], version=run.version).update(version=run.version + 1)
            moved = replace(call, expires_at=expires_at, escalated_to=change.escalated_to)
            after = replace(
                run,
                version=run.version + 1,
                calls=tuple(moved if i == index else c for i, c in enumerate(run.calls)),
            )
            decision_records.create_decision_row(
                self.tables.using, _audit_values(after, moved, change, call.expires_at)
            )
            return after


def _audit_values(
    run: StoredRun, call: Any, change: DeadlineChange, before: datetime | None
) -> dict[str, Any]:
    new = "none" if change.expires_at is None else utc(change.expires_at).isoformat(timespec="seconds")
    old = "none" if before is None else utc(before).isoformat(timespec="seconds")
    if change.action == DecisionAction.ESCALATE:
        detail = f"Escalated to {change.escalated_to}; new deadline {new}."
    else:
        detail = f"Deadline moved from {old} to {new}."
    return decision_records.call_row_values(
        run, call, at=change.changed_at, actor=change.actor, action=change.action,
        reason=change.reason, outcome=Outcome.RESCHEDULED, detail=detail,
    )  # fmt: skip
