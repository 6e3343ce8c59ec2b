"""Routing rules at park time, beside grants (``_grants``), and keeping them.

``route_calls`` runs before a run's suspension is stored: for each call a person would decide, the
tool's rules (``RuleStore.rules_for``) are tried in order on its arguments. A call routed to ``two``
has the number of approvals it needs written into its context (the votes rule reads it there); one
whose rule could not be evaluated has the failure written there (its card says so). ``apply_routes``
runs once the suspension is stored, before anyone is told it waits: each ``allow`` and ``deny`` goes
through the store's atomic ``decide`` step as a decision of ``Origin.RULE`` (its maker's rights are
the host's to check), so the audit row ("rule #N of <user>") and exactly-once hold, and a reviewer
who decided the call in the moment it was visible simply wins. Grants apply only to calls no rule
routed elsewhere than ``one``.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ._context import AgentContext
from ._decisions import decision_rule
from .conditions import InvalidCondition, check_against_schema, compile_condition
from .errors import DecisionRefused, RunAlreadyDecided, RunNotFound, ToolCallNotSuspended
from .policy import DecisionRequest, Origin
from .routing import (
    MAX_REASON_LENGTH,
    MAX_ROUTED_APPROVALS,
    REQUIRED_APPROVALS_KEY,
    ROUTED_BY_KEY,
    RULE_FAILURES_KEY,
    InvalidRule,
    Route,
    Rule,
    RuleNotFound,
    RuleRequest,
    RuleStore,
    first_match,
)
from .store import CallKind, DecisionAction, DecisionReceipt, ParkedCall, StoredRun, Suspension
from .untrusted import clean_text

logger = logging.getLogger("agents_runtime")


def rule_store(ctx: AgentContext) -> RuleStore | None:
    store = ctx.store
    return store if isinstance(store, RuleStore) else None


def request_for(
    ctx: AgentContext,
    tool_name: str,
    *,
    route: Route | str,
    created_by: str,
    condition: str = "",
    reason: str = "",
    position: int | None = None,
) -> RuleRequest:
    """``Agent.rule_request``: a rule for the agent's tool, checked but not kept (``checked``)."""
    try:
        checked_route = Route(route)
    except ValueError:
        raise InvalidRule(f"Unknown route {route!r}: one of allow, one, two, deny") from None
    return checked(
        ctx,
        RuleRequest(
            agent_id=ctx.agent_id,
            tool_name=tool_name,
            route=checked_route,
            created_by=created_by,
            created_at=ctx.clock(),
            condition=condition.strip(),
            reason=reason.strip(),
            position=position,
        ),
    )


def checked(ctx: AgentContext, request: RuleRequest) -> RuleRequest:
    """``request`` if the agent can keep it, else ``InvalidRule`` saying why."""
    if request.agent_id != ctx.agent_id:
        raise InvalidRule(f"The rule is not one agent {ctx.agent_id!r} can keep")
    spec = ctx.find_tool(request.tool_name)
    if spec is None:
        raise InvalidRule(f"Agent {ctx.agent_id!r} has no tool {request.tool_name!r}")
    if rule_store(ctx) is None:
        raise InvalidRule(f"The store of agent {ctx.agent_id!r} keeps no routing rules")
    route = Route(request.route)
    if route == Route.ALLOW and not spec.takes_grants:
        # A rule never lowers what the tool asks for: several approvals, or a person every time.
        why = f"needs {spec.approvals} approvals" if spec.approvals > 1 else "does not allow grants"
        raise InvalidRule(f"Tool {request.tool_name!r} {why}: a rule cannot let its calls through")
    if request.position is not None and (type(request.position) is not int or request.position < 1):
        raise InvalidRule("A rule's position is a whole number of at least 1")
    if len(request.reason) > MAX_REASON_LENGTH:
        raise InvalidRule(f"A rule's reason is at most {MAX_REASON_LENGTH} characters")
    try:
        compiled = compile_condition(request.condition)
        if compiled is not None:
            check_against_schema(compiled, spec.parameters_json_schema)
    except InvalidCondition as exc:
        raise InvalidRule(str(exc)) from None
    return replace(request, route=route, reason=clean_text(request.reason))


async def add(ctx: AgentContext, request: RuleRequest) -> Rule:
    """``Agent.add_rule``."""
    request = checked(ctx, request)
    store = rule_store(ctx)
    assert store is not None  # (checked)
    rule: Rule = await ctx.call(store.add_rule, request)
    return rule


async def _own(ctx: AgentContext, rule_id: int) -> RuleStore:
    store = rule_store(ctx)
    rule = None if store is None else await ctx.call(store.get_rule, rule_id)
    if store is None or rule is None or rule.agent_id != ctx.agent_id:
        raise RuleNotFound(rule_id)
    return store


async def change(ctx: AgentContext, rule_id: int, request: RuleRequest) -> Rule:
    """``Agent.change_rule``: only a rule of this agent, for the same tool."""
    store = await _own(ctx, rule_id)
    request = checked(ctx, request)
    rule: Rule = await ctx.call(store.change_rule, rule_id, request)
    return rule


async def delete(ctx: AgentContext, rule_id: int, *, actor: str) -> Rule:
    """``Agent.delete_rule``: only a rule of this agent."""
    store = await _own(ctx, rule_id)
    rule: Rule = await ctx.call(store.delete_rule, rule_id, actor=actor, at=ctx.clock())
    return rule


async def rules(ctx: AgentContext, tool_name: str | None = None) -> list[Rule]:
    """``Agent.rules``: the agent's rules, by tool (in its tools' order), each tool's in order."""
    store = rule_store(ctx)
    if store is None:
        return []
    names = list(ctx.tools) if tool_name is None else [tool_name]
    found: list[Rule] = []
    for name in names:
        found.extend(await ctx.call(store.rules_for, ctx.agent_id, name))
    return found


def _routable(call: ParkedCall) -> bool:
    # A call interrupted after its tool started needs a person to confirm running it again.
    return (
        call.kind == CallKind.APPROVAL
        and call.delegation is None
        and call.decision is None
        and call.tool_started_at is None
    )


#: The rule that lets through or declines each call a run parks, by call id.
Routed = dict[str, Rule]


async def route_calls(ctx: AgentContext, suspension: Suspension) -> tuple[Suspension, Routed, frozenset[str]]:
    """The suspension with its calls' routes written into their contexts, the ``allow``/``deny``
    rules to apply once it is stored, and the calls grants must leave alone (routed elsewhere than
    ``one``, or whose routing failed). Never raises: routing that breaks leaves the calls to people."""
    store = rule_store(ctx)
    if store is None or suspension.parent_run_id is not None:
        return suspension, {}, frozenset()
    routed: Routed = {}
    held: set[str] = set()
    calls = list(suspension.calls)
    for index, call in enumerate(calls):
        if not _routable(call):
            continue
        try:
            spec = ctx.find_tool(call.tool_name)
            tool_rules = await ctx.call(store.rules_for, ctx.agent_id, call.tool_name)
            if spec is None or not tool_rules:
                continue
            match = first_match(tool_rules, spec.args_with_defaults(call.args))
        except Exception:
            logger.exception("Run %s: routing call %s failed", suspension.run_id, call.tool_call_id)
            held.add(call.tool_call_id)  # nothing automatic when the rules could not be read
            continue
        context = dict(call.context or {})
        if match.failed is not None:
            held.add(call.tool_call_id)
            failure = {"rule_id": match.failed.id, "rule": match.failed.label, "error": match.error}
            context[RULE_FAILURES_KEY] = [failure]
        elif match.rule is not None:
            rule = match.rule
            context[ROUTED_BY_KEY] = rule.label
            if rule.route in (Route.ALLOW, Route.DENY):
                routed[call.tool_call_id] = rule
                held.add(call.tool_call_id)
            elif rule.route == Route.TWO:
                context[REQUIRED_APPROVALS_KEY] = MAX_ROUTED_APPROVALS
                held.add(call.tool_call_id)
        calls[index] = replace(call, context=context)
    return replace(suspension, calls=tuple(calls)), routed, frozenset(held)


async def apply_routes(ctx: AgentContext, run: StoredRun, routed: Routed) -> tuple[StoredRun, int | None]:
    """The run once its ``allow`` and ``deny`` rules decided their calls, and the version the last of
    those decisions claimed it at (None: it still waits on someone)."""
    claimed: int | None = None
    for call in run.undecided:
        rule = routed.get(call.tool_call_id)
        if rule is None:
            continue
        receipt = await _decide_by_rule(ctx, run.run_id, call, rule)
        if receipt is None:
            continue
        run, claimed = receipt.run, receipt.claimed_version
        decision = receipt.call.decision
        await ctx.notify(
            "call-decided",
            run.run_id,
            tool_call_id=call.tool_call_id,
            action=decision.action if decision is not None else DecisionAction.APPROVE,
            actor=rule.label,
        )
    return run, claimed


def rule_reason(rule: Rule) -> str:
    """What the record (and, for a denial, the model) is told of a rule's decision."""
    if rule.route == Route.DENY:
        said = f"Declined by {rule.label}"
        return f"{said}: {rule.reason}" if rule.reason else said
    return f"Allowed by {rule.label}"


async def _decide_by_rule(
    ctx: AgentContext, run_id: str, call: ParkedCall, rule: Rule
) -> DecisionReceipt | None:
    action = DecisionAction.DECLINE if rule.route == Route.DENY else DecisionAction.APPROVE
    request = DecisionRequest(
        run_id,
        call.tool_call_id,
        action,
        actor=rule.label,
        origin=Origin.RULE,
        reason=rule_reason(rule),
        rule=rule,
    )
    try:
        receipt: DecisionReceipt = await ctx.call(
            ctx.store.decide, agent_id=ctx.agent_id, run_id=run_id, rule=decision_rule(ctx, request)
        )
    except (RunAlreadyDecided, ToolCallNotSuspended, RunNotFound):
        logger.info("Run %s: call %s was decided before %s", run_id, call.tool_call_id, rule.label)
        return None
    except DecisionRefused as refused:
        logger.info("Run %s: %s did not decide call %s: %s", run_id, rule.label, call.tool_call_id, refused)
        return None
    except Exception:
        # The store broke: the call waits for a person, announced.
        logger.exception("Run %s: %s could not decide call %s", run_id, rule.label, call.tool_call_id)
        return None
    return receipt
