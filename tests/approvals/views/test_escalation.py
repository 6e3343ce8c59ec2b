"""Escalation reaches people who can act: being in the group a call was escalated to is enough to
see and decide that call (no decide permission), and only that call, on every page and door that
shows it: the queue, the run page a notification links to, a folded row's body, the card's buttons,
the v1 API; and the overview says how many wait for them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from agents_runtime import RunResult
from agents_runtime.store import Deadline
from approvals.models import AuditEntry, BatchItem, CallClaim
from approvals.services.tokens import create_token
from tests.support.inbox_rows import HX
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import make_user

#: The group the calls escalate to: it holds no permission.
MANAGERS = "managers"


def start(agents: DashboardAgents, prompt: str, **kwargs: Any) -> RunResult:
    return async_to_sync(agents.agent("helpdesk").generate)(prompt, **kwargs)


def escalated_and_not(agents: DashboardAgents) -> tuple[RunResult, RunResult]:
    """A helpdesk call escalated to managers, and one that was not (still waiting, deadline ahead)."""
    escalating = start(
        agents, "refund escalate me", deadline=Deadline(timedelta(minutes=5), "escalate", MANAGERS)
    )
    other = start(agents, "refund not escalated", deadline=timedelta(hours=1))
    assert async_to_sync(agents.runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6)) == 1
    return escalating, other


def manager(username: str = "max", *groups: str) -> User:
    for name in (MANAGERS, *groups):
        Group.objects.get_or_create(name=name)
    user = make_user(username, MANAGERS, *groups)
    assert not user.has_perm("approvals.decide_runs")
    return user


def call_of(run: RunResult) -> str:
    return run.tool_calls[0].tool_call_id


def approve_url(run: RunResult) -> str:
    return reverse("approvals:approve", args=[run.run_id, call_of(run)])


def listed(page: str) -> list[str]:
    return re.findall(r'class="card run-card(?! has-outcome)[^"]*" data-run-id="([^"]+)"', page)


def test_a_member_of_the_group_a_call_escalated_to_sees_and_decides_it_without_the_permission(
    agents: DashboardAgents, client_for: Callable[[User], Client]
) -> None:
    escalated, other = escalated_and_not(agents)
    client = client_for(manager())

    queue = client.get("/queue/").content.decode()
    assert listed(queue) == [escalated.run_id]
    assert "refund not escalated" not in queue
    # The row's body, fetched when it opens, has the buttons.
    opened = client.get(reverse("approvals:call", args=[escalated.run_id, call_of(escalated)]), **HX)
    assert f'action="{approve_url(escalated)}"' in opened.content.decode()

    # The run page (where a notification's link leads) shows the call with its buttons.
    page = client.get(reverse("approvals:run", args=[escalated.run_id]))
    assert page.status_code == 200
    assert f'action="{approve_url(escalated)}"' in page.content.decode()
    assert "escalated to managers" in page.content.decode()
    # Nothing else of the agent: not the other run's page, nor its row's body, nor its inbox's calls.
    assert client.get(reverse("approvals:run", args=[other.run_id])).status_code == 404
    body = client.get(reverse("approvals:call", args=[other.run_id, call_of(other)]), **HX)
    assert "refund not escalated" not in body.content.decode()
    inbox = client.get(reverse("approvals:inbox", args=["helpdesk"])).content.decode()
    assert listed(inbox) == [escalated.run_id]

    client.post(approve_url(other), {"agent": "helpdesk"})
    assert agents.executed["refund"].calls == []
    answer = client.post(approve_url(escalated), {"agent": "helpdesk"}, **HX)

    assert answer.status_code == 200
    assert [c["note"] for c in agents.executed["refund"].calls] == ["escalate me"]
    assert AuditEntry.objects.get(run_id=escalated.run_id, action="approve").username == "max"
    assert [r.run_id for r in agents.suspended("helpdesk")] == [other.run_id]


def test_a_member_of_an_escalation_group_starts_no_runs_and_makes_no_grants(
    agents: DashboardAgents, client_for: Callable[[User], Client]
) -> None:
    escalated, _ = escalated_and_not(agents)
    client = client_for(manager())

    assert client.post("/runs/new/", {"agent": "helpdesk", "prompt": "refund me"}).status_code in (400, 403)
    allow = client.post(
        approve_url(escalated), {"agent": "helpdesk", "grant-scope": "everyone", "grant-lasts": "1d"}, **HX
    )
    assert "escalated to you" in allow.content.decode()
    assert agents.executed["refund"].calls == []


def test_the_card_offers_no_grant_to_an_escalation_group_member_who_may_not_make_one(
    agents: DashboardAgents, client_for: Callable[[User], Client], reviewer_client: Client
) -> None:
    """The card asks the policy (``policy.may_grant``) what the door would refuse: every page and
    answer that shows the escalated call's buttons offers its plain approval, not "approve and allow"."""
    escalated, _ = escalated_and_not(agents)
    client = client_for(manager())
    body_url = reverse("approvals:call", args=[escalated.run_id, call_of(escalated)])
    shown = {
        "run page": client.get(reverse("approvals:run", args=[escalated.run_id])).content.decode(),
        "row body": client.get(body_url, **HX).content.decode(),
        # Arguments that are not JSON: the card again, with the error (the card as it waits now).
        "card again": client.post(
            approve_url(escalated), {"agent": "helpdesk", "edited_args": "{not json"}, **HX
        ).content.decode(),
    }
    for where, page in shown.items():
        assert f'action="{approve_url(escalated)}"' in page, where
        assert "Approve and allow" not in page, where
        assert 'name="grant-scope"' not in page, where
    # A reviewer who decides all of the agent's calls is offered it on the same call.
    offered = reviewer_client.get(reverse("approvals:run", args=[escalated.run_id]))
    assert "Approve and allow" in offered.content.decode()


def test_the_v1_api_gives_an_escalation_group_member_the_escalated_call_and_nothing_else(
    agents: DashboardAgents,
) -> None:
    escalated, other = escalated_and_not(agents)
    token = create_token(manager(), name="escalations").plaintext
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    run_path = "/api/v1/agents/helpdesk/runs/{}"

    assert client.get(run_path.format(other.run_id)).status_code == 404
    assert client.get(run_path.format(escalated.run_id)).status_code == 200
    # The agent itself (its instructions, tools, sub-agents) is not theirs: left out of the lists of
    # agents, refused by Mastra's details route as any agent they do not see.
    assert json.loads(client.get("/api/v1/agents").content)["agents"] == []
    assert "helpdesk" not in json.loads(client.get("/api/agents").content)
    assert client.get("/api/agents/helpdesk").status_code == 403
    refused = client.post(
        f"{run_path.format(other.run_id)}/calls/{call_of(other)}/approve",
        "{}",
        content_type="application/json",
    )
    assert refused.status_code in (403, 404) and agents.executed["refund"].calls == []

    taken = client.post(
        f"{run_path.format(escalated.run_id)}/calls/{call_of(escalated)}/approve",
        json.dumps({}),
        content_type="application/json",
    )
    assert taken.status_code == 200, taken.content
    assert [c["note"] for c in agents.executed["refund"].calls] == ["escalate me"]


@pytest.mark.parametrize("also", ["Auditors", "agent:helpdesk"])
def test_who_sees_the_agent_decides_through_the_permission_only_even_in_the_escalation_group(
    agents: DashboardAgents, client_for: Callable[[User], Client], also: str
) -> None:
    """An auditor (or a designated viewer) in the group reads the call but may not decide it:
    Auditors decide nothing, whatever other group they are in."""
    escalated, _ = escalated_and_not(agents)
    client = client_for(manager("lou", also))

    page = client.get(reverse("approvals:run", args=[escalated.run_id])).content.decode()
    assert f'data-run-id="{escalated.run_id}"' in page
    assert f'action="{approve_url(escalated)}"' not in page
    assert listed(client.get("/queue/").content.decode()) == []

    client.post(approve_url(escalated), {"agent": "helpdesk"})
    assert agents.executed["refund"].calls == []


def test_the_overview_says_how_many_calls_are_escalated_to_you(
    agents: DashboardAgents, client_for: Callable[[User], Client], reviewer_client: Client
) -> None:
    escalated, _ = escalated_and_not(agents)
    client = client_for(manager())

    page = client.get("/agents/").content.decode()

    assert 'href="/queue/" data-count="escalated-to-you">Escalated to you (1)</a>' in page
    assert "No agents are registered" not in page
    # Those it was not escalated to are not told so.
    assert "Escalated to you" not in reviewer_client.get("/agents/").content.decode()
    client.post(approve_url(escalated), {"agent": "helpdesk"})
    assert "Escalated to you" not in client.get("/agents/").content.decode()


def deciding_lead() -> User:
    """A member of the escalation group who also holds the decide permission (through a group that
    names no agent): still sees the agent only for the calls escalated to them."""
    deciders, _ = Group.objects.get_or_create(name="deciders")
    deciders.permissions.add(Permission.objects.get(codename="decide_runs"))
    user = manager("leo")
    user.groups.add(deciders)
    return User.objects.get(pk=user.pk)  # (its permissions read afresh)


def test_an_escalation_group_member_claims_no_call_that_was_not_escalated_to_them(
    agents: DashboardAgents, client_for: Callable[[User], Client], reviewer_client: Client
) -> None:
    """ "I'm on it" is a decider's word: on a call not theirs it would hold off those who do decide
    it (and its answer would show the call)."""
    _, other = escalated_and_not(agents)
    client = client_for(deciding_lead())
    claim_url = reverse("approvals:claim", args=[other.run_id, call_of(other)])

    answer = client.post(claim_url, {"agent": "helpdesk", "op": "claim"}, **HX)

    assert "not escalated" not in answer.content.decode()
    assert not CallClaim.objects.exists()
    decided = reviewer_client.post(approve_url(other), {"agent": "helpdesk"}, **HX)
    assert "is on this call" not in decided.content.decode()
    assert [c["note"] for c in agents.executed["refund"].calls] == ["not escalated"]


@pytest.mark.parametrize(
    ("door", "posted"),
    [
        ("approvals:extend_deadline", {"by_minutes": "60", "reason": ""}),
        ("approvals:decline", {"reason": "x" * 100_000}),
        ("approvals:approve", {"edited_args": "{not json"}),
    ],
)
def test_a_form_refused_on_a_call_not_escalated_shows_nothing_of_it_and_records_nothing(
    agents: DashboardAgents, client_for: Callable[[User], Client], door: str, posted: dict[str, str]
) -> None:
    """The card again, with the form's errors, is the card of a run the user may see, or none; the
    attempt is kept in the audit log only on a call that is theirs to decide."""
    _, other = escalated_and_not(agents)
    client = client_for(deciding_lead())
    client.raise_request_exception = False

    answer = client.post(
        reverse(door, args=[other.run_id, call_of(other)]), {"agent": "helpdesk", **posted}, **HX
    )

    assert "not escalated" not in answer.content.decode()
    assert not AuditEntry.objects.filter(username="leo").exists()


@pytest.mark.parametrize("scope", ["matching", "selection"])
def test_a_batch_of_an_escalation_group_member_holds_only_the_calls_escalated_to_them(
    agents: DashboardAgents, client_for: Callable[[User], Client], scope: str
) -> None:
    """As their inbox lists them: "all matching" leaves the others out, and a posted selection of
    one is "not waiting" to them (nothing of it stored or shown)."""
    escalated, other = escalated_and_not(agents)
    client = client_for(deciding_lead())
    posted: dict[str, Any] = {"scope": "matching"}
    if scope == "selection":
        posted = {"call": [json.dumps([r.run_id, call_of(r)]) for r in (escalated, other)]}

    made = client.post("/agents/helpdesk/batches/new", posted)

    assert made.status_code == 302, made.content
    preview = client.get(made.headers["Location"]).content.decode()
    assert "escalate me" in preview and "not escalated" not in preview
    items = BatchItem.objects.filter(run_id=other.run_id)
    assert all(i.state == BatchItem.State.SKIPPED and i.args is None for i in items)
    assert len(items) == (1 if scope == "selection" else 0)


def test_the_run_page_shows_an_escalation_group_member_only_the_calls_escalated_to_them(
    agents: DashboardAgents, client_for: Callable[[User], Client]
) -> None:
    """A run waits on two calls and only one was escalated: its page (where a notification leads)
    shows that call, not the other, its arguments or the conversation that holds them."""
    helpdesk = agents.agent("helpdesk")
    run = async_to_sync(helpdesk.generate)(
        "both", deadline=Deadline(timedelta(minutes=5), "escalate", MANAGERS)
    )
    refund, schedule = run.tool_calls
    assert (refund.tool_name, schedule.tool_name) == ("refund", "schedule_maintenance")
    async_to_sync(helpdesk.extend_deadline)(
        run_id=run.run_id, tool_call_id=schedule.tool_call_id, by=timedelta(hours=2), reason="later"
    )
    assert async_to_sync(agents.runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6)) == 1
    client = client_for(manager())

    page = client.get(reverse("approvals:run", args=[run.run_id])).content.decode()

    assert "A-2" in page and f'action="{approve_url(run)}"' in page  # the escalated refund: theirs
    assert "db-2" not in page and schedule.tool_call_id not in page
