"""A sub-agent's sub-agent's call, decided at the top, is judged by the tool that parked it.

``desk`` delegates to ``ops``, which delegates to ``treasury``. ``ops`` has tools of its own named as
``treasury``'s are, with laxer rules. The inner run's decision would use the right tool; the desk's
mirror of the call is where a namesake could stand in: it must not, at any door.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from importlib import import_module
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.apps import apps as django_apps
from django.db import connection
from django.test import Client

from agents_runtime import (
    Agent,
    Call,
    DecisionRequest,
    InvalidResumeData,
    Reply,
    Runtime,
    ScriptContext,
    SelfApprovalRefused,
    ToolContext,
    scripted_model,
    tool,
)
from agents_runtime.store import AgentRunToolCall, DecisionAction
from approvals import agents as served
from approvals.apps import compose
from approvals.models import ParkedCallRecord
from approvals.store import DjangoRunStore
from tests.support.api import token_caller
from tests.support.runtime_helpers import ToolLog, only_run
from tests.support.users import ensure_groups, make_user

#: What ``treasury``'s ``ask`` must be answered with (``ops``'s namesake wants a note instead).
AMOUNT = {
    "type": "object",
    "properties": {"amount": {"type": "integer"}},
    "required": ["amount"],
    "additionalProperties": False,
}
NOTE = {
    "type": "object",
    "properties": {"note": {"type": "string"}},
    "required": ["note"],
    "additionalProperties": False,
}


def _treasury_step(ctx: ScriptContext) -> Call:
    if "ask" in ctx.prompt:
        return Call("ask", {"question": "how much?"})
    if "late" in ctx.prompt:
        return Call("pay_later", {"to": "mallory", "amount": 900})
    return Call("pay", {"to": "mallory", "amount": 900})


def _passing_on(agent_id: str) -> Any:
    # Each level hands its prompt down unchanged, so the prompt picks the leaf's call.
    return lambda ctx: Call(f"agent_{agent_id}", {"prompt": ctx.prompt})


def _ops_step(ctx: ScriptContext) -> Call:
    return Call("pay", {"order": "O-1"}) if "own" in ctx.prompt else _passing_on("treasury")(ctx)


class Tower:
    """The three agents, what their tools did, and how to start and look at the desk's run."""

    def __init__(self) -> None:
        self.log = ToolLog()
        log = self.log

        @tool(requires_approval=True, confirm=True, approvals=2, separate_duties=True)
        def pay(to: str, amount: int) -> str:
            log.record(agent="treasury", to=to, amount=amount)
            return f"treasury paid {amount} to {to}"

        @tool(requires_approval=True, approvals=2, expires_after=timedelta(minutes=5), on_expiry="approve")
        def pay_later(to: str, amount: int) -> str:
            log.record(agent="treasury", to=to, amount=amount)
            return f"treasury paid {amount} to {to}"

        @tool(resume_schema=AMOUNT)
        def ask(ctx: ToolContext, question: str) -> str:
            if ctx.resume_data is None:
                ctx.suspend({"question": question})
            log.record(agent="treasury", answer=ctx.resume_data)
            return f"treasury heard {ctx.resume_data}"

        @tool(requires_approval=True, name="pay")
        def ops_pay(order: str) -> str:
            log.record(agent="ops", order=order)
            return f"ops paid {order}"

        @tool(requires_approval=True, name="pay_later")
        def ops_pay_later(order: str) -> str:
            log.record(agent="ops", order=order)
            return f"ops paid {order}"

        @tool(resume_schema=NOTE, name="ask")
        def ops_ask(ctx: ToolContext, question: str) -> str:
            if ctx.resume_data is None:
                ctx.suspend({"question": question})
            log.record(agent="ops", answer=ctx.resume_data)
            return f"ops heard {ctx.resume_data}"

        treasury = Agent(
            "treasury",
            name="Treasury",
            model=scripted_model(_treasury_step, Reply("Paid.")),
            tools=[pay, pay_later, ask],
        )
        ops = Agent(
            "ops",
            model=scripted_model(_ops_step, Reply("Handled.")),
            tools=[ops_pay, ops_pay_later, ops_ask],
            agents=[treasury],
        )
        self.desk = Agent("desk", model=scripted_model(_passing_on("ops"), Reply("Done.")), agents=[ops])
        self.runtime = Runtime(agents=[self.desk], storage=DjangoRunStore())

    def start(self, prompt: str) -> tuple[str, AgentRunToolCall]:
        """The desk's run, started by rita, and its one call (the mirror of treasury's)."""
        started = async_to_sync(self.desk.generate)(prompt, started_by="rita")
        assert started.status == "suspended", started
        [call] = self.waiting()
        return started.run_id, call

    def waiting(self) -> list[AgentRunToolCall]:
        return list(only_run(async_to_sync(self.desk.list_suspended_runs)()).tool_calls)

    def suspended(self) -> list[str]:
        return [r.run_id for r in async_to_sync(self.desk.list_suspended_runs)().runs]


@pytest.fixture
def tower(transactional_db: None) -> Iterator[Tower]:
    built = Tower()
    previous = served.runtime()
    compose(built.runtime)
    ensure_groups()
    yield built
    served.install(previous)


def test_the_desks_mirror_names_the_sub_agent_whose_call_it_is(tower: Tower) -> None:
    """``via_agent_id`` is who parked the call (every door looks its tool up by it), not the
    sub-agent in between."""
    _run_id, call = tower.start("pay")

    assert (call.tool_name, call.via_agent_id) == ("pay", "treasury")


def test_the_sub_agent_in_betweens_own_call_keeps_its_own_rules(tower: Tower) -> None:
    """The other way round: ops's own ``pay`` (one approval, anyone's) is not judged by treasury's."""
    run_id, call = tower.start("own pay")
    assert call.via_agent_id == "ops"

    async_to_sync(tower.desk.approve_tool_call)(run_id=run_id, tool_call_id=call.tool_call_id, actor="rita")

    assert tower.log.calls == [{"agent": "ops", "order": "O-1"}]
    assert tower.suspended() == []


def test_one_approval_does_not_pay_when_the_leaf_tool_needs_two(tower: Tower) -> None:
    run_id, call = tower.start("pay")

    async_to_sync(tower.desk.approve_tool_call)(run_id=run_id, tool_call_id=call.tool_call_id, actor="ann")

    assert tower.log.calls == [], "one approval ran a tool that needs two"
    assert tower.suspended() == [run_id]
    [still] = tower.waiting()
    assert still.approved_by == ("ann",)
    async_to_sync(tower.desk.approve_tool_call)(run_id=run_id, tool_call_id=call.tool_call_id, actor="bob")
    assert tower.log.calls == [{"agent": "treasury", "to": "mallory", "amount": 900}]
    assert tower.suspended() == []


def test_the_starter_may_not_approve_when_the_leaf_tool_separates_duties(tower: Tower) -> None:
    run_id, call = tower.start("pay")

    with pytest.raises(SelfApprovalRefused):
        async_to_sync(tower.desk.approve_tool_call)(
            run_id=run_id, tool_call_id=call.tool_call_id, actor="rita"
        )

    assert tower.log.calls == [] and tower.suspended() == [run_id]


def test_the_leaf_tools_arguments_check_an_edit(tower: Tower) -> None:
    """An edit is checked against the parameters of the tool that runs (treasury's ``pay(to,
    amount)``), not a namesake's (ops's ``pay(order)``)."""
    run_id, call = tower.start("pay")

    for actor in ("ann", "bob"):
        async_to_sync(tower.desk.approve_tool_call)(
            run_id=run_id,
            tool_call_id=call.tool_call_id,
            actor=actor,
            edited_args={"to": "mallory", "amount": 90},
        )

    assert tower.log.calls == [{"agent": "treasury", "to": "mallory", "amount": 90}]


def test_an_answer_is_checked_against_the_leaf_tools_resume_schema(tower: Tower) -> None:
    """The namesake's schema would take an answer treasury's tool cannot read (its run, then every
    run above it, failing after the answer was recorded) and refuse the one it asks for."""
    run_id, call = tower.start("ask")

    with pytest.raises(InvalidResumeData):
        async_to_sync(tower.desk.resume_stream)(
            {"note": "ten"}, run_id=run_id, tool_call_id=call.tool_call_id, actor="ann"
        )
    assert tower.log.calls == [] and tower.suspended() == [run_id]

    async_to_sync(tower.desk.resume_stream)(
        {"amount": 10}, run_id=run_id, tool_call_id=call.tool_call_id, actor="ann"
    )
    assert tower.log.calls == [{"agent": "treasury", "answer": {"amount": 10}}]


def test_nobody_answering_never_approves_a_leaf_call_that_needs_two_approvals(tower: Tower) -> None:
    _run_id, call = tower.start("late")
    assert call.on_expiry == "approve" and call.expires_at is not None

    async_to_sync(tower.runtime.expire_due)(datetime.now(UTC) + timedelta(hours=1))

    assert tower.log.calls == [], "the deadline approved a call that needs two reviewers"
    assert tower.suspended() == []


def test_the_desk_api_asks_for_the_leaf_tools_confirmation_and_reviewer(tower: Tower) -> None:
    """Through the HTTP door (as in round two, one level deeper): treasury's ``pay`` asks for "I
    checked this", and never takes its starter's approval."""
    rita = make_user("rita", "Reviewers")
    run_id, call = tower.start("pay")
    url = f"/api/v1/agents/desk/runs/{run_id}/calls/{call.tool_call_id}/approve"

    answer = token_caller(rita)("POST", url, {})

    assert answer.status_code == 409 and answer.json()["code"] == "risky_unconfirmed", answer.content
    confirmed = token_caller(rita)("POST", url, {"confirm": True})
    assert confirmed.status_code == 403 and "separation of duties" in confirmed.json()["error"]
    assert tower.log.calls == [] and tower.suspended() == [run_id]


def test_a_would_decide_preview_counts_the_leaf_tools_votes(tower: Tower) -> None:
    run_id, call = tower.start("pay")

    would = async_to_sync(tower.desk.would_decide)(
        DecisionRequest(run_id, call.tool_call_id, DecisionAction.APPROVE, actor="ann")
    )

    assert (would.effect, would.required) == ("vote", 2)


def test_the_desks_card_names_the_sub_agent_that_asked(tower: Tower) -> None:
    run_id, _call = tower.start("pay")
    client = Client()
    client.force_login(make_user("rita", "Reviewers"))

    page = client.get("/agents/desk/").content.decode()

    assert f'id="run-{run_id}"' in page and "via Treasury" in page


def test_a_mirror_stored_before_the_fix_is_given_its_owner_by_the_migration(tower: Tower) -> None:
    """A desk mirror stored naming ``ops`` (as every nested mirror was) names ``treasury`` once
    migrated, and one approval no longer pays."""
    run_id, call = tower.start("pay")
    row = ParkedCallRecord.objects.get(run__run_id=run_id, tool_call_id=call.tool_call_id)
    row.delegation = {**row.delegation, "agent_id": "ops"}
    row.save(update_fields=["delegation"])
    assert tower.waiting()[0].via_agent_id == "ops"

    migration = import_module("approvals.migrations.0055_nested_mirrors_owner")
    migration.owners_of_nested_mirrors(django_apps, SimpleNamespace(connection=connection))

    assert tower.waiting()[0].via_agent_id == "treasury"
    async_to_sync(tower.desk.approve_tool_call)(run_id=run_id, tool_call_id=call.tool_call_id, actor="ann")
    assert tower.log.calls == [] and tower.suspended() == [run_id]
