"""My queue: every call the user may decide across their agents, in one list, from where the last
page ended; its counts, its filters, and the landing page it is for those with more than one agent."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test import Client
from django.urls import reverse

from agents_runtime import RunResult
from agents_runtime.store import Deadline
from approvals import store as store_module
from approvals.models import ParkedCallRecord, RunRecord
from tests.support.inbox_rows import HX
from tests.support.queries import count_queries
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import PASSWORD, ensure_groups

QUEUE = "/queue/"


def listed(page: str) -> list[str]:
    """The run ids of the page's cards that wait, in order (folded outcomes left out)."""
    return re.findall(
        r'<article id="run-[^"]*" class="card run-card(?! has-outcome)[^"]*" data-run-id="([^"]+)"', page
    )


def next_link(page: str) -> str:
    found = re.search(r'<a href="([^"]+)"[^>]*rel="next" data-keys-follow>', page)
    assert found, "no Next link"
    return html.unescape(found.group(1))


def start(agents: DashboardAgents, agent_id: str, prompt: str, **kwargs: Any) -> RunResult:
    return async_to_sync(agents.agent(agent_id).generate)(prompt, **kwargs)


def approve(client: Client, run: RunResult, agent: str = "helpdesk", **headers: str) -> str:
    call = run.tool_calls[0].tool_call_id
    response = client.post(reverse("approvals:approve", args=[run.run_id, call]), {"agent": agent}, **headers)
    return response.content.decode()


def member(username: str, *groups: str, decides: bool = True) -> User:
    ensure_groups()
    user = User.objects.create_user(username=username, password=PASSWORD)
    for name in groups:
        group, _ = Group.objects.get_or_create(name=name)
        if decides and name not in {"Reviewers", "Admins"}:
            group.permissions.add(Permission.objects.get(codename="decide_runs"))
        user.groups.add(group)
    return user


def escalate(agents: DashboardAgents, run_prompt: str, group: str = "leads") -> RunResult:
    """A helpdesk call whose five minutes passed: it is escalated to ``group`` now."""
    run = start(
        agents, "helpdesk", run_prompt, deadline=Deadline(timedelta(minutes=5), "escalate", escalate_to=group)
    )
    expired = async_to_sync(agents.runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6))
    assert expired >= 1
    return run


# --- who sees what, and where they land -----------------------------------------------------------


def test_the_queue_lists_every_agents_calls_soonest_deadline_first_then_oldest(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    older = start(agents, "helpdesk", "refund no deadline")
    boss = start(agents, "boss", "wipe it")
    later = start(agents, "helpdesk", "refund in two hours", deadline=timedelta(hours=2))
    sooner = start(agents, "helpdesk", "refund in one hour", deadline=timedelta(hours=1))

    page = reviewer_client.get(QUEUE).content.decode()

    assert listed(page) == [sooner.run_id, later.run_id, older.run_id, boss.run_id]
    # The inbox's own card, with its forms' agent: the decisions go through the same door.
    assert f'data-run-id="{boss.run_id}" data-agent-id="boss"' in page
    assert "via Worker" in page
    # A sub-agent's inner run is decided through its supervisor's: listed once, there.
    assert len(RunRecord.objects.filter(status="suspended")) == 5


def test_the_queue_is_the_landing_page_of_whoever_decides_more_than_one_agent(
    agents: DashboardAgents, reviewer_client: Client, client_for: Callable[[User], Client]
) -> None:
    start(agents, "helpdesk", "refund landing")

    landing = reviewer_client.get("/").content.decode()
    one_agent = client_for(member("dora", "Reviewers", "agent:helpdesk")).get("/").content.decode()
    looks_only = client_for(member("otto", "Auditors", decides=False)).get("/").content.decode()

    assert "My queue" in landing and 'id="run-list"' in landing
    assert 'href="/agents/"' in landing  # the overview, a link away
    for overview in (one_agent, looks_only):
        assert 'id="agent-table"' in overview and 'id="run-list"' not in overview
    assert 'href="/queue/"' in one_agent  # (the queue is in every decider's menu)
    assert 'href="/queue/"' not in looks_only
    assert 'id="agent-table"' in reviewer_client.get("/agents/").content.decode()


def test_an_escalation_only_user_sees_only_the_calls_escalated_to_them(
    agents: DashboardAgents, client_for: Callable[[User], Client]
) -> None:
    escalated = escalate(agents, "refund escalate me")
    other = start(agents, "helpdesk", "refund not escalated", deadline=timedelta(hours=1))
    boss = start(agents, "boss", "wipe it")
    lead = client_for(member("leo", "leads"))

    page = lead.get(QUEUE).content.decode()

    assert listed(page) == [escalated.run_id]
    assert other.run_id not in page and boss.run_id not in page and "refund not escalated" not in page
    assert counts(page)["escalated"] == 1


def test_a_user_who_decides_nothing_has_an_empty_queue(
    agents: DashboardAgents, viewer: User, client_for: Any
) -> None:
    start(agents, "helpdesk", "refund look only")

    page = client_for(viewer).get(QUEUE).content.decode()

    assert listed(page) == [] and "Nothing waits for you" in page


# --- counts ------------------------------------------------------------------------------------------


def counts(page: str) -> dict[str, int]:
    return {name.replace("-", "_"): int(n) for name, n in re.findall(r'data-count="([\w-]+)">(\d+)<', page)}


def test_counts_say_what_is_due_soon_escalated_claimed_and_waiting_on_a_second_vote(
    agents: DashboardAgents, settings: Any, client_for: Callable[[User], Client]
) -> None:
    settings.QUEUE_DUE_SOON_SECONDS = 3600
    rita = member("rita", "Reviewers", "leads")
    sam = member("sam", "Reviewers")
    rita_client, sam_client = client_for(rita), client_for(sam)
    start(agents, "helpdesk", "refund in half an hour", deadline=timedelta(minutes=30))
    start(agents, "helpdesk", "refund in three hours", deadline=timedelta(hours=3))
    escalate(agents, "refund escalated")
    claimed = start(agents, "helpdesk", "refund claimed")
    payout = start(agents, "helpdesk", "payout")
    call = claimed.tool_calls[0].tool_call_id
    rita_client.post(
        reverse("approvals:claim", args=[claimed.run_id, call]), {"agent": "helpdesk", "op": "claim"}
    )
    assert "1 of 2" in approve(sam_client, payout, **HX)

    mine = counts(rita_client.get(QUEUE).content.decode())
    sams = counts(sam_client.get(QUEUE).content.decode())

    assert mine["escalated"] == 1 and sams["escalated"] == 0
    assert mine["claimed"] == 1 and sams["claimed"] == 0
    assert mine["second_vote"] == 1 and sams["second_vote"] == 0  # sam voted already
    # Half an hour off is due soon; three hours off is not (nor the escalated call, with no deadline now).
    assert mine["due_soon"] == sams["due_soon"] == 1


def test_an_unreadable_vote_leaves_its_run_out_and_the_counts_standing(
    agents: DashboardAgents, client_for: Callable[[User], Client]
) -> None:
    sam, rita = member("sam", "Reviewers"), member("rita", "Reviewers")
    payout, other = start(agents, "helpdesk", "payout"), start(agents, "helpdesk", "payout too")
    assert "1 of 2" in approve(client_for(sam), payout, **HX)
    assert "1 of 2" in approve(client_for(sam), other, **HX)
    ParkedCallRecord.objects.filter(run__run_id=payout.run_id).update(votes=["not a vote"])

    response = client_for(rita).get(QUEUE)

    assert response.status_code == 200
    page = response.content.decode()
    assert listed(page) == [other.run_id]
    assert counts(page)["second_vote"] == 1


# --- filters -----------------------------------------------------------------------------------------


@pytest.fixture
def mixed(agents: DashboardAgents) -> dict[str, RunResult]:
    return {
        "refund": start(
            agents, "helpdesk", "refund filtered", thread_id="orders-4411", resource_id="cust-Alice"
        ),
        "schedule": start(agents, "helpdesk", "schedule", thread_id="infra-9", resource_id="cust-Bob"),
        "boss": start(agents, "boss", "wipe it", thread_id="infra-10"),
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("agent=boss", ["boss"]),
        ("tool=REF", ["refund"]),  # any part of the name, any case
        ("tool=wipe", ["boss"]),
        ("thread=infra", ["schedule", "boss"]),
        ("thread=4411", ["refund"]),
        ("resource=alice", ["refund"]),
        ("agent=helpdesk&resource=cust", ["refund", "schedule"]),
        ("from=2000-01-01&to=2999-12-31", ["refund", "schedule", "boss"]),
        ("from=2999-01-01", []),
    ],
)
def test_each_filter_narrows_the_queue_in_the_query_string(
    mixed: dict[str, RunResult], reviewer_client: Client, query: str, expected: list[str]
) -> None:
    page = reviewer_client.get(f"{QUEUE}?{query}", **HX)

    assert page.status_code == 200
    assert listed(page.content.decode()) == [mixed[name].run_id for name in expected]


def test_the_filters_suggest_agents_tools_threads_and_end_users(
    mixed: dict[str, RunResult], reviewer_client: Client
) -> None:
    page = reviewer_client.get(f"{QUEUE}?thread=infra").content.decode()

    assert '<option value="boss">' in page and '<option value="helpdesk">' in page
    for suggested in ("refund", "wipe_disk", "orders-4411", "infra-9", "cust-Alice", "cust-Bob"):
        assert f'<option value="{suggested}"></option>' in page
    assert 'name="thread" value="infra"' in page and 'list="id_thread-suggestions"' in page
    # Creation dates are picked from the browser's calendar (the inbox's date boxes also take a time).
    assert 'type="date" name="from"' in page and 'type="date" name="to"' in page
    inbox = reviewer_client.get("/agents/helpdesk/").content.decode()
    assert re.search(r'<input type="text" name="from" placeholder="YYYY-MM-DD"', inbox)


def suggested(page: str, field: str) -> list[str]:
    """The names the filter ``field`` suggests, in order (none: no datalist)."""
    found = re.search(rf'<datalist id="id_{field}-suggestions">(.*?)</datalist>', page, re.S)
    return re.findall(r'<option value="([^"]*)"></option>', found.group(1)) if found else []


def test_the_threads_and_end_users_suggested_are_of_calls_the_user_decides_that_wait(
    agents: DashboardAgents, reviewer_client: Client, client_for: Callable[[User], Client]
) -> None:
    escalated = escalate(agents, "refund escalate me")
    RunRecord.objects.filter(run_id=escalated.run_id).update(thread_id="t-escalated", resource_id="u-lead")
    start(agents, "helpdesk", "refund waiting", thread_id="t-waiting", resource_id="u-waiting")
    decided = start(agents, "helpdesk", "refund decided", thread_id="t-decided", resource_id="u-decided")
    start(agents, "boss", "wipe it", thread_id="t-boss")
    approve(reviewer_client, decided)

    whole = reviewer_client.get(QUEUE).content.decode()
    lead = client_for(member("leo", "leads")).get(QUEUE).content.decode()

    # Every waiting run of the agents seen whole, in name order; a run decided waits no more.
    assert suggested(whole, "thread") == ["t-boss", "t-escalated", "t-waiting"]
    assert suggested(whole, "resource") == ["u-lead", "u-waiting"]
    # An escalation-only user is told the names of the calls escalated to them, and no other.
    assert suggested(lead, "thread") == ["t-escalated"] and suggested(lead, "resource") == ["u-lead"]


def test_the_suggestions_stop_at_fifty_names_in_name_order(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    threads = [f"t-{n:02d}" for n in range(53)]
    for n, thread in enumerate(reversed(threads)):
        start(agents, "helpdesk" if n % 2 else "boss", f"refund {n}", thread_id=thread)

    found = suggested(reviewer_client.get(QUEUE).content.decode(), "thread")

    assert len(found) == 50 and found == sorted(found) and set(found) <= set(threads)
    if connection.vendor == "postgresql":  # (from the counters, the first in name order)
        assert found == threads[:50]


def test_the_tool_filter_matches_the_tools_calls_wait_on_and_nothing_else(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    refund = start(agents, "helpdesk", "refund one")
    boss = start(agents, "boss", "wipe it")
    decided = start(agents, "helpdesk", "transfer 500")
    assert "Completed" in approve(reviewer_client, decided, **HX)

    def matched(part: str) -> list[str]:
        return listed(reviewer_client.get(f"{QUEUE}?tool={part}", **HX).content.decode())

    assert matched("E") == [refund.run_id, boss.run_id]  # a part of both names, either case
    assert matched("und") == [refund.run_id] and matched("_DISK") == [boss.run_id]
    assert matched("transfer") == [] and matched("%25") == [] and matched("zzz") == []


def test_a_thread_or_end_user_filter_takes_its_part_as_written(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    underscore = start(agents, "helpdesk", "refund a", thread_id="a_b-1", resource_id="50%-off")
    start(agents, "helpdesk", "refund b", thread_id="axb-2", resource_id="500-off")
    decided = start(agents, "helpdesk", "transfer 500", thread_id="a_b-3")
    assert "Completed" in approve(reviewer_client, decided, **HX)

    def matched(query: str) -> list[str]:
        return listed(reviewer_client.get(f"{QUEUE}?{query}", **HX).content.decode())

    # "_" and "%" are characters of the name, not wildcards; a run that waits no more is not found.
    assert matched("thread=A_B") == [underscore.run_id] and matched("resource=50%25") == [underscore.run_id]
    assert matched("thread=a_b-3") == [] and matched("thread=zzz") == []


def test_a_thread_filter_that_many_names_match_still_finds_every_run(
    mixed: dict[str, RunResult], reviewer_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "_MOST_NAMES", 1)  # (two threads hold "infra": a pattern again)

    page = reviewer_client.get(f"{QUEUE}?thread=INFRA", **HX)

    assert listed(page.content.decode()) == [mixed["schedule"].run_id, mixed["boss"].run_id]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("after=not-a-position", "This page link is damaged"),
        ("after=WyJ4IiwgInkiLCAieiJd", "This page link is damaged"),  # ["x", "y", "z"]
        # [null, "0001-01-01T00:00:00+14:00", "x"]: a time before the first a datetime holds in UTC
        ("after=W251bGwsICIwMDAxLTAxLTAxVDAwOjAwOjAwKzE0OjAwIiwgIngiXQ", "This page link is damaged"),
        ("agent=nobodys-agent", "Select a valid choice"),
        ("from=yesterday", "Enter an ISO date"),
        ("from=2026-02-01&to=2026-01-01", "“to” is before “from”"),
        ("per_page=100000", "less than or equal to 100"),
    ],
)
def test_a_malformed_filter_says_what_is_wrong_and_changes_nothing(
    mixed: dict[str, RunResult], reviewer_client: Client, query: str, message: str
) -> None:
    page = reviewer_client.get(f"{QUEUE}?{query}")
    partial = reviewer_client.get(f"{QUEUE}?{query}", **HX)

    assert page.status_code == 400 and partial.status_code == 200
    for text in (page.content.decode(), partial.content.decode()):
        assert "These filters cannot be used" in text and message in html.unescape(text)
        assert listed(text) == []
    assert RunRecord.objects.filter(status="suspended").count() == 4  # boss's and its worker's


# --- paging that follows the queue ------------------------------------------------------------------


def test_next_after_a_decided_page_brings_the_next_undecided_calls_and_skips_none(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    runs = [start(agents, "helpdesk", f"refund {n}") for n in range(5)]
    first = reviewer_client.get(f"{QUEUE}?per_page=2").content.decode()
    assert listed(first) == [runs[0].run_id, runs[1].run_id]

    # Decided from the queue: each card folds to one line in place, it does not vanish.
    queue_headers = {**HX, "HTTP_CS_LIST": "queue"}
    folded = [approve(reviewer_client, run, **queue_headers) for run in runs[:2]]
    second = reviewer_client.get(next_link(first), **HX).content.decode()
    third = reviewer_client.get(next_link(second), **HX).content.decode()

    for card in folded:
        assert "is-folded" in card and "Approved by you" in card
        assert ">Approve</button>" not in card
    assert listed(second) == [runs[2].run_id, runs[3].run_id]
    assert listed(third) == [runs[4].run_id]
    assert 'rel="next"' not in third and "Top of the queue" in third
    # The first page, refetched as it is, starts from the top again: the calls still waiting.
    assert listed(reviewer_client.get(f"{QUEUE}?per_page=2", **HX).content.decode())[0] == runs[2].run_id


def test_a_decision_taken_elsewhere_keeps_its_whole_outcome(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = start(agents, "helpdesk", "refund from the inbox")

    card = approve(reviewer_client, run, **HX)

    assert "is-folded" not in card and "Then the run:" in card


def test_an_unreadable_run_is_left_out_and_next_still_leads_past_it(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    """A run whose stored call no longer reads (hand-edited, or written by a broken migration) is left
    out of the queue, as listings leave it out; the page answers, and a page of such runs only still
    leads on to the next (the whole queue page failed)."""
    runs = [start(agents, "helpdesk", f"refund {n}") for n in range(4)]
    for run in runs[1:3]:
        ParkedCallRecord.objects.filter(run__run_id=run.run_id).update(args=["not", "an", "object"])

    seen: list[list[str]] = []
    url = f"{QUEUE}?per_page=1"
    while len(seen) < 10:
        response = reviewer_client.get(url, **HX)
        assert response.status_code == 200
        page = response.content.decode()
        seen.append(listed(page))
        if 'rel="next"' not in page:
            break
        url = next_link(page)

    assert seen == [[runs[0].run_id], [], [], [runs[3].run_id]]


def test_the_deadline_part_pages_into_the_part_without_deadlines(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    due = [start(agents, "helpdesk", f"refund due {n}", deadline=timedelta(hours=n + 1)) for n in range(3)]
    undue = [start(agents, "boss", f"wipe {n}") for n in range(2)]
    order = [r.run_id for r in (*due, *undue)]

    seen: list[str] = []
    url = f"{QUEUE}?per_page=2"
    while True:
        page = reviewer_client.get(url, **HX).content.decode()
        seen += listed(page)
        if 'rel="next"' not in page:
            break
        url = next_link(page)

    assert seen == order


# --- cost ---------------------------------------------------------------------------------------------


def test_the_queue_page_costs_the_same_statements_however_many_cards(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    def statements() -> int:
        reviewer_client.get(QUEUE)  # (warm: sessions, compiled statements)
        with count_queries(background=False) as counted:
            response = reviewer_client.get(QUEUE)
        assert response.status_code == 200
        return len(counted)

    start(agents, "helpdesk", "refund one", deadline=timedelta(hours=1))
    start(agents, "boss", "wipe one")
    few = statements()
    for n in range(6):
        start(agents, "helpdesk", f"refund many {n}", deadline=timedelta(hours=n + 1))
        start(agents, "boss", f"wipe many {n}")
    many = statements()

    assert len(listed(reviewer_client.get(QUEUE).content.decode())) == 14
    assert many == few
