"""The queue-health page: its figures against a seeded history, its access, its charts and tables."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from agents_runtime.store import Deadline
from approvals.health import charts, rollup
from approvals.health.counting import hour_of
from approvals.health.figures import (
    PENDING_CACHE_KEY,
    GrantRow,
    HealthFigures,
    ReviewerRow,
    grants_used,
    health_figures,
    pending,
)
from approvals.models import AuditEntry, CallClaim, HealthCount, ParkedCallRecord, RunRecord
from tests.support.runtime_fixtures import XSS, DashboardAgents

NOW = timezone.now()
H = hour_of(NOW)
AGENTS = ["helpdesk", "boss", "worker"]


def at(hours_ago: int, minutes: int = 10) -> datetime:
    return H - timedelta(hours=hours_ago) + timedelta(minutes=minutes)


def decided(
    when: datetime,
    waited: float | None,
    action: str,
    outcome: str,
    username: str = "",
    *,
    channel: str = "dashboard",
    agent: str = "helpdesk",
    tool: str = "refund",
) -> None:
    AuditEntry.objects.create(
        created_at=when,
        parked_at=None if waited is None else when - timedelta(seconds=waited),
        username=username,
        agent_id=agent,
        run_id=f"r-{AuditEntry.objects.count()}",
        tool_call_id="c",
        tool_name=tool,
        action=action,
        outcome=outcome,
        channel=channel,
    )


def parked(agent: str, tool: str, suspended_at: datetime, *, status: str = "suspended", **run: Any) -> None:
    record = RunRecord.objects.create(
        run_id=f"p-{RunRecord.objects.count()}",
        agent_id=agent,
        created_at=suspended_at,
        suspended_at=suspended_at,
        status=status,
        snapshot={},
        **run,
    )
    ParkedCallRecord.objects.create(run=record, position=0, tool_call_id="c", tool_name=tool, kind="approval")


def seed() -> None:
    # The last 24 hours.
    decided(at(1), 4, "approve", "completed", "rita")
    decided(at(1), 60, "decline", "continuing", "rita", channel="api")
    decided(at(1), 100, "approve", "vote_recorded", "ada")  # a vote: not a final decision
    decided(at(1), 0, "approve", "continuing", "ada", channel="grant")  # a standing grant's
    decided(at(1), 20, "approve", "completed", "bob", agent="boss", tool="worker")
    decided(at(2), 100, "resume", "suspended_again", "ada")
    decided(at(2), 600, "expire", "expired", "", channel="deadline")  # parked at H-2 exactly
    decided(at(2), None, "approve", "lost_race", "ada")
    # The last 7 days, not the last 24 hours; then older.
    decided(at(30), 3000, "approve", "completed", "rita")
    decided(at(30), None, "escalate", "rescheduled", "rita")  # not a decision
    decided(at(200), 30, "approve", "completed", "rita")
    # Waiting: two of helpdesk, one of boss; not counted: an inner run (counted on its supervisor),
    # a decided call, a run being continued.
    parked("helpdesk", "refund", at(3, 5))
    parked("helpdesk", "transfer", at(50, 5))
    parked("boss", "worker", at(3, 30))
    parked("worker", "wipe_disk", at(3, 30), parent_run_id="p-2")
    parked("helpdesk", "refund", at(4), status="running")
    parked("helpdesk", "refund", at(4))
    ParkedCallRecord.objects.filter(run__run_id="p-5").update(action="approve", decided_at=NOW)


@pytest.fixture(autouse=True)
def recount_pending(settings: Any) -> None:
    """Pending calls counted afresh by every read (the page keeps them a few seconds)."""
    settings.HEALTH_PENDING_CACHE_SECONDS = 0


@pytest.mark.usefixtures("agents")
def test_pending_counts_are_kept_a_few_seconds(settings: Any) -> None:
    settings.HEALTH_PENDING_CACHE_SECONDS = 60
    cache.delete(PENDING_CACHE_KEY)
    parked("helpdesk", "refund", at(1))
    assert pending(AGENTS, now=NOW).total == 1
    parked("helpdesk", "refund", at(1))
    assert pending(AGENTS, now=NOW).total == 1  # kept
    cache.delete(PENDING_CACHE_KEY)
    assert pending(AGENTS, now=NOW).total == 2
    assert pending(["boss"], now=NOW).total == 0  # kept for every agent, filtered per viewer


def by_hour(figures: HealthFigures, hours_ago: int) -> tuple[int, int]:
    row = next(r for r in figures.week if r.hour == H - timedelta(hours=hours_ago))
    return row.parked, row.decided


def check(figures: HealthFigures) -> None:
    assert [(a.agent_id, a.count) for a in figures.pending.agents] == [("boss", 1), ("helpdesk", 2)]
    assert [(r.agent_id, r.tool_name, r.count) for r in figures.pending.rows] == [
        ("boss", "worker", 1),
        ("helpdesk", "refund", 1),
        ("helpdesk", "transfer", 1),
    ]
    helpdesk = next(a for a in figures.pending.agents if a.agent_id == "helpdesk")
    assert helpdesk.oldest == at(50, 5)
    assert helpdesk.oldest_age == (figures.now - at(50, 5)).total_seconds()

    assert len(figures.day) == 24 and len(figures.week) == 168
    assert figures.day[-1].hour == H and figures.week[0].hour == H - timedelta(hours=167)
    assert by_hour(figures, 1) == (4, 4)
    assert by_hour(figures, 2) == (2, 2)
    assert by_hour(figures, 3) == (2, 0)
    assert by_hour(figures, 30) == (0, 1)
    assert by_hour(figures, 31) == (1, 0)
    assert by_hour(figures, 50) == (1, 0)
    assert sum(r.parked for r in figures.week) == 10
    assert sum(r.decided for r in figures.week) == 7
    assert sum(r.decided for r in figures.day) == 6

    waits = {w.agent_id: w for w in figures.waits}
    # helpdesk, last 24 h: 0, 4, 60, 100, 600 s -> buckets 1, 5, 60, 120, 600: p50 60 s, p90 600 s.
    assert (waits["helpdesk"].day_count, waits["helpdesk"].day_p50, waits["helpdesk"].day_p90) == (5, 60, 600)
    # ... and 3000 s 30 hours ago (bucket 3600): p90 of six is the sixth.
    assert (waits["helpdesk"].week_count, waits["helpdesk"].week_p50, waits["helpdesk"].week_p90) == (
        6,
        60,
        3600,
    )
    assert (waits["boss"].day_count, waits["boss"].day_p50, waits["boss"].day_p90) == (1, 20, 20)

    assert figures.reviewers == [
        ReviewerRow("rita", 2, 3),
        ReviewerRow("ada", 2, 2),
        ReviewerRow("bob", 1, 1),
    ]
    assert figures.grants == [GrantRow("helpdesk", "refund", "grant of ada", 1, 1)]
    assert figures.behind == 0


@pytest.fixture
def history(agents: DashboardAgents) -> None:
    seed()


@pytest.mark.usefixtures("history")
def test_figures_from_the_audit_log_not_folded_yet() -> None:
    assert rollup.watermark() == 0
    check(health_figures(AGENTS, now=NOW))


@pytest.mark.usefixtures("history")
def test_figures_the_same_once_folded_in_part_or_whole_and_folded_once() -> None:
    assert rollup.fold(limit=4) == 4  # part: the rest is read past the watermark
    check(health_figures(AGENTS, now=NOW))
    rollup.fold_all()
    assert rollup.watermark() == AuditEntry.objects.order_by("-id").values_list("id", flat=True).first()
    rows = HealthCount.objects.count()
    rollup.fold_all()  # nothing new: nothing added twice
    assert HealthCount.objects.count() == rows
    check(health_figures(AGENTS, now=NOW))


@pytest.mark.usefixtures("history")
def test_a_fold_leaves_rows_younger_than_its_lag_to_the_next_one() -> None:
    decided(timezone.now(), 5, "approve", "completed", "rita")
    rollup.fold_all()
    newest = AuditEntry.objects.order_by("-id").values_list("id", flat=True)[0]
    assert rollup.watermark() == newest - 1
    # The figures still count it (read past the watermark).
    figures = health_figures(AGENTS)
    assert next(r for r in figures.reviewers if r.username == "rita").day == 3


@pytest.mark.usefixtures("history")
def test_only_the_agents_the_viewer_sees() -> None:
    figures = health_figures(["boss"], now=NOW)
    assert [a.agent_id for a in figures.pending.agents] == ["boss"]
    assert [w.agent_id for w in figures.waits] == ["boss"]
    assert figures.reviewers == [ReviewerRow("bob", 1, 1)]
    assert figures.grants == []


@pytest.mark.usefixtures("agents")
def test_grants_used_is_empty_without_grant_decisions() -> None:
    decided(at(1), 4, "approve", "completed", "rita")
    assert grants_used(AGENTS, since=H - timedelta(days=7)) == []


def test_a_real_decision_records_when_its_call_parked(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call = run.tool_calls[0]
    response = reviewer_client.post(
        f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve", {"agent": "helpdesk"}
    )
    assert response.status_code == 302
    entry = AuditEntry.objects.get()
    assert entry.parked_at is not None and entry.parked_at <= entry.created_at
    figures = health_figures(AGENTS)
    assert [(w.agent_id, w.day_count) for w in figures.waits] == [("helpdesk", 1)]
    assert figures.reviewers == [ReviewerRow("rita", 1, 1)]


# -- the page ---------------------------------------------------------------------------------------


class _Markup(HTMLParser):
    """Every start tag with its attributes, and the <style> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def markup(html: str) -> _Markup:
    parser = _Markup()
    parser.feed(html)
    return parser


def test_the_page_needs_the_audit_permission(
    agents: DashboardAgents, reviewer_client: Client, client_for: Any, nobody: User
) -> None:
    assert Client().get("/health/").status_code == 302
    assert client_for(nobody).get("/health/").status_code == 403
    assert reviewer_client.get("/health/").status_code == 403
    assert b"Queue health" not in reviewer_client.get("/").content


@pytest.mark.usefixtures("history")
def test_the_page_shows_charts_with_their_tables_and_no_inline_style(admin_member_client: Client) -> None:
    parked("helpdesk", XSS, at(1))
    response = admin_member_client.get("/health/")
    assert response.status_code == 200
    html = response.content.decode()
    found = markup(html)
    svgs = [attrs for tag, attrs in found.tags if tag == "svg"]
    assert len(svgs) == 4 and all(a["role"] == "img" and a["aria-labelledby"] for a in svgs)
    assert not [tag for tag, attrs in found.tags if "style" in attrs or tag == "style"]
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    csp = response["Content-Security-Policy"]
    assert "'unsafe-inline'" not in csp
    # Each chart's table, in a <details> beside it.
    for chart in ("chart-day", "chart-week"):
        assert f'<details id="{chart}-details">' in html
        assert html.count(f'id="{chart}-table"') == 1
    assert '<details id="health-pending-details">' in html
    # The week's table: one row per hour, the numbers of the seeded history.
    week = html.split('id="chart-week-table"')[1].split("</table>")[0]
    assert week.count("<tr data-hour=") == 168
    hour = (H - timedelta(hours=1)).isoformat()
    row = week.split(f'data-hour="{hour}"')[1].split("</tr>")[0]
    assert '<td class="num">5</td><td class="num">4</td>' in row  # (the XSS call parked then too)
    assert 'href="/health/"' in html  # the nav link, for those who may see it
    assert "live-health.js" in html


@pytest.mark.usefixtures("history")
def test_the_live_partial_alone(admin_member_client: Client) -> None:
    response = admin_member_client.get("/health/", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="health-figures"')
    assert 'hx-trigger="cs:health-refresh"' in html and "<html" not in html


# -- charts (pure) ------------------------------------------------------------------------------------


def test_a_line_chart_draws_one_point_per_label_from_classes_only() -> None:
    svg = charts.line_chart(
        "c", "Title <b>", ["a", "b", "c"], [charts.Line("parked", "parked", [0, 5, 10])], every=2
    )
    found = markup(svg)
    polyline = next(attrs for tag, attrs in found.tags if tag == "polyline")
    assert len((polyline["points"] or "").split()) == 3
    assert polyline["class"] == "chart-line chart-line-parked"
    assert "Title &lt;b&gt;" in svg and "<b>" not in svg
    assert not [attrs for _, attrs in found.tags if "style" in attrs]
    # The top of the axis is 10; the point of 10 is at the top of the plot.
    assert (polyline["points"] or "").split()[-1].endswith(f",{charts.PAD[2]}.0")


def test_a_bar_chart_has_a_bar_per_row_and_refuses_style() -> None:
    svg = charts.bar_chart("b", "Pending", [("helpdesk · refund", 3), ("boss · worker", 1)])
    assert svg.count('class="chart-bar"') == 2
    with pytest.raises(ValueError, match="style"):
        charts.element("rect", {"style": "fill: red"})


@pytest.mark.parametrize(("value", "top"), [(0, 1), (1, 1), (3, 5), (7, 10), (11, 20), (99, 100), (101, 200)])
def test_nice_ceiling(value: float, top: int) -> None:
    assert charts.nice_ceiling(value) == top


def test_quantile_reads_the_bucket_bound() -> None:
    from approvals.health.figures import quantile

    assert quantile({}, 0.5) is None
    assert quantile({5: 1, 60: 1, 120: 1, 600: 1, 1: 1}, 0.5) == 60
    assert quantile({5: 1, math.inf: 1}, 0.9) == math.inf


def test_a_grant_decision_is_named_as_the_audit_log_names_it() -> None:
    from approvals.health.counting import AuditRow, grant_of

    row = AuditRow(1, NOW, NOW, "helpdesk", "refund", "approve", "continuing", "rita", "grant", 3, None)
    assert grant_of(row) == "grant #3 of rita"
    assert grant_of(row._replace(channel="dashboard", grant_id=None)) is None


def test_the_page_counts_escalated_expired_and_claimed_calls_per_agent_by_name(
    agents: DashboardAgents, admin_member_client: Client, settings: Any
) -> None:
    settings.HEALTH_PENDING_CACHE_SECONDS = 0
    helpdesk = agents.agent("helpdesk")
    escalate = Deadline(timedelta(minutes=5), "escalate", escalate_to="leads")
    async_to_sync(helpdesk.generate)("refund escalate me", deadline=escalate)
    claimed = async_to_sync(helpdesk.generate)("refund claimed")
    assert async_to_sync(agents.runtime.expire_due)(timezone.now() + timedelta(minutes=6)) == 1
    decided(at(2), 300, "expire", "declined", agent="helpdesk")
    decided(at(30), 300, "expire", "declined", agent="helpdesk")  # yesterday: the week's only
    decided(at(200), 300, "expire", "declined", agent="helpdesk")  # older than a week
    alice = User.objects.create_user("alice", first_name="Alice", last_name="Moreau")
    CallClaim.objects.create(
        agent_id="helpdesk",
        run_id=claimed.run_id,
        tool_call_id=claimed.tool_calls[0].tool_call_id,
        user=alice,
        username="alice",
        claimed_at=timezone.now(),
        expires_at=timezone.now() + timedelta(minutes=5),
    )

    html = admin_member_client.get("/health/").content.decode()

    table = html[
        html.index('id="health-attention"') : html.index("</table>", html.index('id="health-attention"'))
    ]
    row = table[table.index('data-agent="helpdesk"') :].split("</tr>")[0]
    assert '<th scope="row">Help desk</th>' in row
    assert 'data-escalated="1">1 <span class="muted">to leads</span>' in row
    assert 'data-escalated-week="1"' in row  # the audit row of that escalation
    assert 'data-expired-day="1"' in row and 'data-expired-week="2"' in row
    assert 'data-claimed="1">1 <span class="muted">by Alice Moreau (alice)</span>' in row
    assert 'data-agent="boss"' not in table  # nothing to say about it
    # Agents by name in the other tables too.
    pending_row = html[html.index('id="health-pending-agents"') :].split("</tr>")[1]
    assert ">Help desk</a>" in pending_row
