"""Trying a grant's terms against the decided history: "would have matched N of the last M calls,
K of them declined, E edited".

One place for any rule that picks calls by agent, tool, scope and a CEL condition (grant
suggestions now, routing rules later): it reads the audit rows of the calls of one agent's tool
that were finally decided (by a person, a grant or a deadline) in a window, newest first and at
most ``MAX_CALLS`` of them, and evaluates the condition on each with the runtime's bounded
evaluator (``agents_runtime.grants``), on the arguments the reviewer saw with the tool's defaults,
as a grant's condition is checked when a call parks. Nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from agents_runtime.grants import GrantScope, compile_condition
from agents_runtime.store import DecisionAction, Outcome
from approvals import agents
from approvals.models import AuditEntry

#: The most decided calls one trial reads: the newest ones in its window.
MAX_CALLS = 1_000
#: The window a trial reads unless told otherwise.
WINDOW = timedelta(days=7)
#: How many example calls a trial names of each kind.
EXAMPLES = 5

#: Outcomes of a call's final decision: it took effect (whatever became of the run), or the
#: call's deadline decided it. Votes, lost races, refusals and grants made are not decisions of a call.
FINAL_OUTCOMES = (
    Outcome.CONTINUING,
    Outcome.COMPLETED,
    Outcome.FAILED,
    Outcome.INTERRUPTED,
    Outcome.SUSPENDED_AGAIN,
    Outcome.EXPIRED,
)
_CALL_DECISIONS = (DecisionAction.APPROVE, DecisionAction.DECLINE, DecisionAction.EXPIRE)


@dataclass(frozen=True)
class DecidedCall:
    """One decided call as the audit log has it."""

    audit_id: int
    run_id: str
    tool_call_id: str
    thread_id: str
    resource_id: str
    args: Mapping[str, Any]
    action: str
    #: A person decided it (not a grant, not its deadline).
    by_person: bool
    edited: bool
    decided_at: datetime

    @property
    def approved_by_person(self) -> bool:
        return self.by_person and self.action == DecisionAction.APPROVE

    @property
    def declined(self) -> bool:
        return self.action == DecisionAction.DECLINE


@dataclass(frozen=True)
class Terms:
    """Which calls a rule picks: one agent's tool, in a scope, where a CEL condition holds."""

    agent_id: str
    tool_name: str
    scope: GrantScope = GrantScope.EVERYONE
    #: The thread or end user (resource) for those scopes; "" for everyone.
    scope_value: str = ""
    #: CEL over the call's arguments; "" for any arguments.
    condition: str = ""

    def in_scope(self, call: DecidedCall) -> bool:
        if self.scope == GrantScope.THREAD:
            return call.thread_id == self.scope_value
        if self.scope == GrantScope.RESOURCE:
            return call.resource_id == self.scope_value
        return True


@dataclass(frozen=True)
class Trial:
    """What ``terms`` would have picked among the last ``considered`` decided calls since ``since``."""

    terms: Terms
    since: datetime
    considered: int
    matched: int = 0
    #: Of the matched: approved by a person, declined, approved with edited arguments.
    approved_by_person: int = 0
    declined: int = 0
    edited: int = 0
    #: Calls the condition could not be evaluated on (over its budget, or it raised): not matched.
    unevaluable: int = 0
    #: A few ``(run_id, tool_call_id)`` of each kind, newest first.
    examples: list[tuple[str, str]] = field(default_factory=list)
    declined_examples: list[tuple[str, str]] = field(default_factory=list)
    edited_examples: list[tuple[str, str]] = field(default_factory=list)

    @property
    def sentence(self) -> str:
        """ "Would have matched 40 of the last 52 decided calls: 0 declined, 0 edited." """
        return (
            f"Would have matched {self.matched} of the last {self.considered} decided call"
            f"{'s' if self.considered != 1 else ''}: {self.declined} declined, {self.edited} edited."
        )


def decided_calls(
    agent_id: str, tool_name: str, *, since: datetime, limit: int = MAX_CALLS
) -> list[DecidedCall]:
    """The calls of ``agent_id``'s ``tool_name`` finally decided since ``since``, newest first, at
    most ``limit`` (capped at ``MAX_CALLS``). Input calls (no arguments) are left out, and so are a
    supervisor's mirrors of its sub-agents' calls: its grants never apply to them, and their tool
    may be a namesake of its own."""
    rows = (
        AuditEntry.objects.filter(
            agent_id=agent_id,
            tool_name=tool_name,
            via_agent_id="",
            created_at__gte=since,
            action__in=_CALL_DECISIONS,
            outcome__in=FINAL_OUTCOMES,
            args__isnull=False,
        )
        .order_by("-created_at", "-id")
        .values_list(
            "id",
            "run_id",
            "tool_call_id",
            "thread_id",
            "resource_id",
            "args",
            "action",
            "channel",
            "grant_id",
            "edited_args",
            "created_at",
        )
    )
    calls = []
    for audit_id, run_id, call_id, thread, resource, args, action, channel, grant_id, edited, at in rows[
        : max(0, min(limit, MAX_CALLS))
    ]:
        if not isinstance(args, Mapping):
            continue
        by_person = grant_id is None and channel not in ("grant", "deadline", "rule") and action != "expire"
        calls.append(
            DecidedCall(
                audit_id, run_id, call_id, thread, resource, args, action, by_person, edited is not None, at
            )
        )
    return calls


def _with_defaults(agent_id: str, tool_name: str) -> Any:
    """How the tool completes a call's arguments (its defaults), as a grant's condition sees them."""
    try:
        spec = agents.get(agent_id).find_tool(tool_name)
    except agents.UnknownAgent:
        spec = None
    return (lambda args: dict(args)) if spec is None else spec.args_with_defaults


def trial(
    terms: Terms,
    *,
    now: datetime | None = None,
    window: timedelta = WINDOW,
    limit: int = MAX_CALLS,
    calls: list[DecidedCall] | None = None,
) -> Trial:
    """What ``terms`` would have picked among the decided calls of the window (``calls``: already
    read by ``decided_calls`` for the same agent, tool and window). ``InvalidGrant`` (nothing read)
    for a condition that is not CEL or cannot be bounded."""
    compiled = compile_condition(terms.condition)
    since = (now or timezone.now()) - window
    if calls is None:
        calls = decided_calls(terms.agent_id, terms.tool_name, since=since, limit=limit)
    complete = _with_defaults(terms.agent_id, terms.tool_name)
    counts = {"matched": 0, "approved_by_person": 0, "declined": 0, "edited": 0, "unevaluable": 0}
    examples: dict[str, list[tuple[str, str]]] = {"matched": [], "declined": [], "edited": []}
    for call in calls:
        if not terms.in_scope(call):
            continue
        if compiled is not None:
            verdict = compiled.evaluate(complete(call.args))
            if verdict.error is not None:
                counts["unevaluable"] += 1
                continue
            if not verdict.holds:
                continue
        kinds = ["matched"]
        kinds += ["approved_by_person"] if call.approved_by_person else []
        kinds += ["declined"] if call.declined else []
        kinds += ["edited"] if call.edited else []
        for kind in kinds:
            counts[kind] += 1
            if kind in examples and len(examples[kind]) < EXAMPLES:
                examples[kind].append((call.run_id, call.tool_call_id))
    return Trial(
        terms,
        since,
        len(calls),
        **counts,
        examples=examples["matched"],
        declined_examples=examples["declined"],
        edited_examples=examples["edited"],
    )
