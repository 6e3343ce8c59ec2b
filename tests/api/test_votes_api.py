"""Two-person approval and separation of duties over HTTP: the token's user started the run, a vote
answers "1 of 2 approvals" (202, no stream), refusals are 403 and change nothing."""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async

from approvals.models import AuditEntry
from approvals.services.tokens import create_token
from tests.support.api import Api, start
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import make_user

V1 = "/api/v1"


async def test_votes_and_separation_of_duties_over_both_apis(agents: DashboardAgents) -> None:
    rita, ada, rob = [
        await sync_to_async(make_user)(name, group)
        for name, group in (("rita", "Reviewers"), ("ada", "Admins"), ("rob", "Reviewers"))
    ]
    token = {u.username: (await sync_to_async(create_token)(u, name="t")).plaintext for u in (rita, ada, rob)}
    starter = Api(token["rita"])
    run = await start(starter, "helpdesk", "payout")
    call_path = f"{V1}/agents/helpdesk/runs/{run['runId']}/calls/{run['toolCallId']}/approve"

    own = await starter.post(call_path, {})
    assert own.status_code == 403
    assert json.loads(own.content)["code"] == "approval_refused"
    assert "rita started run" in json.loads(own.content)["error"]

    vote = await Api(token["ada"]).post(
        "/api/agents/helpdesk/approve-tool-call", {"runId": run["runId"], "toolCallId": run["toolCallId"]}
    )
    assert vote.status_code == 202, vote.content
    body = json.loads(vote.content)
    assert body["approvals"] == "1 of 2 approvals" and body["approvedBy"] == ["ada"]

    again = await Api(token["ada"]).post(call_path, {})
    assert again.status_code == 403 and "ada already approved" in json.loads(again.content)["error"]
    listed = json.loads((await starter.get(f"{V1}/agents/helpdesk/runs/{run['runId']}")).content)
    assert listed["toolCalls"][0]["approvedBy"] == ["ada"]
    assert agents.executed["payout"].count == 0

    done = await Api(token["rob"]).post(call_path, {})
    assert done.status_code == 200 and json.loads(done.content)["outcome"] == "completed"
    assert agents.executed["payout"].count == 1
    rows = await sync_to_async(
        lambda: list(AuditEntry.objects.order_by("id").values_list("username", "outcome", "channel"))
    )()
    assert rows == [
        ("rita", "refused", "api"),
        ("ada", "vote_recorded", "api"),
        ("ada", "refused", "api"),
        ("rob", "completed", "api"),
    ]
