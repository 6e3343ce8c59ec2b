"""The rules every decision passes, whoever takes it: one request in, one verdict out.

A decision of any origin (code calling ``approve_tool_call``, a reviewer at the desk, a standing grant
as a call parks, a deadline passing) is a ``DecisionRequest`` that ``Agent.decide`` takes to the
store's atomic step. There, on the call as stored, ``admit`` and ``verdict`` apply the rules, so what
they checked still holds when the decision lands. Each refusal is a named ``DecisionRefused`` (its
``rule`` says which) and changes nothing.

The rules, in the order they are checked:

1. the host's (``Runtime(policy=...)``): who may decide this call at all (the desk: the agent's
   reviewers, the groups a call was escalated to, Admins; for a grant, its maker's rights) and what
   else the host adds (a colleague's claim on the call);
2. a call interrupted after its tool started runs again only when confirmed (``Confirmation.RERUN``);
3. what the decider saw is still the call's: its arguments, its preview, its tool's version
   (``DecisionRequest.seen``, a ``fingerprint``);
4. a risky call (its tool asks for "I checked this", or the arguments hold a value the tool marks
   risky) is approved only with ``Confirmation.RISKY``; by a standing grant only if the grant was made
   for risky calls; by a deadline's default never. Code calling the runtime itself is trusted;
5. separation of duties and votes (``tool(separate_duties=True, approvals=N)``, or a routing rule's
   ``two``: ``required_approvals``); a deadline's default never approves a call that needs votes or
   another reviewer than its starter, and a routing rule never approves its author's own run's call.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from .errors import (
    ApprovalsNotGiven,
    ArgumentsChanged,
    DecisionRefused,
    DuplicateVote,
    NotTheRequester,
    RerunNotConfirmed,
    RiskyNotConfirmed,
    SelfApprovalRefused,
)
from .routing import MAX_ROUTED_APPROVALS, REQUIRED_APPROVALS_KEY
from .store import AgentRunToolCall, CallKind, Decision, DecisionAction, ParkedCall, StoredRun, Vote

if TYPE_CHECKING:
    from .grants import Grant
    from .routing import Rule
    from .tools import Tool


class Origin(enum.StrEnum):
    """Where a decision came from (the desk records it as the decision's channel)."""

    #: Code calling the runtime's API itself (trusted: it is the application).
    CODE = "code"
    DASHBOARD = "dashboard"
    BULK = "bulk"
    API = "api"
    MASTRA = "mastra"
    GRANT = "grant"
    #: A routing rule (``agents_runtime.routing``) allowing or denying a call as it parks.
    RULE = "rule"
    DEADLINE = "deadline"
    #: The agent that asked for the call, from another process (``agents_runtime.external``): it may
    #: only withdraw its own request (``DecisionAction.CANCEL``).
    REQUESTER = "requester"


class Confirmation(enum.StrEnum):
    """What a decider confirmed they saw, beyond the decision itself."""

    #: The call's tool may have run already (interrupted after it started): run it again.
    RERUN = "rerun"
    #: "I checked this": the call is risky and the decider looked at what it does.
    RISKY = "risky"
    #: A colleague is on this call (claimed it): decide it anyway.
    CLAIMED = "claimed"


@dataclass(frozen=True)
class DecisionRequest:
    """One decision as asked: who, on which call, what, with what they saw and confirmed."""

    run_id: str
    #: None: the run's only undecided call.
    tool_call_id: str | None
    action: DecisionAction
    actor: str | None = None
    origin: Origin = Origin.CODE
    reason: str | None = None
    resume_data: Any = None
    edited_args: dict[str, Any] | None = None
    #: ``fingerprint`` of the call as the decider saw it (``shown``; None: not checked).
    seen: str | None = None
    #: When the decider was shown the call (their card was rendered), if the door knows: kept with
    #: the decision's record, so the record says who was shown what, and when.
    shown_at: datetime | None = None
    confirmations: frozenset[Confirmation] = frozenset()
    #: The host's identity of the decider (the desk's rights of the user), opaque to the runtime.
    principal: Any = None
    #: The standing grant that takes this decision (``Origin.GRANT``).
    grant: Grant | None = None
    #: The routing rule that takes this decision (``Origin.RULE``).
    rule: Rule | None = None

    def confirmed(self, what: Confirmation) -> bool:
        return what in self.confirmations


@dataclass(frozen=True)
class Would:
    """What a decision would do now (``Agent.would_decide``): the same rules as the decision itself,
    on the call as stored, with nothing recorded. The call may change before a decision lands."""

    #: ``decides`` (the decision is the call's), ``vote`` (one approval of several: nothing runs yet),
    #: ``refused`` (a rule says no: ``rule``, ``message``), ``not_waiting`` (decided, gone).
    effect: str
    rule: str = ""
    message: str = ""
    #: ``claimed``: who holds the call.
    holder: str = ""
    #: ``vote``: who approved once this vote is in, and how many approvals the call needs.
    votes: tuple[str, ...] = ()
    required: int = 1
    #: The group the call was escalated to, if it was.
    escalated_to: str | None = None


class Policy(Protocol):
    """The host's rules (``Runtime(policy=...)``), checked first inside every decision's atomic step.

    Raise a ``DecisionRefused`` (a subclass naming the rule) to refuse; return to let the runtime's
    own rules decide."""

    def admit(self, request: DecisionRequest, run: StoredRun, call: ParkedCall) -> None: ...


def fingerprint(
    args: Mapping[str, Any] | None, preview: Mapping[str, Any] | None = None, version: str = ""
) -> str:
    """A short, stable digest of what a decider is shown of a call: its arguments (canonical JSON, so
    key order and ``1`` versus ``1.0`` are told apart as JSON tells them), its preview (JSON form)
    and its tool's version. Without a preview or a version, the digest of the arguments alone."""
    seen: Any = (
        args if preview is None and not version else {"args": args, "preview": preview, "version": version}
    )
    text = json.dumps(seen, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def shown(call: ParkedCall | AgentRunToolCall, version: str = "") -> str:
    """The ``fingerprint`` of a call as a decider is shown it now (stored or listed), its tool at
    ``version``: what ``DecisionRequest.seen`` is checked against, and what a card or the API hands
    out to be posted back."""
    context = call.context
    preview = context.get("preview") if isinstance(context, Mapping) else getattr(context, "preview", None)
    return fingerprint(call.args, preview if isinstance(preview, Mapping) else None, version)


def admit(request: DecisionRequest, run: StoredRun, call: ParkedCall, host: Policy | None) -> None:
    """Rule 1: the host's, before anything about the call is told to the decider; then who may
    withdraw a call: only the agent that asked (or the application's own code), and that is all it
    may do."""
    if host is not None:
        host.admit(request, run, call)
    cancels = request.action == DecisionAction.CANCEL
    if cancels and request.origin not in (Origin.REQUESTER, Origin.CODE):
        raise _refusal(
            NotTheRequester, "Only the agent that asked may cancel its request", run, call, request.actor
        )
    if request.origin == Origin.REQUESTER and not cancels:
        raise _refusal(
            NotTheRequester, "The agent that asked may only cancel its request", run, call, request.actor
        )
    if request.origin == Origin.REQUESTER and run.started_by is not None and request.actor != run.started_by:
        # Whoever else may reach the request (a reviewer's token) declines it at the desk instead.
        raise _refusal(
            NotTheRequester,
            f"Only {run.started_by}, who asked, may cancel this request: decline it instead",
            run,
            call,
            request.actor,
        )


def verdict(
    request: DecisionRequest, run: StoredRun, call: ParkedCall, tool: Tool | None, decision: Decision
) -> Decision | Vote:
    """Rules 2-5 on ``decision`` (the request, its data checked): itself, a vote, or a refusal."""
    _rerun(request, run, call)
    _seen(request, run, call, tool)
    if _approves(decision) and _risky(request, run, call, tool, decision):
        # The record says the grant approved a risky call, and that it was made to.
        decision = replace(decision, reason=RISKY_BY_GRANT)
    return _votes(run, call, tool, decision, approver=_approver(request, decision))


def _approver(request: DecisionRequest, decision: Decision) -> str | None:
    """Whose approval this is, for separation of duties: the reviewer's (a grant's: its maker's, the
    grant's actor); a routing rule's is its author's, in whose name it decides (its actor is its
    label)."""
    if request.origin == Origin.RULE and request.rule is not None:
        return request.rule.author
    return decision.actor


def _refusal(
    kind: type[DecisionRefused], message: str, run: StoredRun, call: ParkedCall, actor: str | None
) -> DecisionRefused:
    return kind(message, run_id=run.run_id, tool_call_id=call.tool_call_id, actor=actor)


def _approves(decision: Decision) -> bool:
    if decision.action == DecisionAction.APPROVE:
        return True
    # A deadline's default approval (``on_expiry="approve"``).
    return decision.action == DecisionAction.EXPIRE and decision.resume_data == {"approved": True}


def _rerun(request: DecisionRequest, run: StoredRun, call: ParkedCall) -> None:
    started = call.tool_started_at
    # Only an undecided call is offered again; a decided one (whose tool may be running right now)
    # is the store's "already decided", never a confirmation to ask for.
    if (
        started is not None
        and call.decision is None
        and request.action not in (DecisionAction.DECLINE, DecisionAction.EXPIRE)
        and not request.confirmed(Confirmation.RERUN)
    ):
        raise RerunNotConfirmed(run_id=run.run_id, tool_call_id=call.tool_call_id, started_at=started)


def _seen(request: DecisionRequest, run: StoredRun, call: ParkedCall, tool: Tool | None) -> None:
    # (An answer to a ``suspend()`` decides on the question, which never changes.)
    if (
        request.seen is None
        or call.kind != CallKind.APPROVAL
        or request.seen == shown(call, tool.version if tool else "")
    ):
        return
    raise _refusal(
        ArgumentsChanged,
        "The call changed since you saw it (its arguments, its preview or its tool's version: the "
        "card is stale): nothing was decided. Look at the call again.",
        run,
        call,
        request.actor,
    )


def needs_confirmation(tool: Tool | None, *arg_sets: Any) -> bool:
    """Approving needs the reviewer's explicit "I checked this": the tool asks for it
    (``confirm=True``), or one of the argument sets (the model's, the reviewer's edit) holds a value
    the tool marks risky (``Tool.risky_values``)."""
    if tool is None:
        return False
    if tool.confirm or not tool.risky:
        return tool.confirm
    return any(
        isinstance(args, Mapping)
        and (_holds_risky(tool, args) or _holds_risky(tool, tool.args_with_defaults(args)))
        for args in arg_sets
    )


def _holds_risky(tool: Tool, args: Mapping[str, Any]) -> bool:
    # (Both as sent and as the tool receives them: a default, or "666" that it takes for 666.)
    return any(name in args and args[name] in values for name, values in tool.risky.items())


#: The reason recorded with a risky call's approval by a grant made for risky calls.
RISKY_BY_GRANT = "A risky call, approved by a standing grant made for risky calls"


def _risky(
    request: DecisionRequest, run: StoredRun, call: ParkedCall, tool: Tool | None, decision: Decision
) -> bool:
    """Refuse a risky call's approval its origin may not give; True when a grant made for risky
    calls gives it (the record says so)."""
    if request.origin == Origin.CODE or tool is None:
        return False
    arg_sets = [call.args] if decision.edited_args is None else [call.args, decision.edited_args]
    if not needs_confirmation(tool, *arg_sets):
        return False
    if request.origin == Origin.GRANT:
        if request.grant is not None and request.grant.covers_risky:
            return True
        message = (
            f"{call.tool_name} is marked risky here: a standing grant approves such a call only if it "
            "was made for risky calls"
        )
    elif request.origin == Origin.DEADLINE:
        message = f"{call.tool_name} is marked risky here: nobody answering never approves it"
    elif request.origin == Origin.RULE:
        message = f"{call.tool_name} is marked risky here: a routing rule never approves it"
    elif request.confirmed(Confirmation.RISKY):
        return False
    else:
        message = (
            "This call is marked risky: confirm that you checked it (“I checked this”) to approve it. "
            "Nothing was decided."
        )
    raise _refusal(RiskyNotConfirmed, message, run, call, request.actor)


def _votes(
    run: StoredRun, call: ParkedCall, tool: Tool | None, decision: Decision, *, approver: str | None
) -> Decision | Vote:
    """Separation of duties, and a tool that needs several approvals (one vote each).

    Each vote approves one set of arguments (the reviewer's edits, or the model's). A vote for other
    arguments than the votes on record replaces them, so the call needs all its approvals again, for
    the new arguments: a tool never runs with arguments fewer than N reviewers approved.
    """
    if call.kind != CallKind.APPROVAL or not _approves(decision):
        return decision  # a decline declines at once, whoever votes; answers are not votes
    required = required_approvals(call, tool)
    if decision.action == DecisionAction.EXPIRE:
        return _nobody_answering(run, call, tool, decision, required)
    actor = decision.actor
    if tool is not None and tool.separate_duties:
        _separate_duties(run, call, actor, approver)
    if required == 1:
        return decision
    if actor is None:
        raise _refusal(
            DecisionRefused,
            f"Tool {call.tool_name!r} needs {required} approvals by distinct reviewers: an approval "
            "must name its reviewer",
            run,
            call,
            actor,
        )
    if any(v.actor == actor for v in call.votes):
        raise _refusal(
            DuplicateVote,
            f"{actor} already approved this call ({len(call.votes)} of {required} approvals): "
            "it needs another reviewer's approval",
            run,
            call,
            actor,
        )
    mine = _approved_args(call, decision)
    prior = tuple(v for v in call.votes if _approved_args(call, v) == mine)
    if len(prior) != len(call.votes):
        prior = ()  # other arguments than the votes on record: they start over
    if len(prior) + 1 < required:
        return Vote(approval=decision, votes=(*prior, decision), required=required)
    return decision


def _nobody_answering(
    run: StoredRun, call: ParkedCall, tool: Tool | None, decision: Decision, required: int
) -> Decision:
    """A deadline's default approval: only of a call that needs one approval, by anyone."""
    if tool is not None and tool.separate_duties:
        # (Its approval names a reviewer other than the starter; nobody answering names none.)
        raise _refusal(
            ApprovalsNotGiven,
            f"Tool {call.tool_name!r} separates duties: a reviewer other than its run's starter "
            "approves it, and nobody answering approves nothing",
            run,
            call,
            None,
        )
    if required == 1:
        return decision
    raise _refusal(
        ApprovalsNotGiven,
        f"Tool {call.tool_name!r} needs {required} approvals by distinct reviewers "
        f"({len(call.votes)} given): nobody answering approves nothing",
        run,
        call,
        None,
    )


def _separate_duties(run: StoredRun, call: ParkedCall, actor: str | None, approver: str | None) -> None:
    """An approval of a tool that separates duties names its reviewer, who did not start the run."""
    if actor is None or approver is None:
        raise _refusal(
            SelfApprovalRefused,
            f"Tool {call.tool_name!r} separates duties: an approval must name its reviewer",
            run,
            call,
            actor,
        )
    if approver == run.started_by:
        raise _refusal(
            SelfApprovalRefused,
            f"{approver} started run {run.run_id!r} and may not approve its {call.tool_name!r} call "
            "(separation of duties): another reviewer must approve it",
            run,
            call,
            actor,
        )


def required_approvals(call: ParkedCall | AgentRunToolCall, tool: Tool | None) -> int:
    """How many approvals ``call`` (stored or listed) needs, wherever it is asked (the votes rule, the
    card, "approve and allow"): its tool's (``tool(approvals=N)``), raised by the routing rule that
    sent it to several (``routing.REQUIRED_APPROVALS_KEY`` in its context), never lowered."""
    context = call.context
    if isinstance(context, Mapping):
        routed = context.get(REQUIRED_APPROVALS_KEY)
    else:
        routed = getattr(context, "required_approvals", None)
    own = tool.approvals if tool is not None else 1
    return max(own, routed) if type(routed) is int and routed <= MAX_ROUTED_APPROVALS else own


def _approved_args(call: ParkedCall, decision: Decision) -> str:
    args: Any = decision.edited_args if decision.edited_args is not None else call.args
    return json.dumps(args, sort_keys=True, default=str)
