"""Recheck before the tool runs (``tool(recheck=True)``, beyond Mastra): after an approval, the preview
runs again; a call that would now do something else than what was approved does not run but waits
again, showing both, and the next decision is bound to what it would do now."""

from __future__ import annotations

from typing import Any

import pytest

from agents_runtime import (
    Agent,
    ArgumentsChanged,
    Call,
    DecisionRequest,
    Origin,
    Reply,
    RunStore,
    scripted_model,
    tool,
)
from agents_runtime.policy import shown
from agents_runtime.previews import Change, Preview
from agents_runtime.store import DecisionAction
from tests.support.runtime_helpers import ToolLog, stored_run

from .conftest import RuntimeFor


class Account:
    """A balance the world changes between the approval and the tool."""

    def __init__(self, balance: int) -> None:
        self.balance = balance
        self.previews = 0
        self.broken = False

    def preview(self, args: dict[str, Any]) -> Preview:
        self.previews += 1
        if self.broken:
            raise ConnectionError("the ledger is down")
        after = self.balance - args["amount"]
        return Preview(
            sentence=f"Refund {args['amount']} from a balance of {self.balance}",
            changes=(Change("Balance", str(self.balance), str(after)),),
        )


def refund_agent(log: ToolLog, account: Account, *, recheck: bool = True) -> Agent:
    @tool(requires_approval=True, preview=account.preview, recheck=recheck)
    def refund(account_id: str, amount: int) -> str:
        log.record(account_id=account_id, amount=amount)
        return "refunded"

    return Agent(
        "refunds",
        model=scripted_model(
            Call("refund", {"account_id": "A-1", "amount": 500}, tool_call_id="c1"), Reply("Done.")
        ),
        tools=[refund],
    )


def approve(run_id: str, seen: str | None = None, actor: str = "alice") -> DecisionRequest:
    return DecisionRequest(run_id, "c1", DecisionAction.APPROVE, actor, Origin.DASHBOARD, seen=seen)


async def test_an_unchanged_recheck_runs_the_tool_once(runtime_for: RuntimeFor, store: RunStore) -> None:
    log, account = ToolLog(), Account(2_000)
    agent = refund_agent(log, account)
    runtime_for(agent)
    run = await agent.generate("refund")
    stored = await stored_run(store, run.run_id)
    assert stored is not None

    decided = await agent.decide(approve(run.run_id, shown(stored.calls[0])))

    assert (await decided.stream.result()).status == "success"
    assert log.count == 1
    assert account.previews == 2  # when it parked, and again before the tool


async def test_a_changed_recheck_sends_the_call_back_with_both_previews(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log, account = ToolLog(), Account(2_000)
    agent = refund_agent(log, account)
    runtime_for(agent)
    run = await agent.generate("refund")
    before = await stored_run(store, run.run_id)
    assert before is not None
    approved_fingerprint = shown(before.calls[0])

    account.balance = 300  # spent elsewhere between the approval and the refund
    decided = await agent.decide(approve(run.run_id, approved_fingerprint))
    result = await decided.stream.result()

    assert result.status == "suspended"
    assert log.count == 0
    after = await stored_run(store, run.run_id)
    assert after is not None and after.status == "suspended"
    [call] = after.undecided
    assert call.decision is None
    assert call.context["approved_preview"]["sentence"] == "Refund 500 from a balance of 2000"
    assert call.context["preview"]["sentence"] == "Refund 500 from a balance of 300"
    assert call.context["recheck"]["by"] == "alice"
    assert call.context["recheck"]["error"] is None
    [listed] = (await agent.list_suspended_runs()).runs
    context = listed.tool_calls[0].context
    assert context is not None and context.approved_preview == call.context["approved_preview"]

    # The approval given on the old preview decides nothing now; one on what it would do now runs it.
    with pytest.raises(ArgumentsChanged):
        await agent.decide(approve(run.run_id, approved_fingerprint, actor="bob"))
    again = await agent.decide(approve(run.run_id, shown(call), actor="bob"))
    assert (await again.stream.result()).status == "success"
    assert log.count == 1


async def test_a_failing_recheck_never_runs_the_tool(runtime_for: RuntimeFor, store: RunStore) -> None:
    log, account = ToolLog(), Account(2_000)
    agent = refund_agent(log, account)
    runtime_for(agent)
    run = await agent.generate("refund")

    account.broken = True
    decided = await agent.approve_tool_call(run_id=run.run_id, tool_call_id="c1", actor="alice")

    assert (await decided.result()).status == "suspended"
    assert log.count == 0
    after = await stored_run(store, run.run_id)
    assert after is not None
    [call] = after.undecided
    assert "ConnectionError: the ledger is down" in call.context["recheck"]["error"]
    assert "ConnectionError" in call.context["preview"]["error"]


async def test_a_tool_without_recheck_runs_on_its_approval_whatever_changed(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log, account = ToolLog(), Account(2_000)
    agent = refund_agent(log, account, recheck=False)
    runtime_for(agent)
    run = await agent.generate("refund")

    account.balance = 300
    decided = await agent.approve_tool_call(run_id=run.run_id, tool_call_id="c1", actor="alice")

    assert (await decided.result()).status == "success"
    assert log.count == 1
    assert account.previews == 1


def test_recheck_needs_a_preview_and_an_approval() -> None:
    with pytest.raises(ValueError, match="recheck needs a preview"):
        tool(requires_approval=True, recheck=True)(lambda: None)
    with pytest.raises(ValueError, match="recheck needs a preview"):
        tool(preview=lambda args: "x", recheck=True)(lambda: None)
