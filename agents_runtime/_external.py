"""External agents' runs at work: the one call a request parks, and how its run ends once decided.

A run made from an approval request (``agents_runtime.external``) has no model turn: it is stored
already parked on one call, through the same suspension path as any run (``_loop.store_suspension``:
grants first, deadlines, then announced). Its snapshot says so, and its continuation runs nothing:
the decision is handed to the agent that asked, which runs the tool itself, and the run ends with
what was decided (``handed_over``) in the store's ``finish`` step, once per claim.
"""

from __future__ import annotations

from typing import Any

from ._context import AgentContext
from .previews import Preview
from .store import (
    DEFAULT_DECLINE_REASON,
    CallKind,
    Deadline,
    DecisionAction,
    ParkedCall,
    RunEnding,
    StoredRun,
    Suspension,
)
from .untrusted import clean_call, clean_text

#: The snapshot of a run made from a request (there is no conversation to continue).
SNAPSHOT = {"external": 1}
#: The id of a request's one call (the run's id is the request's).
TOOL_CALL_ID = "request"


def suspension(
    ctx: AgentContext,
    run_id: str,
    *,
    tool_name: str,
    args: dict[str, Any],
    args_schema: dict[str, Any] | None,
    title: str | None,
    preview: dict[str, Any] | None,
    thread_id: str | None,
    resource_id: str | None,
    deadline: Deadline | None,
    started_by: str | None,
) -> Suspension:
    """The run of one request, parked on its call (checked by ``ExternalAgent.check`` before)."""
    parked_at = ctx.clock()
    context: dict[str, Any] = {
        "user_message": None,
        "agent_said": None,
        "key_results": [],
        "approval_reason": None,
        "previous_answers": [],
        "title": title,
        "args_schema": args_schema,
    }
    shown = Preview.from_json(preview)
    if shown is not None:
        context["preview"] = shown.to_json()
    call = ParkedCall(
        tool_call_id=TOOL_CALL_ID,
        tool_name=tool_name,
        kind=CallKind.APPROVAL,
        args=dict(args),
        context=context,
        deadline=deadline,
        expires_at=None if deadline is None else deadline.expires_at(parked_at),
    )
    return Suspension(
        run_id=run_id,
        agent_id=ctx.agent_id,
        thread_id=thread_id,
        resource_id=resource_id,
        parent_run_id=None,
        created_at=parked_at,
        suspended_at=parked_at,
        calls=(clean_call(call),),
        snapshot=dict(SNAPSHOT),
        started_by=started_by,
    )


def approved_args(call: ParkedCall) -> dict[str, Any] | None:
    """The arguments the agent that asked may run its tool with (None: it may not run it)."""
    decision = call.decision
    if decision is None:
        return None
    if decision.action == DecisionAction.APPROVE:
        return decision.edited_args if decision.edited_args is not None else call.args
    if decision.action == DecisionAction.EXPIRE and decision.resume_data == {"approved": True}:
        return call.args
    return None


def handed_over(run: StoredRun) -> RunEnding:
    """How a decided request's run ends: the decision handed to the agent that asked (its record
    keeps the call and what was handed over; what running it did is reported later)."""
    call = run.calls[0]
    decision = call.decision
    assert decision is not None, "continuing a request with an undecided call"
    args = approved_args(call)
    if args is not None:
        edited = decision.action == DecisionAction.APPROVE and decision.edited_args is not None
        detail = f"Approved{' with edits' if edited else ''}: handed to the agent that asked, which runs it."
        result: dict[str, Any] = {"approved": True, "args": args}
    else:
        word = DecisionAction(decision.action).verb
        reason = decision.reason or (
            DEFAULT_DECLINE_REASON if decision.action == DecisionAction.DECLINE else ""
        )
        detail = f"Not approved ({word}{': ' + reason if reason else ''}): the agent that asked was told."
        result = {"approved": False, "reason": reason or None}
    at = decision.decided_at.isoformat()
    transcript = (
        {
            "role": "assistant",
            "kind": "tool-call",
            "timestamp": run.created_at.isoformat(),
            "text": None,
            "tool_name": call.tool_name,
            "tool_call_id": call.tool_call_id,
            "args": call.args,
            "result": None,
        },
        {
            "role": "tool",
            "kind": "tool-result",
            "timestamp": at,
            "text": None,
            "tool_name": call.tool_name,
            "tool_call_id": call.tool_call_id,
            "args": None,
            "result": result,
        },
    )
    return RunEnding("completed", clean_text(detail), transcript=transcript)
