"""Live updates of the calls a deadline escalates to a group, for its members who do not see the agent.

Such a member may decide the calls escalated to their group, and their queue lists them: their open
pages hear the escalation, a colleague deciding or extending those calls, such a call waiting for
them again (its recheck sent it back), and nothing else of the agent (its other calls, the run going
on once the call is decided). These run on whichever channel
layer the settings give (in-process with its outbox, or Redis with ``REDIS_URL``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from agents_runtime import RunResult, Runtime
from agents_runtime.store import Deadline
from approvals import agents as served
from approvals import services
from approvals.policy import Access
from tests.approvals.cards.test_previews import install, support_agent
from tests.support.inbox_rows import HX
from tests.support.live_sockets import Session, is_event, messages_until, next_message
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import make_user

pytestmark = pytest.mark.django_db(transaction=True)

#: Long enough for an event sent to a socket to have arrived, once a socket that hears it has it.
QUIET = 0.5


def _member(username: str, *groups: str) -> User:
    for name in groups:
        Group.objects.get_or_create(name=name)
    return make_user(username, *groups)


async def _escalating(agents: DashboardAgents, prompt: str, group: str = "leads") -> RunResult:
    """A help desk call whose five minutes (the escalation's hour after them) are not up yet."""
    deadline = Deadline(
        timedelta(minutes=5), "escalate", escalate_to=group, escalation_expires_after=timedelta(hours=1)
    )
    return await agents.agent("helpdesk").generate(prompt, deadline=deadline)


async def _expire(agents: DashboardAgents) -> None:
    """The five minutes pass: the waiting calls with such a deadline move to their group."""
    assert await agents.runtime.expire_due(datetime.now(UTC) + timedelta(minutes=6)) >= 1


async def _socket(user: User) -> WebsocketCommunicator:
    return await (await Session.of(await sync_to_async(_reload)(user))).socket()


def _reload(user: User) -> User:
    return User.objects.get(pk=user.pk)


def _events(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["event"]["type"], m["event"]["run_id"]) for m in messages if m["type"] == "event"]


async def _approve(agents: DashboardAgents, run: RunResult, actor: str) -> None:
    stream = await agents.agent("helpdesk").approve_tool_call(
        run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id, actor=actor
    )
    assert (await stream.result()).status == "success"


async def test_an_escalation_only_user_hears_the_escalation_and_a_colleague_deciding_it(
    agents: DashboardAgents, reviewer: User, nobody: User
) -> None:
    run = await _escalating(agents, "refund escalated live")
    lead = await sync_to_async(_member)("leo", "leads")
    night = await sync_to_async(_member)("nico", "night shift")
    lead_page, night_page, nobody_page = await _socket(lead), await _socket(night), await _socket(nobody)
    everything = await _socket(reviewer)

    await _expire(agents)
    escalated = await messages_until(lead_page, is_event("call-escalated", run.run_id))
    assert _events(escalated) == [("call-escalated", run.run_id)]
    assert escalated[-1]["event"]["agent_id"] == "helpdesk"

    # A colleague of the group decides it (from their own page, the API, anywhere).
    await _approve(agents, run, actor="lena")
    decided = await messages_until(lead_page, is_event("call-decided", run.run_id))
    assert _events(decided) == [("call-decided", run.run_id)]
    assert decided[-1]["event"]["actor"] == "lena"

    # The run going on once its call is decided is the agent's, not the group's: the lead's page
    # shows nothing of it any more (the reviewer's hears it end; by then the lead's would have too).
    await messages_until(everything, is_event("run-completed", run.run_id))
    assert await lead_page.receive_nothing(timeout=QUIET)
    # Another group's member, and a user who sees nothing, hear nothing of it at all.
    assert await night_page.receive_nothing(timeout=QUIET)
    assert await nobody_page.receive_nothing(timeout=QUIET)
    for page in (lead_page, night_page, nobody_page, everything):
        await page.disconnect()


async def test_an_escalation_only_user_hears_nothing_of_the_agents_other_calls(
    agents: DashboardAgents, reviewer: User
) -> None:
    escalated = await _escalating(agents, "refund escalated, then extended")
    other = await agents.agent("helpdesk").generate("refund not escalated", deadline=timedelta(hours=1))
    lead = await sync_to_async(_member)("leo", "leads")
    lead_page, everything = await _socket(lead), await _socket(reviewer)

    await _expire(agents)
    await _approve(agents, other, actor="rita")
    await messages_until(everything, is_event("run-completed", other.run_id))
    boss = await agents.agent("boss").generate("wipe the old server")
    await agents.agent("helpdesk").extend_deadline(
        run_id=escalated.run_id,
        tool_call_id=escalated.tool_calls[0].tool_call_id,
        by=timedelta(hours=1),
        reason="Waiting for the customer's photos",
        actor="lena",
    )

    heard = await messages_until(lead_page, is_event("deadline-extended", escalated.run_id))
    # The other run's decision, its end and the boss's run came in between: none reached the lead.
    assert _events(heard) == [("call-escalated", escalated.run_id), ("deadline-extended", escalated.run_id)]
    assert heard[-1]["event"]["actor"] == "lena"
    await messages_until(everything, is_event("deadline-extended", escalated.run_id))
    assert await lead_page.receive_nothing(timeout=QUIET)
    assert boss.run_id not in {run_id for _, run_id in _events(heard)}
    for page in (lead_page, everything):
        await page.disconnect()


async def test_a_user_who_sees_some_agents_hears_theirs_and_the_escalations_to_them_once(
    agents: DashboardAgents,
) -> None:
    run = await _escalating(agents, "refund escalated to a boss reviewer")
    # Designated for the boss only, and a lead: the help desk's escalated call reaches them as a lead.
    boss_lead = await sync_to_async(_member)("bella", "agent:boss", "leads")
    # Sees the help desk already: its escalated call reaches them through the agent, once.
    helpdesk_lead = await sync_to_async(_member)("hana", "agent:helpdesk", "leads")
    boss_lead_page, helpdesk_lead_page = await _socket(boss_lead), await _socket(helpdesk_lead)

    await _expire(agents)
    boss_run = await agents.agent("boss").generate("wipe the old server")
    later = await agents.agent("helpdesk").generate("refund not escalated, after")

    heard = await messages_until(boss_lead_page, is_event("run-suspended", boss_run.run_id))
    assert _events(heard) == [("call-escalated", run.run_id), ("run-suspended", boss_run.run_id)]
    everything = await messages_until(helpdesk_lead_page, is_event("run-suspended", later.run_id))
    assert _events(everything) == [("call-escalated", run.run_id), ("run-suspended", later.run_id)]
    # The help desk's call that was not escalated is none of the boss reviewer's.
    assert await boss_lead_page.receive_nothing(timeout=QUIET)
    for page in (boss_lead_page, helpdesk_lead_page):
        await page.disconnect()


def _join(user: User, group: str) -> None:
    user.groups.add(Group.objects.get_or_create(name=group)[0])


def _leave(user: User, group: str) -> None:
    user.groups.remove(Group.objects.get(name=group))


async def test_an_open_page_follows_its_user_joining_and_leaving_an_escalation_group(
    agents: DashboardAgents, settings: Any
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = 0.2
    first = await _escalating(agents, "refund escalated after joining")
    newcomer = await sync_to_async(_member)("noor")
    page = await _socket(newcomer)

    # Put in the group while the page is open: the page refetches, then hears the group's calls.
    await sync_to_async(_join)(newcomer, "leads")
    assert (await next_message(page, "agents"))["agents"] == []
    await _expire(agents)
    await messages_until(page, is_event("call-escalated", first.run_id))

    # Taken out of it: the page refetches once more and hears the group's calls no more.
    await sync_to_async(_leave)(newcomer, "leads")
    await next_message(page, "agents")
    second = await _escalating(agents, "refund escalated after leaving")
    await _expire(agents)
    await _approve(agents, first, actor="lena")
    watching = await _socket(await sync_to_async(_member)("lena", "leads"))
    await _approve(agents, second, actor="lena")
    await messages_until(watching, is_event("call-decided", second.run_id))
    assert await page.receive_nothing(timeout=QUIET)
    for socket in (page, watching):
        await socket.disconnect()


@pytest.fixture
def desk(transactional_db: None) -> Iterator[Runtime]:
    """The demo's support agent, whose refund is rechecked before it runs (``tool(recheck=True)``)."""
    previous = served.runtime()
    yield install(support_agent())
    served.install(previous)


async def test_a_call_its_recheck_sends_back_is_the_groups_again_and_their_page_hears_it(
    desk: Runtime,
) -> None:
    support = desk.get_agent("support")
    deadline = Deadline(
        timedelta(minutes=5), "escalate", escalate_to="leads", escalation_expires_after=timedelta(hours=1)
    )
    refund = "Please refund $890.00 on order A-1044, it never arrived."
    first = await support.generate(refund, deadline=deadline)
    second = await support.generate(refund, deadline=deadline)
    lead = await sync_to_async(_member)("leo", "leads")
    page = await _socket(lead)
    assert await desk.expire_due(datetime.now(UTC) + timedelta(minutes=6)) == 2

    for run in (first, second):
        stream = await support.approve_tool_call(
            run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id, actor="lena"
        )
        await stream.result()
    # The first refund ran: the second, approved on what it would have done before, waits again.
    waiting = (await support.list_suspended_runs(escalated_to=["leads"])).runs
    assert [run.run_id for run in waiting] == [second.run_id]

    heard = await messages_until(page, is_event("run-suspended", second.run_id))
    assert sorted(_events(heard)) == sorted(
        [
            ("call-escalated", first.run_id),
            ("call-escalated", second.run_id),
            ("call-decided", first.run_id),
            ("call-decided", second.run_id),
            ("run-suspended", second.run_id),
        ]
    )
    await page.disconnect()


def _members(*usernames: str) -> list[User]:
    """Members of "leads", who see no agent."""
    return [_member(name, "leads") for name in usernames]


def _post(user: User, run: RunResult, what: str, **data: str) -> None:
    """``user``'s browser posts to the escalated call's ``what`` ("claim", "approve", "undo")."""
    client = Client()
    client.force_login(user)
    url = reverse(f"approvals:{what}", args=[run.run_id, run.tool_calls[0].tool_call_id])
    assert client.post(url, {"agent": "helpdesk", **data}, **HX).status_code == 200


async def test_an_escalation_only_user_sees_a_colleague_claim_hold_and_undo_the_escalated_call(
    agents: DashboardAgents, reviewer: User, settings: Any
) -> None:
    settings.DECISION_UNDO_SECONDS = 30
    run = await _escalating(agents, "refund escalated, then claimed")
    other = await agents.agent("helpdesk").generate("refund not escalated", deadline=timedelta(hours=1))
    lead, lena = await sync_to_async(_members)("leo", "lena")
    page = await _socket(lead)
    await _expire(agents)
    await messages_until(page, is_event("call-escalated", run.run_id))

    # A colleague says "I'm on it", lets go, then approves (held for the undo window) and undoes it.
    await sync_to_async(_post)(lena, run, "claim", op="claim")
    claimed = await next_message(page, "event")
    assert [claimed["event"][k] for k in ("type", "run_id", "actor", "op")] == [
        "call-claimed",
        run.run_id,
        "lena",
        "claim",
    ]
    await sync_to_async(_post)(lena, run, "claim", op="release")
    assert (await next_message(page, "event"))["event"]["op"] == "release"
    await sync_to_async(_post)(lena, run, "approve")
    assert (await next_message(page, "event"))["event"]["type"] == "call-held"
    await sync_to_async(_post)(lena, run, "undo")
    assert (await next_message(page, "event"))["event"]["type"] == "call-undone"

    # The same on the agent's call that was not escalated: none of the lead's.
    await sync_to_async(_post)(reviewer, other, "claim", op="claim")
    everything = await _socket(reviewer)
    await sync_to_async(_post)(reviewer, other, "claim", op="release")
    await messages_until(everything, is_event("call-claimed", other.run_id))
    assert await page.receive_nothing(timeout=QUIET)
    for socket in (page, everything):
        await socket.disconnect()


async def test_an_escalation_only_user_hears_a_colleagues_refused_decision_recorded(
    agents: DashboardAgents,
) -> None:
    run = await _escalating(agents, "refund escalated, then refused")
    lead, lena = await sync_to_async(_members)("leo", "lena")
    page = await _socket(lead)
    await _expire(agents)
    await messages_until(page, is_event("call-escalated", run.run_id))

    # Edited arguments the tool refuses: nothing is decided, the attempt is on the run's record.
    refused = '{"order_id": "A-1", "amount_cents": "lots", "note": "x"}'
    await sync_to_async(_post)(lena, run, "approve", edited_args=refused)
    recorded = await next_message(page, "event")
    assert recorded["event"]["type"] == "decision-recorded"
    assert recorded["event"]["actor"] == "lena"
    await page.disconnect()


async def test_an_escalation_only_users_batch_page_hears_their_batch_finish(agents: DashboardAgents) -> None:
    run = await _escalating(agents, "refund escalated, then bulk approved")
    lead = await sync_to_async(_member)("leo", "leads")
    page = await _socket(lead)
    await _expire(agents)
    await messages_until(page, is_event("call-escalated", run.run_id))

    batch = await sync_to_async(_bulk_approve)(lead, run)
    finished = await messages_until(page, is_event("batch-finished"))
    assert finished[-1]["event"]["batch"] == batch
    await page.disconnect()


def _bulk_approve(user: User, run: RunResult) -> int:
    access = Access.of(_reload(user)).for_agent("helpdesk")
    batch = services.batch_prepare(access, selection=[(run.run_id, run.tool_calls[0].tool_call_id)])
    assert services.batch_start(access.access, batch, action="approve")
    services.batch_run(batch.pk)
    return batch.pk


async def _ask(page: WebsocketCommunicator, ask: str, run_id: str) -> str:
    """What the socket answers ``{ask: run_id}``: "subscribed", "presence", or "error"."""
    await page.send_json_to({ask: run_id})
    answer = await page.receive_json_from(timeout=15)
    return str(answer["type"])


@pytest.mark.parametrize("ask", ["subscribe_run", "presence"])
async def test_an_escalation_only_user_may_watch_the_escalated_run_and_no_other_of_the_agent(
    agents: DashboardAgents, ask: str
) -> None:
    run = await _escalating(agents, "refund escalated, then watched")
    other = await agents.agent("helpdesk").generate("refund not escalated", deadline=timedelta(hours=1))
    lead = await sync_to_async(_member)("leo", "leads")
    night = await sync_to_async(_member)("nico", "night shift")
    lead_page, night_page = await _socket(lead), await _socket(night)
    await _expire(agents)
    await messages_until(lead_page, is_event("call-escalated", run.run_id))

    assert await _ask(lead_page, ask, run.run_id) == ("subscribed" if ask == "subscribe_run" else "presence")
    assert await _ask(lead_page, ask, other.run_id) == "error"
    assert await _ask(night_page, ask, run.run_id) == "error"
    for page in (lead_page, night_page):
        await page.disconnect()


async def test_an_escalation_only_user_is_told_who_else_has_the_escalated_card_open(
    agents: DashboardAgents,
) -> None:
    run = await _escalating(agents, "refund escalated, two leads on it")
    leo, lena = await sync_to_async(_members)("leo", "lena")
    await _expire(agents)
    leo_page, lena_page = await _socket(leo), await _socket(lena)
    assert await _ask(leo_page, "presence", run.run_id) == "presence"
    await lena_page.send_json_to({"presence": run.run_id})
    assert (await next_message(leo_page, "presence"))["users"] == ["lena"]
    for page in (leo_page, lena_page):
        await page.disconnect()


async def test_a_member_taken_out_of_the_group_leaves_the_escalated_card_and_its_output(
    agents: DashboardAgents, settings: Any
) -> None:
    settings.LIVE_SESSION_CHECK_SECONDS = 0.2
    run = await _escalating(agents, "refund escalated, one lead moved on")
    leo, lena = await sync_to_async(_members)("leo", "lena")
    await _expire(agents)
    leo_page, lena_page = await _socket(leo), await _socket(lena)
    assert await _ask(leo_page, "subscribe_run", run.run_id) == "subscribed"
    assert await _ask(leo_page, "presence", run.run_id) == "presence"
    await lena_page.send_json_to({"presence": run.run_id})
    await messages_until(lena_page, lambda m: m["type"] == "presence" and m["users"] == ["leo"])

    # Out of the group: his page leaves the card (lena sees him go) and may not come back to it.
    await sync_to_async(_leave)(leo, "leads")
    await next_message(leo_page, "agents")
    assert (await next_message(lena_page, "presence"))["users"] == []
    assert await _ask(leo_page, "presence", run.run_id) == "error"
    assert await _ask(leo_page, "subscribe_run", run.run_id) == "error"
    for page in (leo_page, lena_page):
        await page.disconnect()
