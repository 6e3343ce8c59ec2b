"""Routing rules from the dashboard: making, changing, deleting them, and trying one on history first.

Who may: ``policy.may_manage_rules`` (the stricter of "may make grants for this agent" and "manages
grants"). The runtime checks the terms (``Agent.rule_request``: ``InvalidRule`` saying what is wrong,
nothing kept) and its store keeps each change with its audit row. What a rule then does to a call
happens in the runtime as the call parks (``agents_runtime._loop.route_calls``).
"""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.core.exceptions import PermissionDenied

from agents_runtime import Agent, InvalidRule, Rule, RuleNotFound, RuleRequest
from agents_runtime.routing import Route
from approvals import agents
from approvals.models import RoutingRule
from approvals.policy import Access, may_manage_rules
from approvals.services import history

NOT_AN_ADMIN = (
    "Only an admin who decides all of this agent's calls may change its routing rules: a rule lets "
    "calls through, or stops them, with nobody asked."
)


@dataclass(frozen=True)
class RuleTerms:
    """What the rule form asks: which tool, when, what to do, why, where among the tool's rules."""

    tool_name: str
    route: Route
    condition: str = ""
    reason: str = ""
    position: int | None = None


def _agent_to_manage(access: Access, agent_id: str) -> Agent:
    if agent_id not in access.agent_ids:
        raise RuleNotFound(0)
    if not may_manage_rules(access, agent_id):
        raise PermissionDenied(NOT_AN_ADMIN)
    try:
        return agents.get(agent_id)
    except agents.UnknownAgent:
        raise RuleNotFound(0) from None


def _request(agent: Agent, access: Access, terms: RuleTerms) -> RuleRequest:
    return agent.rule_request(
        terms.tool_name,
        route=terms.route,
        created_by=access.username,
        condition=terms.condition,
        reason=terms.reason,
        position=terms.position,
    )


def add_rule(access: Access, agent_id: str, terms: RuleTerms) -> Rule:
    """Make a rule: ``PermissionDenied`` (not an admin of the agent), ``InvalidRule`` (bad terms)."""
    agent = _agent_to_manage(access, agent_id)
    made: Rule = async_to_sync(agent.add_rule)(_request(agent, access, terms))
    return made


def _row_to_manage(access: Access, rule_id: int) -> tuple[RoutingRule, Agent]:
    row = RoutingRule.objects.filter(pk=rule_id).first()
    if row is None or row.agent_id not in access.agent_ids:
        raise RuleNotFound(rule_id)
    return row, _agent_to_manage(access, row.agent_id)


def change_rule(access: Access, rule_id: int, terms: RuleTerms) -> Rule:
    """New terms for a rule (its tool stays): ``RuleNotFound``, ``PermissionDenied``, ``InvalidRule``."""
    row, agent = _row_to_manage(access, rule_id)
    if terms.tool_name != row.tool_name:
        raise InvalidRule("A rule stays with its tool: delete it and make one for the other tool")
    changed: Rule = async_to_sync(agent.change_rule)(rule_id, _request(agent, access, terms))
    return changed


def delete_rule(access: Access, rule_id: int) -> Rule:
    """Delete a rule at once: it routes no call afterwards. ``RuleNotFound``, ``PermissionDenied``."""
    _, agent = _row_to_manage(access, rule_id)
    deleted: Rule = async_to_sync(agent.delete_rule)(rule_id, actor=access.username)
    return deleted


# -- tried against history before it is saved ------------------------------------------------------

#: How many of the tool's latest decided calls (in ``history.WINDOW``) a trial reads.
TRIAL_CALLS = 200


@dataclass(frozen=True)
class HistoryTrial:
    """What a rule's condition would have matched among the last ``calls`` decided calls of a tool."""

    calls: int
    matched: int
    declined: int
    edited: int
    #: Calls the condition could not be evaluated on (the rule would have left them to a person).
    errors: int = 0
    #: Why the rule cannot be kept at all ("" when it can).
    invalid: str = ""


def try_rule(access: Access, agent_id: str, terms: RuleTerms) -> HistoryTrial:
    """The rule form's "Try": the terms checked as saving would check them (``invalid`` says why they
    could not be kept), then its condition tried on the tool's decided history by the trial grants use
    (``history.trial``: audit rows, the bounded evaluator, the tool's defaults). Saves nothing."""
    agent = _agent_to_manage(access, agent_id)
    try:
        request = _request(agent, access, terms)
    except InvalidRule as exc:
        return HistoryTrial(calls=0, matched=0, declined=0, edited=0, invalid=str(exc))
    tried = history.trial(
        history.Terms(agent_id=agent_id, tool_name=terms.tool_name, condition=request.condition),
        limit=TRIAL_CALLS,
    )
    return HistoryTrial(
        calls=tried.considered,
        matched=tried.matched,
        declined=tried.declined,
        edited=tried.edited,
        errors=tried.unevaluable,
    )
