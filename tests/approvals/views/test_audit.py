"""The audit log: append-only records, the admin's read-only view, the audit page and its CSV export."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from approvals import store as decision_records
from approvals.models import AppendOnlyError, AuditEntry, Batch, GrantRecord
from approvals.views.audit import AUDIT_CSV_COLUMNS
from tests.support.runtime_fixtures import DashboardAgents


def next_link(html: str) -> str:
    """The href of a page's "Next" link."""
    found = re.search(r'<a href="([^"]+)"[^>]*rel="next"', html)
    assert found, "no Next link"
    return found.group(1).replace("&amp;", "&")


def entry(**fields: object) -> AuditEntry:
    values: dict[str, object] = {
        "username": "rita",
        "agent_id": "helpdesk",
        "run_id": "run-1",
        "tool_call_id": "call-1",
        "tool_name": "refund",
        "action": "approve",
        "outcome": "completed",
        **fields,
    }
    return AuditEntry.objects.create(**values)


@pytest.mark.django_db
def test_audit_entries_cannot_be_changed_or_deleted() -> None:
    record = entry()

    record.outcome = "failed"
    with pytest.raises(AppendOnlyError):
        record.save()
    with pytest.raises(AppendOnlyError):
        record.delete()
    with pytest.raises(AppendOnlyError):
        AuditEntry.objects.all().delete()

    assert AuditEntry.objects.get().outcome == "completed"


@pytest.mark.django_db
def test_audit_entry_keeps_the_username_when_the_account_is_deleted() -> None:
    user = User.objects.create_user("gone")
    record = entry(user=user, username="gone")

    user.delete()

    record = AuditEntry.objects.get(pk=record.pk)
    assert (record.user, record.username) == (None, "gone")


@pytest.mark.django_db
def test_admin_shows_the_audit_log_read_only(admin_client: Client) -> None:
    record = entry()

    listing = admin_client.get("/admin/approvals/auditentry/")
    detail = admin_client.get(f"/admin/approvals/auditentry/{record.pk}/change/")

    assert listing.status_code == 200 and "rita" in listing.content.decode()
    assert admin_client.get("/admin/approvals/auditentry/add/").status_code == 403
    assert detail.status_code == 200 and 'name="_save"' not in detail.content.decode()
    assert (
        admin_client.post(f"/admin/approvals/auditentry/{record.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert AuditEntry.objects.count() == 1


def test_audit_page_lists_decisions_with_filters_and_pages(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    for i in range(55):
        entry(
            run_id=f"run-{i}", username="rita" if i % 2 else "ada", outcome="completed" if i % 5 else "failed"
        )
    entry(run_id="old", created_at=timezone.now() - timedelta(days=10), action="decline", reason="too late")

    first = admin_member_client.get("/audit/").content.decode()
    second = admin_member_client.get(next_link(first)).content.decode()
    declines = admin_member_client.get("/audit/?action=decline").content.decode()
    failed_by_ada = admin_member_client.get("/audit/?outcome=failed&user=ada", HTTP_HX_REQUEST="true")
    recent = admin_member_client.get(f"/audit/?from={(timezone.localdate() - timedelta(days=1)).isoformat()}")
    bad = admin_member_client.get("/audit/?from=soon")

    assert "<strong>56</strong> records" in first and first.count('<li class="audit-row') == 50
    assert second.count('<li class="audit-row') == 6 and "too late" in second and 'rel="next"' not in second
    assert "Newest records" in second and "Newest records" not in first
    assert "<strong>1</strong> record" in declines and "too late" in declines
    html = failed_by_ada.content.decode()
    assert html.lstrip().startswith('<section id="audit-table"')
    assert "<strong>6</strong> records" in html  # i in 0, 10, 20, 30, 40, 50
    assert "<strong>55</strong> records" in recent.content.decode()
    assert bad.status_code == 400 and "These filters cannot be used" in bad.content.decode()


def test_audit_csv_export_follows_the_filters_and_defuses_formulas(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    entry(args={"note": '=HYPERLINK("http://evil")'}, reason="")
    entry(action="decline", reason="=1+1", run_id="run-2")

    response = admin_member_client.get("/audit/export.csv?action=decline")

    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))  # type: ignore[attr-defined]
    assert len(rows) == 1
    assert rows[0]["run_id"] == "run-2" and rows[0]["reason"] == "'=1+1"
    everything = admin_member_client.get("/audit/export.csv")
    all_rows = list(csv.DictReader(io.StringIO(b"".join(everything.streaming_content).decode())))  # type: ignore[attr-defined]
    assert len(all_rows) == 2
    assert [r["run_id"] for r in all_rows] == ["run-2", "run-1"]  # the page's order: newest first
    assert all_rows[1]["args"] == '{"note": "=HYPERLINK(\\"http://evil\\")"}'  # JSON starts with {: kept


def test_audit_csv_columns_and_cells_are_exactly_as_exported_before(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    when = timezone.now()
    entry(
        created_at=when,
        thread_id="t-1",
        resource_id="",
        args={"amount": 5},
        edited_args={"amount": 4},
        reason="ok",
        outcome_detail="Completed: done",
    )

    body = b"".join(admin_member_client.get("/audit/export.csv").streaming_content).decode()  # type: ignore[attr-defined]

    header, row, end = body.split("\r\n")
    assert header == (
        "created_at,username,agent_id,run_id,thread_id,resource_id,tool_call_id,tool_name,args,"
        "suspend_payload,action,reason,resume_data,edited_args,outcome,outcome_detail,channel,batch,grant"
    )
    assert row == (
        f'{when.isoformat()},rita,helpdesk,run-1,t-1,,call-1,refund,"{{""amount"": 5}}",'
        ',approve,ok,,"{""amount"": 4}",completed,Completed: done,dashboard,,'
    )
    assert end == ""


def test_the_store_writes_every_field_the_log_exports() -> None:
    # Besides the exported fields (a bulk decision's batch and a standing grant's, by id): the link
    # to the user.
    exported = {{"batch": "batch_id", "grant": "grant_id"}.get(c, c) for c in AUDIT_CSV_COLUMNS}
    assert set(decision_records.COLUMNS) >= {"user_id", *exported}


def test_decisions_taken_in_the_dashboard_land_in_the_audit_log(
    agents: DashboardAgents, reviewer_client: Client, admin_member_client: Client
) -> None:
    run = agents.start("helpdesk", "refund <b>bold</b>", thread="t-1")
    reviewer_client.post(
        f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/decline",
        {"agent": "helpdesk", "reason": "no"},
    )

    html = admin_member_client.get("/audit/").content.decode()

    assert "rita" in html and "Decline" in html and f'href="/runs/{run.run_id}/"' in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold</b>" not in html


@pytest.mark.parametrize("path", ["/audit/", "/audit/export.csv"])
def test_an_admin_designated_for_one_agent_audits_only_that_agent(
    agents: DashboardAgents, admin_member: User, client_for: Any, path: str
) -> None:
    from django.contrib.auth.models import Group

    admin_member.groups.add(Group.objects.get_or_create(name="agent:helpdesk")[0])
    entry(agent_id="helpdesk", run_id="run-help", username="helper")
    entry(agent_id="boss", run_id="run-boss", username="bossy")

    response = client_for(admin_member).get(path)
    body = b"".join(response.streaming_content) if response.streaming else response.content

    assert response.status_code == 200
    assert b"run-help" in body
    assert b"run-boss" not in body and b"bossy" not in body


def _csv(response: Any) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_audit_filters_are_choices_from_the_registry_and_the_log(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    entry(username="rita", tool_name="refund")
    entry(username="sam", tool_name="legacy_tool", run_id="run-2")

    html = admin_member_client.get("/audit/").content.decode()

    assert '<select name="agent"' in html and '<option value="helpdesk">Help desk (helpdesk)</option>' in html
    assert '<option value="boss">Boss (boss)</option>' in html  # registered, nothing logged yet
    assert '<select name="user"' in html and '<option value="sam">sam</option>' in html
    # Tools: every registered one (a sub-agent's too) and those the log still names.
    for tool in ("refund", "schedule_maintenance", "wipe_disk", "legacy_tool"):
        assert f'<option value="{tool}">{tool}</option>' in html
    assert 'type="date" name="from"' in html and 'type="date" name="to"' in html
    assert admin_member_client.get("/audit/?user=mallory").status_code == 400  # not a free-text id


def test_audit_filters_by_tool_user_and_run_thread_or_resource_search_and_the_csv_follows(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    entry(run_id="run-aaa111", thread_id="t-north", tool_name="refund")
    entry(run_id="run-bbb222", resource_id="cust-42", tool_name="transfer", username="sam")
    entry(run_id="run-ccc333", thread_id="t-south", tool_name="refund", username="sam")

    def runs(query: str) -> list[str]:
        rows = _csv(admin_member_client.get(f"/audit/export.csv?{query}"))
        html = admin_member_client.get(f"/audit/?{query}").content.decode()
        shown = sorted(r for r in ("run-aaa111", "run-bbb222", "run-ccc333") if f"<code>{r}</code>" in html)
        assert shown == sorted(row["run_id"] for row in rows), query  # the CSV follows the filters
        return shown

    assert runs("tool=refund") == ["run-aaa111", "run-ccc333"]
    assert runs("user=sam") == ["run-bbb222", "run-ccc333"]
    assert runs("q=bbb") == ["run-bbb222"]
    assert runs("q=north") == ["run-aaa111"]
    assert runs("q=cust-4") == ["run-bbb222"]
    assert runs("tool=refund&user=sam") == ["run-ccc333"]


def test_audit_date_presets_are_links_in_the_viewers_time_zone(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    entry(run_id="run-today")
    entry(run_id="run-lastweek", created_at=timezone.now() - timedelta(days=5))
    entry(run_id="run-lastmonth", created_at=timezone.now() - timedelta(days=20))
    today = timezone.localdate()

    html = admin_member_client.get("/audit/").content.decode()
    presets = {
        label: (today - timedelta(days=back)).isoformat()
        for label, back in (("Today", 0), ("Last 7 days", 6), ("Last 30 days", 29))
    }
    for label, start in presets.items():
        assert f'href="/audit/?from={start}&amp;to={today.isoformat()}"' in html, label
    week = admin_member_client.get(f"/audit/?from={presets['Last 7 days']}&to={today.isoformat()}")
    body = week.content.decode()
    assert 'aria-current="true">Last 7 days</a>' in body
    assert "run-today" in body and "run-lastweek" in body and "run-lastmonth" not in body


def test_invalid_attempts_are_hidden_by_default_and_shown_on_request(
    agents: DashboardAgents, reviewer_client: Client, admin_member_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call_id = run.tool_calls[0].tool_call_id
    reviewer_client.post(
        f"/runs/{run.run_id}/calls/{call_id}/approve", {"agent": "helpdesk", "edited_args": "{not json"}
    )
    reviewer_client.post(f"/runs/{run.run_id}/calls/{call_id}/approve", {"agent": "helpdesk"})

    default = admin_member_client.get("/audit/").content.decode()
    included = admin_member_client.get("/audit/?invalid=on").content.decode()

    assert "<strong>1</strong> record" in default and "badge outcome-invalid" not in default
    assert "invalid attempts hidden" in default
    assert "<strong>2</strong> records" in included and "badge outcome-invalid" in included
    assert "This is not valid JSON" in included
    assert len(_csv(admin_member_client.get("/audit/export.csv"))) == 1
    invalid_rows = _csv(admin_member_client.get("/audit/export.csv?invalid=on"))
    assert [(r["username"], r["outcome"]) for r in invalid_rows] == [  # newest first, as on the page
        ("rita", "completed"),
        ("rita", "invalid"),
    ]
    assert "badge outcome-invalid" in admin_member_client.get("/audit/?outcome=invalid").content.decode()


def test_the_csv_says_which_batch_and_which_grant_decided_in_the_pages_order(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    batch = Batch.objects.create(username="rita", agent_id="helpdesk", action="approve")
    grant = GrantRecord.objects.create(
        agent_id="helpdesk", tool_name="refund", scope="everyone", created_by_name="rita"
    )
    now = timezone.now()
    entry(created_at=now - timedelta(minutes=3), run_id="by-hand")
    entry(created_at=now - timedelta(minutes=2), run_id="in-bulk", batch=batch, channel="bulk")
    entry(created_at=now - timedelta(minutes=1), run_id="granted", grant=grant, channel="grant", username="")

    page = admin_member_client.get("/audit/").content.decode()
    rows = _csv(admin_member_client.get("/audit/export.csv"))

    on_page = sorted(("by-hand", "in-bulk", "granted"), key=page.index)
    assert [r["run_id"] for r in rows] == on_page == ["granted", "in-bulk", "by-hand"]
    assert [(r["batch"], r["grant"]) for r in rows] == [("", str(grant.pk)), (str(batch.pk), ""), ("", "")]


def _rows(html: str) -> list[str]:
    """Each row's summary line of an audit page, its tags dropped."""
    summaries = re.findall(r'<li class="audit-row[^"]*">\s*<details>\s*<summary>(.*?)</summary>', html, re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", s).split()) for s in summaries]


def test_audit_rows_read_as_the_card_with_the_agents_name_and_the_batch_and_grant_that_decided(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    batch = Batch.objects.create(username="rita", agent_id="helpdesk", action="approve")
    grant = GrantRecord.objects.create(
        agent_id="helpdesk", tool_name="refund", scope="everyone", created_by_name="rita"
    )
    refund = {"order_id": "A-1044", "amount_cents": 89000, "note": "late"}
    now = timezone.now()
    entry(created_at=now - timedelta(minutes=4), run_id="by-hand", args=refund)
    entry(created_at=now - timedelta(minutes=3), run_id="in-bulk", args=refund, batch=batch)
    entry(created_at=now - timedelta(minutes=2), run_id="granted", args=refund, grant=grant, channel="grant")
    entry(
        created_at=now - timedelta(minutes=1), run_id="edited", args=refund,
        edited_args={**refund, "amount_cents": 40000},
    )  # fmt: skip

    html = admin_member_client.get("/audit/").content.decode()
    edited, granted, in_bulk, by_hand = _rows(html)

    # The card's own title of these arguments (the tool's presentation), not the tool's bare name.
    card_title = agents.agent("helpdesk").find_tool("refund").title_for(refund)  # type: ignore[union-attr]
    assert card_title.startswith("Refund · A-1044")
    for row in (edited, granted, in_bulk, by_hand):
        assert card_title in row and "Help desk" in row and "helpdesk" not in row
    assert f"→ {card_title.replace('89000', '40000')}" in edited
    assert f"in bulk decision #{batch.pk}" in in_bulk and "grant" not in in_bulk
    assert f"by grant #{grant.pk}" in granted
    assert f'href="/batches/{batch.pk}/"' in html
    assert f'href="/grants/?show=all#grant-{grant.pk}"' in html
    assert "bulk decision" not in by_hand and "grant #" not in by_hand


def test_audit_rows_of_a_tool_no_longer_served_and_of_a_question_read_as_their_cards_did(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    now = timezone.now()
    entry(created_at=now - timedelta(minutes=2), tool_name="old_tool", args={"x": 1})
    entry(created_at=now - timedelta(minutes=1), tool_name="schedule_maintenance", args=None,
          suspend_payload={"system": "db", "question": "When may we take db down?"})  # fmt: skip

    question, retired = _rows(admin_member_client.get("/audit/").content.decode())

    assert "old_tool" in retired and "Help desk" in retired
    assert "When may we take db down?" in question and "Help desk" in question


def test_audit_searches_inside_the_arguments_and_keeps_the_search_in_the_links(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    for i in range(60):
        entry(run_id=f"run-{i}", args={"order_id": f"A-{1000 + i}", "amount_cents": 100 * i, "note": "ok"})
    entry(run_id="zurich", args={"order_id": "B-1", "city": "Zürich", "note": 'say "hi"'})
    entry(run_id="input", args=None, suspend_payload={"system": "billing-db"})
    entry(run_id="edit", args={"order_id": "C-1"}, edited_args={"order_id": "C-1", "note": "typo fixed"})

    one = admin_member_client.get("/audit/?args=a-1044").content.decode()
    many = admin_member_client.get("/audit/?args=A-10").content.decode()
    accented = admin_member_client.get("/audit/?args=Zürich").content.decode()
    quoted = admin_member_client.get('/audit/?args=say "hi"').content.decode()
    payload = admin_member_client.get("/audit/?args=billing").content.decode()
    edited = admin_member_client.get("/audit/?args=typo fixed").content.decode()
    nothing = admin_member_client.get("/audit/?args=100%").content.decode()
    later = admin_member_client.get(next_link(many)).content.decode()

    assert _rows(one) and all("A-1044" in r for r in _rows(one)) and len(_rows(one)) == 1
    assert "<strong>60</strong> records" in many and 'name="args" value="A-10"' in many
    assert "args=A-10" in next_link(many) and len(_rows(later)) == 10
    assert "zurich" in accented and "<strong>1</strong> record" in accented
    assert "zurich" in quoted and "<strong>1</strong> record" in quoted
    assert "input" in payload and "<strong>1</strong> record" in payload
    assert "/runs/edit/" in edited and "<strong>1</strong> record" in edited
    assert "<strong>0</strong> records" in nothing  # % is a character here, not a wildcard


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("ab", "at least 3 characters"),
        ("x" * 5000, "at most 200 characters"),
        ("abc%00def", "Null characters are not allowed"),
    ],
)
def test_an_argument_search_that_cannot_be_used_says_why(
    agents: DashboardAgents, admin_member_client: Client, query: str, message: str
) -> None:
    entry(args={"order_id": "abc"})

    page = admin_member_client.get(f"/audit/?args={query}")
    partial = admin_member_client.get(f"/audit/?args={query}", HTTP_HX_REQUEST="true")

    assert page.status_code == 400 and message in page.content.decode()
    assert partial.status_code == 200 and message in partial.content.decode()


def test_a_damaged_page_link_says_so(agents: DashboardAgents, admin_member_client: Client) -> None:
    entry()

    # Beside the unreadable: a time past what a datetime holds once in UTC, a row id past bigint.
    out_of_range = [
        audit_token_of("0001-01-01T00:00:00+14:00", 5),
        audit_token_of("9999-12-31T23:59:59-14:00", 5),
        audit_token_of("2026-11-30T10:00:00+00:00", 10**30),
    ]
    for after in ("nonsense", "WyJ4IiwgMV0", "WyIyMDI2LTExLTMwVDEwOjAwOjAwIiwgMV0", *out_of_range):
        response = admin_member_client.get(f"/audit/?after={after}")
        assert response.status_code == 400 and "This page link is damaged" in response.content.decode()


def audit_token_of(created_at: str, row_id: int) -> str:
    """A page link's position as the "Next" link writes it (``forms.filters.audit_token``), of any
    values."""
    return base64.urlsafe_b64encode(json.dumps([created_at, row_id]).encode()).decode().rstrip("=")


def test_the_argument_search_finds_nothing_of_agents_the_user_may_not_see(
    agents: DashboardAgents, admin_member: User, client_for: Any
) -> None:
    from django.contrib.auth.models import Group

    admin_member.groups.add(Group.objects.get_or_create(name="agent:helpdesk")[0])
    entry(agent_id="helpdesk", run_id="run-help", args={"order_id": "SECRET-1"})
    entry(agent_id="boss", run_id="run-boss", args={"order_id": "SECRET-2"})

    html = client_for(admin_member).get("/audit/?args=secret").content.decode()
    exported = _csv(client_for(admin_member).get("/audit/export.csv?args=secret"))

    assert "run-help" in html and "run-boss" not in html and "SECRET-2" not in html
    assert "<strong>1</strong> record" in html
    assert [r["run_id"] for r in exported] == ["run-help"]


def test_later_pages_start_below_the_last_row_even_at_the_same_instant(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    when = timezone.now()
    for i in range(120):
        entry(created_at=when, run_id=f"same-{i:03d}")

    seen: list[str] = []
    html = admin_member_client.get("/audit/").content.decode()
    while True:
        seen += re.findall(r'href="/runs/(same-\d+)/"><code>', html)
        if 'rel="next"' not in html:
            break
        html = admin_member_client.get(next_link(html)).content.decode()

    assert sorted(seen) == [f"same-{i:03d}" for i in range(120)] and len(set(seen)) == 120


def approvals_in_a_row(count: int, args: Callable[[int], dict[str, Any]] | None = None) -> None:
    """``count`` approvals of refunds, a second apart, newest first (``args(i)``: the i-th's arguments)."""
    now = timezone.now()
    AuditEntry.objects.bulk_create(
        AuditEntry(
            created_at=now - timedelta(seconds=i), username="rita", agent_id="helpdesk", run_id=f"run-{i}",
            tool_call_id="call", tool_name="refund", action="approve", outcome="completed",
            args=args(i) if args else None,
        )
        for i in range(count)
    )  # fmt: skip


def test_the_count_stops_at_its_limit_and_says_there_are_more(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    from approvals.queries import AUDIT_COUNT_LIMIT

    approvals_in_a_row(AUDIT_COUNT_LIMIT + 1)

    html = admin_member_client.get("/audit/").content.decode()

    assert f"<strong>{AUDIT_COUNT_LIMIT}+</strong> records" in html and 'rel="next"' in html


def test_a_search_counts_to_a_lower_limit_and_says_there_are_more(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    # Each match a search counts costs the rows between it and the next: past a few pages, "250+".
    from approvals.queries import AUDIT_SEARCH_COUNT_LIMIT

    approvals_in_a_row(2 * AUDIT_SEARCH_COUNT_LIMIT + 4, lambda i: {"note": "expedite" if i % 2 else "none"})

    searched = admin_member_client.get("/audit/", {"args": "expedite"}).content.decode()
    by_run = admin_member_client.get("/audit/", {"q": "run-"}).content.decode()
    everything = admin_member_client.get("/audit/").content.decode()

    assert f"<strong>{AUDIT_SEARCH_COUNT_LIMIT}+</strong> records" in searched and 'rel="next"' in searched
    assert f"<strong>{AUDIT_SEARCH_COUNT_LIMIT}+</strong> records" in by_run
    assert f"<strong>{2 * AUDIT_SEARCH_COUNT_LIMIT + 4}</strong> records" in everything
