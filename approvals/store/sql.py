"""The run store's raw SQL: statements on the approval path, one round trip each."""

from __future__ import annotations

import logging
from functools import cache

from approvals.models import EndedRun, ParkedCallRecord, RunRecord, RunStatus, ThreadMessage
from approvals.store import audit as decision_records

logger = logging.getLogger(__name__)


# Uses the partial index run_running_lease_idx; the status is a literal so SQLite can prove that.
EXPIRED_SQL = (
    f"SELECT id, version FROM {RunRecord._meta.db_table}"
    f" WHERE status = '{RunStatus.RUNNING.value}' AND lease_expires_at < %s"
)


FINISH_SQL = (
    f"DELETE FROM {RunRecord._meta.db_table}"
    f" WHERE run_id = %s AND version = %s AND status = '{RunStatus.RUNNING.value}' AND lease_expires_at >= %s"
    " RETURNING agent_id, thread_id, resource_id, parent_run_id, created_at"
)
#: The ended run's permanent record (``EndedRun``): the run's columns from ``ended``, then the
#: parameters ended_at, status, detail, transcript. A run id ends once; should one ever come back,
#: the first record stays and the run still ends.
_RECORD_ENDED_SQL = (
    f"INSERT INTO {EndedRun._meta.db_table}"
    " (run_id, agent_id, thread_id, resource_id, parent_run_id, created_at, ended_at, status, detail,"
    " transcript)"
    " SELECT %s, agent_id, thread_id, resource_id, parent_run_id, created_at, %s, %s, %s, %s FROM ended"
    " ON CONFLICT (run_id) DO NOTHING"
)
#: PostgreSQL: the same and the thread's new messages, in one statement.
FINISH_REMEMBERING_SQL = (
    f"WITH ended AS ({FINISH_SQL}), remembered AS ("
    f" INSERT INTO {ThreadMessage._meta.db_table} (agent_id, thread_id, messages, created_at)"
    " SELECT agent_id, thread_id, %s, now() FROM ended WHERE thread_id IS NOT NULL AND %s"
    " RETURNING 1),"
    f" recorded AS ({_RECORD_ENDED_SQL} RETURNING 1),"
    f" settled AS ({decision_records.settle_sql(guard=' AND EXISTS (SELECT 1 FROM ended)')} RETURNING 1)"
    " SELECT count(*) FROM ended"
)


#: The write-ahead "the tool is starting" marker, only while the claim at a version holds (current
#: version, still running, lease not run out). One round trip: it is on every approval's path.
MARK_TOOL_STARTED_SQL = (
    f"UPDATE {ParkedCallRecord._meta.db_table} SET tool_started_at = %s"
    f" WHERE tool_call_id = %s AND run_id = (SELECT id FROM {RunRecord._meta.db_table}"
    f" WHERE run_id = %s AND version = %s AND status = '{RunStatus.RUNNING.value}'"
    " AND lease_expires_at >= %s)"
)

#: A claim's continuation takes its lease, once: only a claim without a lease yet takes one. One
#: round trip on every approval's path, as the mark above.
START_CONTINUATION_SQL = (
    f"UPDATE {RunRecord._meta.db_table} SET lease_expires_at = %s"
    f" WHERE run_id = %s AND version = %s AND lease_expires_at IS NULL"
    f" AND status = '{RunStatus.RUNNING.value}'"
)

DECISION_COLUMN_ORDER = ("action", "actor", "decided_at", "reason", "resume_data", "edited_args")


def _at_version_sql(columns: tuple[str, ...]) -> str:
    """PostgreSQL: write ``columns`` of an undecided call if its run is still at the version it was
    read at (see ``DjangoRunStore._write_decision_at_version``), with the audit row."""
    return (
        # A claim has no lease until its continuation starts (``DjangoRunStore.start_continuation``).
        f"WITH run AS (UPDATE {RunRecord._meta.db_table}"
        " SET version = %s, status = %s, lease_expires_at = NULL"
        f" WHERE id = %s AND version = %s AND status = '{RunStatus.SUSPENDED.value}' RETURNING id),"
        f" call AS (UPDATE {ParkedCallRecord._meta.db_table}"
        f" SET {', '.join(f'{name} = %s' for name in columns)}"
        " WHERE id = %s AND action IS NULL AND EXISTS (SELECT 1 FROM run) RETURNING id),"
        # The decision's audit row, in the same statement: written exactly when the call's is.
        f" audit AS ({decision_records.insert_sql('call')})"
        " SELECT (SELECT count(*) FROM run), (SELECT count(*) FROM call), (SELECT id FROM audit)"
    )


@cache
def decide_at_version_sql() -> str:
    # Built on first use: naming the user table needs the app registry.
    return _at_version_sql(DECISION_COLUMN_ORDER)


@cache
def vote_at_version_sql() -> str:
    """The same for a vote (``tool(approvals=N)``): the call's votes instead of its decision."""
    return _at_version_sql(("votes",))


#: How often a decision is tried again on PostgreSQL when other decisions on the run come first.
OPTIMISTIC_ATTEMPTS = 16
