"""The dashboard's pages: overview, inbox (filters, sort, pages), run page; full pages and htmx partials."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agents_runtime.store import Decision, DecisionAction
from tests.support.inbox_rows import inbox
from tests.support.markup import card_ids
from tests.support.queries import count_queries, loops_entered
from tests.support.runtime_fixtures import XSS, DashboardAgents

HX = {"HTTP_HX_REQUEST": "true"}


def test_overview_lists_every_agent_with_pending_count_and_oldest_wait(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    agents.start("helpdesk", "refund one")
    agents.start("helpdesk", "schedule")

    response = reviewer_client.get("/agents/")

    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" in html
    for agent_id in ("helpdesk", "boss", "worker"):  # agents with nothing pending are listed too
        assert f'href="/agents/{agent_id}/"' in html
    row = html[html.index('id="agent-helpdesk"') :]
    assert 'data-pending="2"' in row[: row.index("</tr>")]
    boss_row = html[html.index('id="agent-boss"') :]
    assert 'data-pending="0"' in boss_row[: boss_row.index("</tr>")]
    assert "<time datetime=" in row[: row.index("</tr>")]


def test_overview_htmx_request_gets_the_table_partial(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    response = reviewer_client.get("/agents/", **HX)

    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="agent-table"')
    assert "<html" not in html
    assert "HX-Request" in response["Vary"]


def test_inbox_full_page_and_htmx_partial(agents: DashboardAgents, reviewer_client: Client) -> None:
    run = agents.start("helpdesk", "refund one")

    page = reviewer_client.get("/agents/helpdesk/")
    partial = reviewer_client.get("/agents/helpdesk/", **HX)

    assert page.status_code == partial.status_code == 200
    assert "<html" in page.content.decode()
    assert 'id="run-list"' in page.content.decode()
    assert partial.content.decode().lstrip().startswith('<section id="run-list"')
    assert "<html" not in partial.content.decode()
    assert card_ids(page.content.decode()) == card_ids(partial.content.decode()) == [run.run_id]


def test_inbox_card_shows_run_and_call_details(agents: DashboardAgents, reviewer_client: Client) -> None:
    run = agents.start("helpdesk", "refund broken parcel", thread="t-1", resource="dana")

    html = inbox(reviewer_client, "/agents/helpdesk/")

    assert f'id="run-{run.run_id}"' in html
    assert "<code>t-1</code>" in html and "<code>dana</code>" in html
    assert "Help desk" in html
    assert "<code>refund</code>" in html
    assert "&quot;note&quot;: &quot;broken parcel&quot;" in html  # pretty JSON, escaped
    assert ">Approve</button>" in html and ">Decline</button>" in html
    assert ">Decline…</summary>" in html  # declining is its own step
    assert ">Reason for declining (sent to the agent)</label>" in html


def test_a_folded_rows_body_comes_when_it_opens_and_says_nothing_to_those_who_may_not_see_it(
    agents: DashboardAgents, reviewer_client: Client, nobody: User, client_for: Any
) -> None:
    run = agents.start("helpdesk", "refund broken parcel")
    call = run.tool_calls[0]
    body_url = f"/runs/{run.run_id}/calls/{call.tool_call_id}/"

    folded = reviewer_client.get("/agents/helpdesk/?thread=&per_page=20").content.decode()
    body = reviewer_client.get(body_url, {"next": "/agents/helpdesk/?per_page=20"}, **HX).content.decode()
    elsewhere = reviewer_client.get(body_url, {"next": "https://evil.example/"}, **HX).content.decode()
    no_js = reviewer_client.get(body_url)
    outsider = client_for(nobody).get(body_url, **HX).content.decode()
    unknown = reviewer_client.get(f"/runs/{run.run_id}/calls/call_nope/", **HX).content.decode()

    # The inbox row carries its summary only; the body has what it folded away, forms included.
    assert "&quot;note&quot;" not in folded and ">Approve</button>" not in folded
    assert "&quot;note&quot;: &quot;broken parcel&quot;" in body and ">Approve</button>" in body
    assert 'name="next" value="/agents/helpdesk/?per_page=20"' in body  # back to the inbox, filtered
    assert f'name="next" value="/runs/{run.run_id}/"' in elsewhere  # never another site
    assert f'hx-target="#run-{run.run_id}"' in body  # a decision swaps the whole card, as before
    assert no_js.status_code == 302 and no_js["Location"] == f"/runs/{run.run_id}/"
    # Someone who may not see the agent learns nothing, not even that the run exists.
    assert "broken parcel" not in outsider and "waits no more" in outsider
    assert "waits no more" in unknown


def test_inbox_filters_by_thread_resource_tool_and_kind(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    refund = agents.start("helpdesk", "refund a", thread="t-1", resource="r-1")
    schedule = agents.start("helpdesk", "schedule", thread="t-2", resource="r-1")
    transfer = agents.start("helpdesk", "transfer 500", thread="t-2", resource="r-2")

    def listed(query: str) -> list[str]:
        response = reviewer_client.get(f"/agents/helpdesk/?{query}", **HX)
        assert response.status_code == 200
        return card_ids(response.content.decode())

    assert listed("thread=t-1") == [refund.run_id]
    assert set(listed("thread=t-2")) == {schedule.run_id, transfer.run_id}
    assert set(listed("resource=r-1")) == {refund.run_id, schedule.run_id}
    assert listed("tool=transfer") == [transfer.run_id]
    assert listed("kind=input") == [schedule.run_id]
    assert set(listed("kind=approval")) == {refund.run_id, transfer.run_id}
    assert listed("thread=t-2&kind=approval") == [transfer.run_id]
    assert listed("thread=nope") == []


def test_inbox_sorts_oldest_first_by_default_and_newest_on_request(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    first = agents.start("helpdesk", "refund 1")
    second = agents.start("helpdesk", "refund 2")
    third = agents.start("helpdesk", "refund 3")

    default = card_ids(reviewer_client.get("/agents/helpdesk/").content.decode())
    oldest = card_ids(reviewer_client.get("/agents/helpdesk/?sort=oldest").content.decode())
    newest = card_ids(reviewer_client.get("/agents/helpdesk/?sort=newest").content.decode())

    assert default == oldest == [first.run_id, second.run_id, third.run_id]
    assert newest == [third.run_id, second.run_id, first.run_id]


def test_inbox_paginates_with_total_and_links(agents: DashboardAgents, reviewer_client: Client) -> None:
    runs = [agents.start("helpdesk", f"refund {i}") for i in range(5)]
    oldest_first = [r.run_id for r in runs]

    page2 = reviewer_client.get("/agents/helpdesk/?per_page=2&page=2&thread=").content.decode()
    past_end = reviewer_client.get("/agents/helpdesk/?per_page=2&page=9").content.decode()

    assert card_ids(page2) == oldest_first[2:4]
    assert 'data-total="5"' in page2
    assert "Page 2 of 3" in page2
    # Links keep the other parameters; each hx-get has the same href.
    links = re.findall(r'<a href="([^"]+)" hx-get="([^"]+)"', page2)
    assert links and all(href == hx for href, hx in links)
    hrefs = [href.replace("&amp;", "&") for href, _ in links]
    assert any("page=1" in h and "per_page=2" in h for h in hrefs)
    assert any("page=3" in h and "per_page=2" in h for h in hrefs)
    assert card_ids(past_end) == [] and 'data-total="5"' in past_end and "past the end" in past_end


@pytest.mark.parametrize(
    "query",
    [
        "from=yesterday",
        "to=2026-13-01",
        "from=2026-02-30T10:00",
        "per_page=0",
        "per_page=101",
        "per_page=abc",
        "page=0",
        "page=-1",
        "page=1.5",
        "kind=maybe",
        "sort=sideways",
        "from=2026-05-02&to=2026-05-01",
    ],
)
def test_inbox_malformed_query_is_a_clear_400_never_a_500(
    agents: DashboardAgents, reviewer_client: Client, query: str
) -> None:
    page = reviewer_client.get(f"/agents/helpdesk/?{query}")
    partial = reviewer_client.get(f"/agents/helpdesk/?{query}", **HX)

    assert page.status_code == 400
    assert "These filters cannot be used" in page.content.decode()
    # htmx 2 does not swap 4xx responses: the error partial comes with a 200.
    assert partial.status_code == 200
    assert "These filters cannot be used" in partial.content.decode()


def test_inbox_date_filters_take_dates_and_datetimes_and_to_includes_the_whole_day(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund today")
    today = timezone.localdate()
    tomorrow = today + timedelta(days=1)

    def listed(query: str) -> list[str]:
        return card_ids(reviewer_client.get(f"/agents/helpdesk/?{query}").content.decode())

    assert listed(f"to={today.isoformat()}") == [run.run_id]  # end of day, not midnight
    assert listed(f"from={today.isoformat()}&to={today.isoformat()}") == [run.run_id]
    assert listed(f"from={tomorrow.isoformat()}") == []
    assert listed(f"to={(today - timedelta(days=1)).isoformat()}") == []
    assert listed(f"from={today.isoformat()}T00:00:00%2B00:00") == [run.run_id]


def test_unknown_agent_is_404(agents: DashboardAgents, reviewer_client: Client) -> None:
    assert reviewer_client.get("/agents/nobody-here/").status_code == 404


def test_run_page_shows_card_conversation_and_decisions(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "both", thread="t-9")
    refund_call = next(c for c in run.tool_calls if c.tool_name == "refund")
    reviewer_client.post(
        f"/runs/{run.run_id}/calls/{refund_call.tool_call_id}/approve", {"agent": "helpdesk"}
    )

    response = reviewer_client.get(f"/runs/{run.run_id}/")

    html = response.content.decode()
    assert response.status_code == 200
    assert f'id="run-{run.run_id}"' in html
    assert "How it got here" in html
    assert "both" in html  # the user's prompt
    assert "<code>schedule_maintenance</code>" in html  # the call still waiting
    assert "Decisions on this run" in html
    decisions = html[html.index("Decisions on this run") :]
    assert "rita" in decisions and "Approve" in decisions


def test_run_page_of_an_ended_run_shows_its_audit_trail_and_outcome(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund done soon")
    call = run.tool_calls[0]
    reviewer_client.post(f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve", {"agent": "helpdesk"})

    html = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()

    assert "This run is no longer waiting" in html
    assert "Completed" in html
    assert "refunded 500 on A-1" in html  # the final answer
    assert "rita" in html


def test_unknown_run_is_404(agents: DashboardAgents, reviewer_client: Client) -> None:
    assert reviewer_client.get("/runs/does-not-exist/").status_code == 404


def test_a_run_is_found_by_one_read_whichever_agent_has_it(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    """Run ids are unique across agents: the run page finds a run with one read, not one per agent
    until one has it (the sub-agent ``worker`` is the last of three): without ``?agent=`` it reads
    the run as often as with it (that read, then its conversation's). One read also says that a run
    is being carried out, or that no run has an id, however many agents there are."""
    agents.start("boss", "wipe a disk")
    carried_out = agents.start("helpdesk", "refund first")
    (inner,) = agents.suspended("worker")  # (the worker's own run, waiting inside the supervisor's)

    def run_reads(url: str) -> tuple[int, int]:
        with count_queries() as statements:
            status = reviewer_client.get(url).status_code
        return status, statements.run_reads()

    assert run_reads(f"/runs/{inner.run_id}/") == run_reads(f"/runs/{inner.run_id}/?agent=worker") == (200, 2)
    assert run_reads("/runs/does-not-exist/") == (404, 1)
    (call,) = carried_out.tool_calls
    approval = Decision(action=DecisionAction.APPROVE, decided_at=timezone.now(), actor="rita")
    assert agents.runtime.storage.claim(carried_out.run_id, decisions={call.tool_call_id: approval})
    assert run_reads(f"/runs/{carried_out.run_id}/") == (200, 1)
    assert "the run is continuing" in reviewer_client.get(f"/runs/{carried_out.run_id}/").content.decode()


def test_tool_args_from_the_model_are_escaped_never_markup(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", f"refund {XSS}", thread=XSS)

    for url in ("/agents/helpdesk/", f"/runs/{run.run_id}/"):
        html = reviewer_client.get(url).content.decode()
        assert "<script>alert(1)</script>" not in html
        assert "<img src=x" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in html


def test_pages_carry_a_strict_content_security_policy_and_no_inline_script_or_style(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "schedule")

    for url in ("/", "/agents/helpdesk/", f"/runs/{run.run_id}/", "/runs/new/"):
        response = reviewer_client.get(url)
        policy = response["Content-Security-Policy"]
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
        assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
        assert directives["script-src"].startswith("'self'")
        assert directives["object-src"] == "'none'"
        assert directives["frame-ancestors"] == "'none'"
        html = response.content.decode()
        scripts = re.findall(r"<script\b[^>]*>", html)
        assert scripts and all(" src=" in tag for tag in scripts), scripts
        assert not re.search(r"<script\b[^>]*>\s*[^<\s]", html)  # no inline script bodies
        assert " style=" not in html and "<style" not in html
        assert not re.search(r"\son[a-z]+=", html)  # no inline event handlers
        assert 'name="htmx-config"' in html


def test_inbox_query_count_does_not_grow_with_page_size(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    for i in range(12):
        agents.start("helpdesk", "both" if i % 2 else f"refund {i}")
    reviewer_client.get("/agents/helpdesk/?per_page=2")  # warm up (session, content types)

    with count_queries() as small:
        assert reviewer_client.get("/agents/helpdesk/?per_page=2").status_code == 200
    with count_queries() as large:
        response = reviewer_client.get("/agents/helpdesk/?per_page=50")
    assert response.status_code == 200
    assert len(card_ids(response.content.decode())) == 12

    assert len(large) == len(small), (small.sql, large.sql)


def test_listings_and_rows_are_read_on_the_views_thread_without_an_event_loop(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    """The overview, an inbox, a sub-agent's inbox (its own runs and those decided through its
    supervisor) and their partials list runs through the runtime's synchronous listing, and an opened
    row and the run page (its conversation included) read their run the same way: a trip to an event
    loop and back cost a page about as much as reading its rows."""
    run = agents.start("helpdesk", "refund one")
    agents.start("boss", "delegate")  # waits in the worker's inbox too, as a delegated run
    pages = ["/agents/", "/agents/helpdesk/", "/agents/worker/", "/agents/boss/"]
    body_url = f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/"

    with loops_entered() as entered:
        html = {url: reviewer_client.get(url).content.decode() for url in pages}
        partials = [reviewer_client.get(url, **HX).status_code for url in pages[1:]]
        body = reviewer_client.get(body_url, {"agent": "worker"}, **HX).content.decode()
        run_page = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()

    assert entered == []
    assert "refund one" in run_page and ">Approve</button>" in run_page  # the conversation, the card
    assert partials == [200, 200, 200]
    assert ">Approve</button>" in body  # the row's run found, though the hint named another agent
    assert len(card_ids(html["/agents/helpdesk/"])) == 1
    assert "Decided through a supervisor" in html["/agents/worker/"]
    assert 'data-pending="1"' in html["/agents/"]


def test_new_run_page_starts_a_run_and_opens_it_when_it_waits(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    form = reviewer_client.get("/runs/new/").content.decode()
    assert '<option value="helpdesk">Help desk</option>' in form

    waiting = reviewer_client.post(
        "/runs/new/", {"agent": "helpdesk", "prompt": "refund from the browser", "thread": "t-web"}
    )
    done = reviewer_client.post("/runs/new/", {"agent": "helpdesk", "prompt": "transfer 7"}, follow=True)
    invalid = reviewer_client.post("/runs/new/", {"agent": "nope", "prompt": ""})

    [run] = agents.suspended("helpdesk", thread_id="t-web")
    assert waiting.status_code == 302 and waiting["Location"] == f"/runs/{run.run_id}/"
    assert "completed: transfer: moved 7" in done.content.decode()
    assert invalid.status_code == 400 and "Select a valid choice" in invalid.content.decode()
