"""Effect previews (beyond Mastra): what a call would do, told when it parks and bound to its decision."""

from __future__ import annotations

import asyncio
import time
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
    ToolContext,
    fingerprint,
    scripted_model,
    tool,
)
from agents_runtime.policy import shown
from agents_runtime.previews import MAX_SENTENCE, Change, Preview, preview_problems
from agents_runtime.store import DecisionAction
from tests.support.runtime_helpers import ToolLog, stored_run

from .conftest import RuntimeFor

BALANCES = {"A-1044": 120_000}


def refund_preview(args: dict[str, Any], ctx: ToolContext) -> Preview:
    before = BALANCES[args["account"]]
    return Preview(
        sentence=f"${args['amount'] / 100:.2f} leaves account {args['account']} (run {ctx.run_id[:4]}…)",
        changes=(Change("Balance", f"${before / 100:.2f}", f"${(before - args['amount']) / 100:.2f}"),),
    )


def refund_agent(log: ToolLog, preview: Any = refund_preview, **options: Any) -> Agent:
    @tool(requires_approval=True, preview=preview, **options)
    def refund(account: str, amount: int) -> str:
        log.record(account=account, amount=amount)
        return "refunded"

    return Agent(
        "refunds",
        model=scripted_model(
            Call("refund", {"account": "A-1044", "amount": 89_000}, tool_call_id="c1"), Reply("Done.")
        ),
        tools=[refund],
    )


async def parked(agent: Agent, store: RunStore) -> tuple[str, Any]:
    run = await agent.generate("refund the customer")
    stored = await stored_run(store, run.run_id)
    assert stored is not None
    return run.run_id, stored.calls[0]


async def test_the_preview_is_stored_with_the_call_and_listed(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    agent = refund_agent(ToolLog())
    runtime_for(agent)
    _, call = await parked(agent, store)

    assert call.context["preview"]["sentence"].startswith("$890.00 leaves account A-1044")
    assert call.context["preview"]["changes"] == [
        {"label": "Balance", "before": "$1200.00", "after": "$310.00"}
    ]
    [listed] = (await agent.list_suspended_runs()).runs
    assert listed.tool_calls[0].context is not None
    assert listed.tool_calls[0].context.preview == call.context["preview"]


def failing(args: dict[str, Any]) -> Preview:
    raise LookupError("no such account")


async def slow_async(args: dict[str, Any]) -> str:
    await asyncio.sleep(10)
    return "never"


def slow_sync(args: dict[str, Any]) -> str:
    time.sleep(0.5)
    return "too late"


@pytest.mark.parametrize(
    ("preview", "error"),
    [
        (failing, "The preview failed (LookupError: no such account)"),
        (slow_async, "The preview took longer than 0.05s"),
        (slow_sync, "The preview took longer than 0.05s"),
        (lambda args: 42, "The preview returned int, not a Preview"),
    ],
)
async def test_a_failing_or_slow_preview_is_recorded_and_never_blocks_the_decision(
    runtime_for: RuntimeFor, store: RunStore, preview: Any, error: str
) -> None:
    log = ToolLog()
    agent = refund_agent(log, preview, preview_timeout=0.05)
    runtime_for(agent)
    started = time.monotonic()
    run_id, call = await parked(agent, store)

    assert time.monotonic() - started < 0.45
    assert call.context["preview"]["error"].startswith(error)
    stream = await agent.approve_tool_call(run_id=run_id, tool_call_id="c1", actor="alice")
    assert (await stream.result()).status == "success"
    assert log.count == 1


async def test_a_preview_is_cut_to_its_bounds(runtime_for: RuntimeFor, store: RunStore) -> None:
    agent = refund_agent(ToolLog(), lambda args: {"sentence": "x" * 5000, "items": ["a\x00b"] * 500})
    runtime_for(agent)
    _, call = await parked(agent, store)

    preview = call.context["preview"]
    assert len(preview["sentence"]) == MAX_SENTENCE
    assert len(preview["items"]) == 50
    assert preview["items"][0] == "a\ufffdb"


async def test_a_decision_is_bound_to_the_preview_and_the_tool_version_it_was_shown(
    runtime_for: RuntimeFor, store: RunStore
) -> None:
    log = ToolLog()
    agent = refund_agent(log, version="1")
    runtime_for(agent)
    run_id, call = await parked(agent, store)
    args_only = fingerprint(call.args)
    as_shown = shown(call, "1")
    assert as_shown != args_only

    def approve(seen: str) -> DecisionRequest:
        return DecisionRequest(run_id, "c1", DecisionAction.APPROVE, "alice", Origin.DASHBOARD, seen=seen)

    # A card that showed the arguments without this preview saw something else.
    with pytest.raises(ArgumentsChanged, match="changed since you saw it"):
        await agent.decide(approve(args_only))
    # The tool was upgraded since the card was shown (a restart with version 2).
    upgraded = refund_agent(log, version="2")
    runtime_for(upgraded)
    with pytest.raises(ArgumentsChanged):
        await upgraded.decide(approve(as_shown))
    assert log.count == 0

    decided = await upgraded.decide(approve(shown(call, "2")))
    assert (await decided.stream.result()).status == "success"
    assert log.count == 1


def test_an_external_agents_preview_is_refused_past_its_bounds() -> None:
    assert preview_problems({"sentence": "ok", "changes": [{"label": "v", "before": "1", "after": 2}]}) == []
    found = preview_problems({"sentence": "x" * 501, "items": "one", "extra": 1, "changes": [{"label": "v"}]})
    assert [p["loc"] for p in found] == [
        ("preview",),
        ("preview", "sentence"),
        ("preview", "items"),
        ("preview", "changes", 0),
    ]
    assert preview_problems("text") == [
        {"loc": ("preview",), "msg": "an object: sentence, changes, diff, items"}
    ]
