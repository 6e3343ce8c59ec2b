"""Hostile URLs and query strings: junk in an id is a 404, a date at the end of time is a filter.

Each test loops over its cases on one database (a transactional test's setup costs seconds).
"""

from __future__ import annotations

from django.test import Client

from approvals.models import AuditEntry
from tests.hostile.conftest import HX, assert_no_5xx
from tests.support.hostile_runtime import Call, Hostile

#: Query → whether a run created now is inside the range.
DATE_QUERIES = {
    "to=9999-12-31": True,
    "from=9999-12-31": False,
    "from=0001-01-01": True,
    "to=0001-01-01": False,
    "from=0001-01-01&to=9999-12-31": True,
    "to=9999-12-31T23:59:59-12:00": True,
    "from=0001-01-01T00:00:00%2B14:00": True,
    "to=9999-12-31T23:59:59.999999": True,
}


def test_dates_at_the_ends_of_time_filter_instead_of_failing(
    hostile: Hostile, reviewer_client: Client, admin_member_client: Client
) -> None:
    run = hostile.start(Call("pay", {"target": "bob"}))
    reviewer_client.post(
        f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/decline", {"agent": "hostile"}
    )
    waiting = hostile.start(Call("pay", {"target": "eve"}))

    for query, inside in DATE_QUERIES.items():
        inbox = reviewer_client.get(f"/agents/hostile/?{query}")
        partial = reviewer_client.get(f"/agents/hostile/?{query}", **HX)
        audit = admin_member_client.get(f"/audit/?{query}")
        export = admin_member_client.get(f"/audit/export.csv?{query}")

        assert (inbox.status_code, partial.status_code, audit.status_code, export.status_code) == (
            200,
        ) * 4, query
        assert (waiting.run_id in inbox.content.decode()) == inside, query
        assert (waiting.run_id in partial.content.decode()) == inside, query
        assert (run.run_id in audit.content.decode()) == inside, query
        assert (run.run_id in b"".join(export.streaming_content).decode()) == inside, query


def test_junk_in_a_page_url_is_not_found(hostile: Hostile, reviewer_client: Client) -> None:
    for path in ["/runs/%00/", "/runs/a%00b/", "/agents/%00/", "/agents/a%00/", "/runs/" + "r" * 300 + "/"]:
        assert reviewer_client.get(path).status_code == 404, path
        assert reviewer_client.get(path, **HX).status_code == 404, path


def test_a_decision_on_a_junk_call_id_is_not_found_and_changes_nothing(
    hostile: Hostile, reviewer_client: Client
) -> None:
    run = hostile.start(Call("pay", {"target": "bob"}))
    call_id = run.tool_calls[0].tool_call_id

    for action in ["approve", "decline", "resume"]:
        for junk in ["%00", "call%00x", "%2500", "x%2500y"]:
            url = f"/runs/{run.run_id}/calls/{junk}/{action}"
            response = reviewer_client.post(url, {"agent": "hostile", "reason": "no"}, **HX)
            assert response.status_code == 404, url
        on_junk_run = reviewer_client.post(f"/runs/%00/calls/{call_id}/{action}", {"agent": "hostile"})
        assert on_junk_run.status_code == 404, action

    assert hostile.ran == 0
    assert [r.run_id for r in hostile.suspended()] == [run.run_id]
    assert not AuditEntry.objects.exists()


def test_junk_in_query_strings_and_posted_fields_is_a_form_error(
    hostile: Hostile, reviewer_client: Client, admin_member_client: Client
) -> None:
    run = hostile.start(Call("pay", {"target": "bob"}))
    call_id = run.tool_calls[0].tool_call_id

    for url in [
        "/agents/hostile/?thread=%00",
        "/agents/hostile/?tool=a%00b&kind=approval",
        "/agents/hostile/?page=" + "9" * 5000,
        "/agents/hostile/?page=99999999999999999999&per_page=100",
        "/agents/hostile/?from=%ED%A0%80",
        f"/runs/{run.run_id}/?agent=%00",
    ]:
        assert_no_5xx(reviewer_client, url)
    for url in ["/audit/?user=%00", "/audit/?agent=%00&page=" + "9" * 30, "/audit/export.csv?agent=%00"]:
        assert_no_5xx(admin_member_client, url)
    declined = reviewer_client.post(
        f"/runs/{run.run_id}/calls/{call_id}/decline", {"agent": "hostile", "reason": "bad\x00reason"}
    )
    junk_agent = reviewer_client.post(f"/runs/{run.run_id}/calls/{call_id}/approve", {"agent": "a\x00"})
    junk_next = reviewer_client.post(
        f"/runs/{run.run_id}/calls/{call_id}/decline",
        {"agent": "hostile", "next": "/\x00/x", "reason": "\x00"},
    )

    assert declined.status_code == 400
    assert junk_agent.status_code == 404
    assert junk_next.status_code == 400
    assert hostile.ran == 0
    assert [r.run_id for r in hostile.suspended()] == [run.run_id]
