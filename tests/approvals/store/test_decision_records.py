"""A decision is on record from the step that accepts it, and its record says how the run went on.

Runs on the Django store on SQLite, and on PostgreSQL when ``DATABASE_URL`` points there (the store
writes the audit row in the same statement as the decision there).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, User
from django.test import Client

from agents_runtime import Agent, Call, Reply, Runtime, ToolContext, tool
from approvals.models import AuditEntry
from approvals.store import DjangoRunStore
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.runtime_helpers import ModelSpy
from tests.support.store_helpers import Clock
from tests.support.users import ensure_groups

HX = {"HTTP_HX_REQUEST": "true"}


def _rows(run_id: str) -> list[tuple[str, str, str]]:
    return list(AuditEntry.objects.filter(run_id=run_id).values_list("username", "action", "outcome"))


def _payments_runtime(store: DjangoRunStore, seen_by_tool: list[Any], *, fail: bool = False) -> Agent:
    @tool(requires_approval=True)
    def pay(ctx: ToolContext, amount: int) -> str:
        """Pay out money."""
        if fail:
            raise RuntimeError("bank is down")
        # What a person auditing would see at the moment the tool acts.
        seen_by_tool.extend(
            AuditEntry.objects.filter(tool_call_id=ctx.tool_call_id).values_list("username", "outcome")
        )
        return f"paid {amount}"

    model = ModelSpy(Call("pay", {"amount": 40}), lambda ctx: Reply(f"done: {ctx.results['pay']}"))
    agent = Agent("payments", model=model.model, tools=[pay])
    Runtime(agents=[agent], storage=store)
    return agent


def test_the_tool_runs_only_once_its_decision_is_on_record(transactional_db: None) -> None:
    seen: list[Any] = []
    agent = _payments_runtime(DjangoRunStore(), seen)
    run = async_to_sync(agent.generate)("pay")

    result = _approved(agent, run, actor="alice")

    assert result.status == "success"
    assert seen == [("alice", "continuing")]
    entry = AuditEntry.objects.get(run_id=run.run_id)
    assert (entry.username, entry.action, entry.outcome) == ("alice", "approve", "completed")
    assert entry.outcome_detail == "Completed: done: paid 40"
    assert entry.args == {"amount": 40}
    assert entry.tool_name == "pay"


def test_the_record_names_the_user_account_of_the_actor(transactional_db: None) -> None:
    alice = User.objects.create_user(username="alice", password="x")
    agent = _payments_runtime(DjangoRunStore(), [])
    run = async_to_sync(agent.generate)("pay")

    @async_to_sync
    async def decline() -> None:
        stream = await agent.decline_tool_call(
            run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id, actor="alice", reason="no"
        )
        await stream.result()

    decline()
    entry = AuditEntry.objects.get(run_id=run.run_id)
    assert entry.user_id == alice.pk
    assert entry.reason == "no"


async def test_a_run_that_fails_after_the_decision_is_recorded_as_failed(transactional_db: None) -> None:
    agent = _payments_runtime(DjangoRunStore(), [], fail=True)
    run = await agent.generate("pay")
    stream = await agent.approve_tool_call(
        run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id, actor="alice"
    )
    result = await stream.result()

    assert result.status == "failed"
    entry = await AuditEntry.objects.aget(run_id=run.run_id)
    assert entry.outcome == "failed"
    assert "bank is down" in entry.outcome_detail


def test_a_decision_that_leaves_other_calls_waiting_says_so(agents: DashboardAgents) -> None:
    run = agents.start("helpdesk", "both")
    refund = next(c for c in run.tool_calls if c.tool_name == "refund")
    async_to_sync(agents.agent("helpdesk").approve_tool_call)(
        run_id=run.run_id, tool_call_id=refund.tool_call_id, actor="alice"
    )

    entry = AuditEntry.objects.get(run_id=run.run_id)
    assert entry.outcome == "suspended_again"
    assert entry.outcome_detail == "Recorded; the run still waits on 1 other call(s): schedule_maintenance."
    assert agents.executed["refund"].count == 0


def test_a_continuation_that_lost_its_lease_leaves_its_decision_marked_interrupted(
    transactional_db: None,
) -> None:
    clock = Clock()
    store = DjangoRunStore(lease=timedelta(seconds=30), clock=clock)
    agent = _payments_runtime(store, [])
    run = async_to_sync(agent.generate)("pay")
    call_id = run.tool_calls[0].tool_call_id
    # The deciding process claims the run, starts continuing it and dies.
    receipt = store.record_decision(
        agent_id="payments",
        run_id=run.run_id,
        tool_call_id=call_id,
        decision=_approval("alice", clock),
    )
    assert receipt.claimed_version is not None
    assert store.start_continuation(run.run_id, version=receipt.claimed_version)
    assert _rows(run.run_id) == [("alice", "approve", "continuing")]

    clock.advance(seconds=31)
    listed = async_to_sync(agent.list_suspended_runs)()

    assert [r.run_id for r in listed.runs] == [run.run_id]
    assert _rows(run.run_id) == [("alice", "approve", "interrupted")]


def test_a_post_on_a_foreign_agents_decided_call_reveals_nothing_and_leaves_no_trace(
    agents: DashboardAgents,
) -> None:
    ensure_groups()
    run = agents.start("helpdesk", "refund parcel")
    call_id = run.tool_calls[0].tool_call_id
    async_to_sync(agents.agent("helpdesk").approve_tool_call)(
        run_id=run.run_id, tool_call_id=call_id, actor="winner"
    )
    outsider = User.objects.create_user(username="otto", password="x")
    outsider.groups.add(Group.objects.get(name="Reviewers"))
    outsider.groups.add(Group.objects.get_or_create(name="agent:boss")[0])
    client = Client()
    client.force_login(outsider)
    before = AuditEntry.objects.count()

    foreign = client.post(f"/runs/{run.run_id}/calls/{call_id}/decline", {"reason": "x"}, **HX)
    unknown = client.post("/runs/0123456789abcdef0123456789abcdef/calls/c1/decline", {"reason": "x"}, **HX)

    assert foreign.status_code == unknown.status_code
    text = foreign.content.decode()
    assert "winner" not in text
    assert "already decided" not in text
    assert AuditEntry.objects.count() == before


def _approved(agent: Agent, run: Any, *, actor: str) -> Any:
    @async_to_sync
    async def approve() -> Any:
        stream = await agent.approve_tool_call(
            run_id=run.run_id, tool_call_id=run.tool_calls[0].tool_call_id, actor=actor
        )
        return await stream.result()

    return approve()


def _approval(actor: str, clock: Clock) -> Any:
    from agents_runtime.store import Decision

    return Decision(action="approve", decided_at=clock(), actor=actor)
