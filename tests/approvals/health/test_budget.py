"""The interruption budget: per agent and tool, calls made (from ended runs' transcripts), the
interruptions among them and how people answered, on the health page and ``/metrics``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from approvals.health import metrics, rollup
from approvals.health.counting import hour_of
from approvals.health.figures import BudgetPeriod, BudgetRow, budget
from approvals.models import AuditEntry, EndedRun
from tests.support.runtime_fixtures import DashboardAgents

NOW = timezone.now()
H = hour_of(NOW)
TOKEN = "budget-metrics-token"


def at(hours_ago: int) -> datetime:
    return H - timedelta(hours=hours_ago) + timedelta(minutes=10)


def ended(when: datetime, agent: str, *tools: str) -> None:
    """A run that ended at ``when`` after the model called ``tools``."""
    transcript: list[dict[str, Any]] = [{"role": "user", "kind": "text", "text": "go", "tool_name": None}]
    for i, tool in enumerate(tools):
        transcript.append(
            {"role": "assistant", "kind": "tool-call", "tool_name": tool, "tool_call_id": f"c{i}"}
        )
        transcript.append({"role": "tool", "kind": "tool-result", "tool_name": tool, "tool_call_id": f"c{i}"})
    EndedRun.objects.create(
        run_id=f"e-{EndedRun.objects.count()}",
        agent_id=agent,
        created_at=when - timedelta(minutes=5),
        ended_at=when,
        status="completed",
        transcript=transcript,
    )


def decided(
    when: datetime,
    waited: float,
    action: str,
    outcome: str = "completed",
    username: str = "rita",
    *,
    channel: str = "dashboard",
    edited: bool = False,
    agent: str = "helpdesk",
    tool: str = "refund",
) -> None:
    AuditEntry.objects.create(
        created_at=when,
        parked_at=when - timedelta(seconds=waited),
        username=username,
        agent_id=agent,
        run_id=f"r-{AuditEntry.objects.count()}",
        tool_call_id="c",
        tool_name=tool,
        action=action,
        outcome=outcome,
        channel=channel,
        edited_args={"amount": 10} if edited else None,
        args={"amount": 20},
    )


@pytest.fixture
def history(agents: DashboardAgents) -> None:
    # The last 24 hours: 8 refunds and a lookup made; 4 refunds interrupted someone.
    ended(at(1), "helpdesk", *["refund"] * 5, "lookup")
    ended(at(2), "helpdesk", *["refund"] * 3)
    decided(at(1), 30, "approve", edited=True)
    decided(at(1), 100, "approve", "continuing", "ada")
    decided(at(2), 60, "decline")
    decided(at(2), 600, "expire", "expired", "", channel="deadline")
    # Not interruptions: a standing grant's approval, a routing rule's allow and deny, a vote, a
    # lost race.
    decided(at(1), 0, "approve", channel="grant")
    decided(at(1), 0, "approve", "completed", "rule #1 of ada", channel="rule")
    decided(at(1), 0, "decline", "completed", "rule #2 of ada", channel="rule")
    decided(at(1), 5, "approve", "vote_recorded", "ada")
    decided(at(1), 5, "approve", "lost_race", "bob")
    # The 24 hours before: 4 refunds made, 1 interrupted.
    ended(at(30), "helpdesk", *["refund"] * 4)
    decided(at(30), 10, "approve")
    # Another agent's.
    ended(at(1), "boss", "worker")
    decided(at(1), 20, "approve", agent="boss", tool="worker")


def row_of(rows: list[BudgetRow], agent: str, tool: str) -> BudgetRow:
    return next(r for r in rows if (r.agent_id, r.tool_name) == (agent, tool))


def check(rows: list[BudgetRow]) -> None:
    refund = row_of(rows, "helpdesk", "refund")
    day = refund.day
    assert (day.calls, day.asked, day.person, day.approved, day.edited) == (8, 4, 3, 2, 1)
    assert day.per_100 == 50
    assert day.approval_rate == pytest.approx(200 / 3)
    assert day.edit_rate == 50
    assert day.median_wait == 60  # 30, 60, 100 (its bucket: 120), 600
    assert day.person_seconds == 190  # the expiry waited on nobody
    assert (refund.prev_day.calls, refund.prev_day.asked, refund.prev_day.per_100) == (4, 1, 25)
    assert (refund.week.calls, refund.week.asked) == (12, 5)
    assert refund.prev_week == BudgetPeriod()
    lookup = row_of(rows, "helpdesk", "lookup")
    assert (lookup.day.calls, lookup.day.asked, lookup.day.per_100, lookup.day.approval_rate) == (
        1,
        0,
        0,
        None,
    )


@pytest.mark.usefixtures("history")
def test_the_budget_from_rows_not_folded_yet_and_the_same_once_folded() -> None:
    check(budget(["helpdesk", "boss"], now=NOW))
    assert rollup.fold_all() > 0
    assert rollup.watermarks() == (
        AuditEntry.objects.order_by("-id")[0].id,
        EndedRun.objects.order_by("-id")[0].id,
    )
    check(budget(["helpdesk", "boss"], now=NOW))
    assert rollup.fold_all() == 0  # folded once
    check(budget(["helpdesk", "boss"], now=NOW))
    assert [(r.agent_id, r.tool_name) for r in budget(["boss"], now=NOW)] == [("boss", "worker")]


@pytest.mark.usefixtures("history")
def test_a_pruned_transcript_counts_no_call() -> None:
    EndedRun.objects.filter(ended_at=at(30)).update(transcript=None, pruned_at=NOW)
    refund = row_of(budget(["helpdesk"], now=NOW), "helpdesk", "refund")
    assert (refund.prev_day.calls, refund.prev_day.asked, refund.prev_day.per_100) == (0, 1, None)


@pytest.mark.usefixtures("history")
def test_the_page_shows_the_budget_with_its_trend(admin_member_client: Client) -> None:
    rollup.fold_all()
    ended(at(1), "helpdesk", "refund", "refund")  # (the page folds it as it reads)
    html = admin_member_client.get("/health/").content.decode()
    assert 'id="chart-budget-title"' in html
    day = html.split('id="health-budget-day"')[1].split("</table>")[0]
    row = day.split('data-tool="refund"')[1].split("</tr>")[0]
    cells = [cell.split('"')[0] for cell in row.split('data-label="')[2:]]
    assert cells == [
        "Calls made",
        "Interruptions per 100 calls",
        "Approval rate",
        "Edit rate",
        "Median time to decision",
        "Waited on reviewers",
    ]
    assert 'data-now="10" data-before="4" data-trend="up"' in row
    assert 'data-now="40" data-before="25" data-trend="up"' in row
    assert 'data-now="66.7 %" data-before="100 %" data-trend="down"' in row
    assert 'data-now="50 %" data-before="0 %" data-trend="up"' in row
    assert 'data-now="≤ 1 min" data-before="≤ 10 s" data-trend="up"' in row
    assert "how long the calls a person decided waited for them" in html
    week = html.split('id="health-budget-week"')[1].split("</table>")[0]
    assert 'data-now="14" data-before="0" data-trend="up"' in week.split('data-tool="refund"')[1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("history")
def test_metrics_give_the_budget_per_agent_and_tool(client: Client, settings: Any) -> None:
    settings.METRICS_TOKEN = TOKEN
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    samples = {
        (s.name, s.labels.get("agent"), s.labels.get("tool")): s.value
        for f in text_string_to_metric_families(response.content.decode())
        for s in f.samples
    }
    refund = ("helpdesk", "refund")
    assert samples[("countersign_tool_calls_24h", *refund)] == 8
    assert samples[("countersign_interruptions_24h", *refund)] == 4
    assert samples[("countersign_interruptions_per_100_calls_24h", *refund)] == 50
    assert samples[("countersign_approval_rate_24h", *refund)] == pytest.approx(200 / 3)
    assert samples[("countersign_edit_rate_24h", *refund)] == 50
    assert samples[("countersign_median_time_to_decision_24h_seconds", *refund)] == 60
    assert samples[("countersign_reviewer_wait_24h_seconds", *refund)] == 190
    assert samples[("countersign_tool_calls_24h", "boss", "worker")] == 1
    # A rate without a denominator is left out rather than written as 0.
    assert ("countersign_approval_rate_24h", "helpdesk", "lookup") not in samples


@pytest.mark.usefixtures("history")
def test_metrics_keep_the_busiest_pairs_and_sum_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "BUDGET_SERIES_MAX", 1)
    kept = metrics.bounded_budget(budget(None, now=NOW))
    assert [(agent, tool) for agent, tool, _ in kept] == [
        ("helpdesk", "refund"),
        ("boss", metrics.OTHER_TOOL),
        ("helpdesk", metrics.OTHER_TOOL),
    ]
    assert [period.calls for _, _, period in kept] == [8, 1, 1]


def test_a_run_that_never_parked_counts_its_calls(agents: DashboardAgents) -> None:
    # Under the transfer tool's threshold: runs at once, no human asked, no run or audit row kept.
    result = agents.start("helpdesk", "transfer 50", thread="t-1")
    assert result.status == "success"
    assert not EndedRun.objects.exists() and not AuditEntry.objects.exists()
    transfer = row_of(budget(["helpdesk"], now=timezone.now()), "helpdesk", "transfer")
    assert (transfer.day.calls, transfer.day.asked, transfer.day.per_100) == (1, 0, 0)
