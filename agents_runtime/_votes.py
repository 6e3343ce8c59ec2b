"""Who may approve a call: votes of a tool that needs several approvals, and separation of duties.

Part of the decision rule, so it runs inside the store's atomic decide step: two reviewers voting
at once cannot both be "the first", and a refused approval changes nothing.

Edited arguments: each vote approves one set of arguments (the reviewer's edits, or the model's
arguments). A vote for other arguments than the votes on record replaces them, so the call needs
all its approvals again, for the new arguments: a tool never runs with arguments fewer than N
reviewers approved.
"""

from __future__ import annotations

import json
from typing import Any

from ._host import RunAgent
from .errors import DecisionRefused, DuplicateVote, SelfApprovalRefused
from .store import Decision, ParkedCall, StoredRun, Vote
from .vocabulary import CallKind, DecisionAction


def verdict(agent: RunAgent, run: StoredRun, call: ParkedCall, decision: Decision) -> Decision | Vote:
    """The decision as the call's tool takes it: itself, a vote, or a refusal (raised)."""
    if call.kind != CallKind.APPROVAL or decision.action != DecisionAction.APPROVE:
        return decision  # a decline declines at once, whoever votes; answers are not votes
    spec = agent._find_tool(call.tool_name)
    required = spec.approvals if spec is not None else 1
    actor = decision.actor
    if spec is not None and spec.separate_duties:
        if actor is None:
            raise SelfApprovalRefused(
                f"Tool {call.tool_name!r} separates duties: an approval must name its reviewer",
                run_id=run.run_id,
                tool_call_id=call.tool_call_id,
                actor=actor,
            )
        if actor == run.started_by:
            raise SelfApprovalRefused(
                f"{actor} started run {run.run_id!r} and may not approve its {call.tool_name!r} call "
                "(separation of duties): another reviewer must approve it",
                run_id=run.run_id,
                tool_call_id=call.tool_call_id,
                actor=actor,
            )
    if required == 1:
        return decision
    if actor is None:
        raise DecisionRefused(
            f"Tool {call.tool_name!r} needs {required} approvals by distinct reviewers: an approval "
            "must name its reviewer",
            run_id=run.run_id,
            tool_call_id=call.tool_call_id,
            actor=actor,
        )
    if any(v.actor == actor for v in call.votes):
        raise DuplicateVote(
            f"{actor} already approved this call ({len(call.votes)} of {required} approvals): "
            "it needs another reviewer's approval",
            run_id=run.run_id,
            tool_call_id=call.tool_call_id,
            actor=actor,
        )
    mine = _approved_args(call, decision)
    prior = tuple(v for v in call.votes if _approved_args(call, v) == mine)
    if len(prior) != len(call.votes):
        prior = ()  # other arguments than the votes on record: they start over
    if len(prior) + 1 < required:
        return Vote(approval=decision, votes=(*prior, decision), required=required)
    return decision


def _approved_args(call: ParkedCall, decision: Decision) -> str:
    args: Any = decision.edited_args if decision.edited_args is not None else call.args
    return json.dumps(args, sort_keys=True, default=str)
