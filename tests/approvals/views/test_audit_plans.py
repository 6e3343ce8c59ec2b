"""The audit page's reads at millions of rows: on PostgreSQL each filter has an index that serves it,
asked of the planner (EXPLAIN) with the other ways to read the table made as dear as it allows."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from approvals import queries
from approvals.models import AuditEntry
from tests.support.runtime_fixtures import DashboardAgents

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the trigram index is PostgreSQL's"),
]


@pytest.fixture
def planner_without_table_scans(agents: DashboardAgents) -> Iterator[None]:
    """A few rows, fresh statistics, and a planner that reads the table only when no index serves."""
    now = timezone.now()
    for i in range(200):
        AuditEntry.objects.create(
            created_at=now - timedelta(minutes=i),
            username=f"user-{i % 7}",
            agent_id="helpdesk",
            run_id=f"run-{i}",
            tool_call_id=f"call-{i}",
            tool_name="refund" if i % 10 == 0 else "transfer",
            args={"order_id": f"A-{1000 + i}", "amount_cents": i},
            action="approve",
            outcome="failed" if i % 10 == 0 else "completed",
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE approvals_auditentry")
        cursor.execute("SET enable_seqscan = off")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET enable_seqscan")
            cursor.execute("RESET enable_indexscan")


def _plan(**filters: object) -> str:
    entries = AuditEntry.objects.filter(agent_id__in=["helpdesk", "boss"]).matching(**filters)  # type: ignore[arg-type]
    return entries[: queries.AUDIT_PER_PAGE + 1].explain()


def test_the_argument_search_reads_the_trigram_index(planner_without_table_scans: None) -> None:
    with connection.cursor() as cursor:
        # Left only bitmap scans, which need an index condition: the trigram index's, or none at all.
        cursor.execute("SET enable_indexscan = off")

    # Without the visibility filter, whose agent index would offer a bitmap of its own on a table
    # this small: the question is whether the search's expression is the index's.
    plan = AuditEntry.objects.matching(in_args="a-1044")[: queries.AUDIT_PER_PAGE + 1].explain()

    assert "audit_args_trgm" in plan, plan


def test_the_outcome_filter_reads_its_index(planner_without_table_scans: None) -> None:
    plan = _plan(outcome="failed")

    assert "audit_outcome_created" in plan, plan


def test_a_later_page_seeks_its_place_in_an_index(planner_without_table_scans: None) -> None:
    row = AuditEntry.objects.order_by("-created_at", "-id")[120]
    entries = AuditEntry.objects.filter(agent_id__in=["helpdesk"]).matching(agent_id="helpdesk")

    plan = entries.below(row.created_at, row.pk)[:51].explain()

    # The page seeks to its place (an index condition), rather than reading the rows above it.
    assert "Index Cond" in plan and "created_at <=" in plan.split("Filter")[0], plan


def test_the_tool_filter_reads_its_index(planner_without_table_scans: None) -> None:
    plan = _plan(tool_name="refund")

    assert "audit_tool_created" in plan, plan


def test_the_filter_forms_choices_probe_an_index_per_value(planner_without_table_scans: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET enable_bitmapscan = off")
    seen = AuditEntry.objects.values_seen("username", ["helpdesk"])
    with connection.cursor() as cursor:
        cursor.execute("RESET enable_bitmapscan")

    assert seen == [f"user-{i}" for i in range(7)]
    # (The plan of the recursive statement itself: every step an index scan of the username index.)
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN SELECT MIN(username) FROM approvals_auditentry WHERE username > %s AND agent_id IN (%s)",
            ["user-1", "helpdesk"],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "audit_user_created" in plan, plan
