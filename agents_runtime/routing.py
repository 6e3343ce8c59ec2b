"""Routing rules: what happens to one agent tool's calls, by their arguments, before anyone is asked.

A rule names an agent, a tool, a condition (the bounded CEL of standing grants, over the call's
arguments: ``conditions``) and a route: ``allow`` (approved as the call parks, as a grant approves),
``one`` (one approval: the default), ``two`` (two approvals by different people: the votes of
``tool(approvals=N)``; a rule raises a tool's count, never lowers it) or ``deny`` (declined at once,
the model told which rule). A tool's rules are ordered: the first whose condition holds routes the
call; none holds, the tool's own setting does. A rule whose condition cannot be evaluated on a call
stops the routing there: nothing is let through or declined automatically and the call waits for a
person, its card saying which rule failed (a later ``allow`` must not pass what an earlier ``deny``
might have caught).

Rules are made, changed and deleted by people only (the host decides who: the desk, its admins);
each decision a rule takes goes through ``Agent.decide``'s rules and the store's atomic step like any
other (``Origin.RULE``), so its audit row and exactly-once hold (``_loop.apply_routes`` applies them).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from . import conditions
from .conditions import InvalidCondition
from .errors import AgentsRuntimeError


class Route(enum.StrEnum):
    ALLOW = "allow"
    ONE = "one"
    TWO = "two"
    DENY = "deny"

    @property
    def label(self) -> str:
        return _ROUTE_LABELS[self]


_ROUTE_LABELS = {
    Route.ALLOW: "allow without asking",
    Route.ONE: "one approval",
    Route.TWO: "two approvals by different people",
    Route.DENY: "deny at once",
}

#: The context key of a call a rule routed to several approvals: how many it needs.
REQUIRED_APPROVALS_KEY = "required_approvals"
#: The most approvals a routing rule asks of one call (its ``two``; a tool may ask more itself).
MAX_ROUTED_APPROVALS = 2
#: The context key naming the rule that routed a call ("rule #3 of rita"), for its card.
ROUTED_BY_KEY = "routed_by"
#: The context key of the rules whose conditions failed on a call (as ``grant_failures``).
RULE_FAILURES_KEY = "rule_failures"

#: Longest reason a rule gives (the model is told it when the rule denies).
MAX_REASON_LENGTH = 500


class InvalidRule(AgentsRuntimeError, ValueError):
    """A rule that cannot be kept: an unknown tool or route, a bad condition, a route the tool forbids."""


class RuleNotFound(AgentsRuntimeError):
    def __init__(self, rule_id: int) -> None:
        super().__init__(f"Rule #{rule_id} not found")
        self.rule_id = rule_id


@dataclass(frozen=True)
class RuleRequest:
    """A rule as asked for (made, or the new terms of rule ``rule_id``): checked before it is kept."""

    agent_id: str
    tool_name: str
    route: Route
    created_by: str
    created_at: datetime
    condition: str = ""
    #: Why, in a sentence: the model is told it when the rule denies a call.
    reason: str = ""
    #: Where among the tool's rules (1: first); None: after the last.
    position: int | None = None


@dataclass(frozen=True)
class Rule:
    id: int
    agent_id: str
    tool_name: str
    position: int
    route: Route
    condition: str
    reason: str
    created_by: str
    created_at: datetime
    changed_by: str | None = None
    changed_at: datetime | None = None

    @property
    def author(self) -> str:
        """Who wrote its terms as they stand: whoever changed it last, else its maker. The rule
        decides on their rights and in their name."""
        return self.changed_by or self.created_by

    @property
    def label(self) -> str:
        """As the audit log says it: "rule #3 of rita" (its ``author``)."""
        return f"rule #{self.id} of {self.author}"

    def describe(self) -> str:
        when = f"when {self.condition}" if self.condition else "whatever the arguments"
        return f"{self.tool_name}, {when}: {self.route.label}"


@dataclass(frozen=True)
class RuleMatch:
    """What a tool's rules say of one call's arguments: the rule that routes it (None: none does),
    or the rule whose condition could not be evaluated and why (the call then waits for a person)."""

    rule: Rule | None = None
    failed: Rule | None = None
    error: str | None = None


def first_match(rules: Sequence[Rule], args: Mapping[str, Any] | None) -> RuleMatch:
    """The first of ``rules`` (in order) whose condition holds for ``args``; routing stops at a rule
    whose condition cannot be evaluated. Never raises."""
    for rule in rules:
        verdict = condition_verdict(rule.condition, args)
        if verdict.error is not None:
            return RuleMatch(failed=rule, error=verdict.error)
        if verdict.holds:
            return RuleMatch(rule=rule)
    return RuleMatch()


def condition_verdict(condition: str, args: Mapping[str, Any] | None) -> conditions.ConditionVerdict:
    try:
        compiled = conditions.compile_condition(condition)
    except InvalidCondition as exc:
        return conditions.ConditionVerdict(False, error=str(exc))
    return conditions.ConditionVerdict(True) if compiled is None else compiled.evaluate(args)


def ordered(rules: Sequence[Rule]) -> list[Rule]:
    """The order rules apply in: by position, then the older first."""
    return sorted(rules, key=lambda r: (r.position, r.id))


def renumbered(order: Sequence[int], moving: int | None, position: int | None) -> dict[int, int]:
    """Positions 1..n of a tool's rules (ids in ``order``, as they apply) once rule ``moving`` is
    placed at ``position`` (None: last; past the end: last); ``moving`` None: the others closed up."""
    rest = [rule_id for rule_id in order if rule_id != moving]
    if moving is not None:
        at = len(rest) if position is None else min(max(position, 1) - 1, len(rest))
        rest.insert(at, moving)
    return {rule_id: index for index, rule_id in enumerate(rest, start=1)}


@runtime_checkable
class RuleStore(Protocol):
    """What a run store keeps for routing rules (``InMemoryRunStore`` and the Django store). Each
    change is kept with its record (the Django store writes an audit row in the same transaction)."""

    def add_rule(self, request: RuleRequest) -> Rule:
        """Keep a checked rule; placed at ``request.position`` (the rules from there move down)."""
        ...

    def change_rule(self, rule_id: int, request: RuleRequest) -> Rule:
        """New terms for rule ``rule_id`` (``RuleNotFound``); ``created_by``/``created_at`` of the
        request say who changed it and when."""
        ...

    def delete_rule(self, rule_id: int, *, actor: str, at: datetime) -> Rule:
        """Delete a rule (``RuleNotFound``); the rule as it was."""
        ...

    def get_rule(self, rule_id: int) -> Rule | None: ...

    def rules_for(self, agent_id: str, tool_name: str) -> Sequence[Rule]:
        """The tool's rules in the order they apply (``ordered``)."""
        ...
