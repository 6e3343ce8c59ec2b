"""Grants at park time: approve at once each parked call a live standing grant covers.

``check_grants`` runs before a run's suspension is stored: it finds the grants whose conditions hold
for each call, and writes into a call's context the grants whose conditions could not be evaluated
(those do not apply). ``apply_grants`` runs once the suspension is stored and before anyone is told
it waits, so a granted call is never announced (no ``run-suspended`` event, no notification) and,
when every call it waited on was granted, the run goes straight on. Each approval goes through the
store's atomic ``decide`` step, which takes the grant's use and writes the audit row ("approved by
grant #N of <user>") with the decision: a grant revoked or used up meanwhile approves nothing
(``GrantUnavailable``), and a reviewer who decided the call in the moment it was visible simply wins.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from datetime import datetime

from ._context import AgentContext
from ._decisions import decision_rule
from ._pydantic import as_utc
from .conditions import InvalidCondition, check_against_schema
from .errors import DecisionRefused, RunAlreadyDecided, RunNotFound, ToolCallNotSuspended
from .grants import (
    Grant,
    GrantNotFound,
    GrantRequest,
    GrantScope,
    GrantStore,
    GrantUnavailable,
    InvalidGrant,
    checked_request,
    compile_condition,
    condition_verdict,
)
from .policy import DecisionRequest, Origin
from .store import CallKind, DecisionAction, DecisionReceipt, GrantFailure, ParkedCall, StoredRun, Suspension

logger = logging.getLogger("agents_runtime")


def grant_store(ctx: AgentContext) -> GrantStore | None:
    store = ctx.store
    return store if isinstance(store, GrantStore) else None


def request_for(
    ctx: AgentContext,
    tool_name: str,
    *,
    scope: GrantScope | str,
    created_by: str,
    thread_id: str | None = None,
    resource_id: str | None = None,
    expires_at: datetime | None = None,
    max_uses: int | None = None,
    condition: str = "",
    from_run_id: str | None = None,
    from_tool_call_id: str | None = None,
    covers_risky: bool = False,
) -> GrantRequest:
    """``Agent.grant_request``: a grant for ``agent``'s tool, checked but not kept. ``thread_id`` /
    ``resource_id``: the scope's; ``condition``: CEL over the arguments; ``covers_risky``: it may
    approve calls the tool marks risky too (else it never does). ``InvalidGrant`` for a tool
    that forbids grants or needs several approvals, a store that keeps no grants, a scope without
    its thread or end user, a grant with no end (neither ``expires_at`` nor ``max_uses``), a bad
    condition (not CEL, too costly to bound, or naming an argument the tool does not have)."""
    try:
        checked_scope = GrantScope(scope)
    except ValueError:
        raise InvalidGrant(f"Unknown grant scope {scope!r}") from None
    return checked(
        ctx,
        GrantRequest(
            agent_id=ctx.agent_id,
            tool_name=tool_name,
            scope=checked_scope,
            scope_value={GrantScope.THREAD: thread_id, GrantScope.RESOURCE: resource_id}.get(checked_scope),
            created_by=created_by,
            created_at=ctx.clock(),
            expires_at=as_utc(expires_at, end_of_day=False),
            max_uses=max_uses,
            condition=condition.strip(),
            from_run_id=from_run_id,
            from_tool_call_id=from_tool_call_id,
            covers_risky=covers_risky,
        ),
    )


def checked(ctx: AgentContext, request: GrantRequest) -> GrantRequest:
    """``request`` if the agent can keep it, else ``InvalidGrant`` saying why: every grant passes here
    before a store keeps it, however it was made (``request_for``, or a request built by hand and
    handed to ``add``)."""
    if request.agent_id != ctx.agent_id:
        raise InvalidGrant(f"The grant is not one agent {ctx.agent_id!r} can keep")
    spec = ctx.find_tool(request.tool_name)
    if spec is None:
        raise InvalidGrant(f"Agent {ctx.agent_id!r} has no tool {request.tool_name!r}")
    if not spec.takes_grants:
        why = "needs several approvals" if spec.approvals > 1 else "does not allow grants"
        raise InvalidGrant(f"Tool {request.tool_name!r} {why}: each call waits for a person")
    if grant_store(ctx) is None:
        raise InvalidGrant(f"The store of agent {ctx.agent_id!r} keeps no grants")
    request = checked_request(request)
    compiled = compile_condition(request.condition)
    if compiled is not None:
        # A condition naming an argument the tool lacks would never hold: say so now, not never.
        try:
            check_against_schema(compiled, spec.parameters_json_schema)
        except InvalidCondition as exc:
            raise InvalidGrant(str(exc)) from None
    return request


async def add(ctx: AgentContext, request: GrantRequest) -> Grant:
    """``Agent.add_grant``."""
    request = checked(ctx, request)
    store = grant_store(ctx)
    assert store is not None  # (checked)
    grant: Grant = await ctx.call(store.add_grant, request)
    return grant


async def revoke(ctx: AgentContext, grant_id: int, *, actor: str) -> Grant:
    """``Agent.revoke_grant``: only a grant of this agent."""
    store = grant_store(ctx)
    grant = None if store is None else await ctx.call(store.get_grant, grant_id)
    if store is None or grant is None or grant.agent_id != ctx.agent_id:
        raise GrantNotFound(grant_id)
    revoked: Grant = await ctx.call(store.revoke_grant, grant_id, actor=actor, at=ctx.clock())
    return revoked


def _grantable(ctx: AgentContext, call: ParkedCall) -> bool:
    if call.kind != CallKind.APPROVAL or call.delegation is not None or call.decision is not None:
        return False
    # A call interrupted after its tool started needs a person to confirm running it again.
    if call.tool_started_at is not None:
        return False
    spec = ctx.find_tool(call.tool_name)
    return spec is not None and spec.takes_grants


#: The grants whose conditions hold for each call a run parks, by call id, in the order to try them.
Covering = dict[str, list[Grant]]


async def check_grants(
    ctx: AgentContext, suspension: Suspension, skip: frozenset[str] = frozenset()
) -> tuple[Suspension, Covering]:
    """The live grants that cover each call of ``suspension``, before it is stored (the calls in
    ``skip`` aside: a routing rule decides them, or sent them to several approvals or to a person).

    A grant whose condition cannot be evaluated on a call's arguments (it raises, or is over its
    evaluation budget) does not apply: the call waits for a person, and its context says which grant
    failed and why (its card shows it; the grant's record counts it for the queue-health page).
    Nothing here raises: a grant check that breaks lets nothing through and the run is announced.
    """
    store = grant_store(ctx)
    # A sub-agent's inner run is decided through its supervisor's card, where its calls show.
    if store is None or suspension.parent_run_id is not None:
        return suspension, {}
    covering: Covering = {}
    calls = list(suspension.calls)
    for index, call in enumerate(calls):
        if call.tool_call_id in skip or not _grantable(ctx, call):
            continue
        try:
            grants, failures = await _covering(ctx, store, suspension, call)
        except Exception:
            logger.exception(
                "Run %s: checking the grants of call %s failed", suspension.run_id, call.tool_call_id
            )
            continue
        if grants:
            covering[call.tool_call_id] = grants
        if failures:
            context = {**(call.context or {}), "grant_failures": [asdict(f) for f in failures]}
            calls[index] = replace(call, context=context)
            await _note_failures(ctx, store, failures)
    return replace(suspension, calls=tuple(calls)), covering


async def _covering(
    ctx: AgentContext, store: GrantStore, run: Suspension, call: ParkedCall
) -> tuple[list[Grant], list[GrantFailure]]:
    at = ctx.clock()
    live = await ctx.call(
        store.live_grants,
        ctx.agent_id,
        call.tool_name,
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        at=at,
    )
    spec = ctx.find_tool(call.tool_name)
    if spec is None or not live:
        return [], []
    args = spec.args_with_defaults(call.args)
    grants, failures = [], []
    for grant in live:
        verdict = condition_verdict(grant.condition, args)
        if verdict.error is not None:
            failures.append(GrantFailure(grant.id, grant.label, verdict.error))
        elif verdict.holds:
            grants.append(grant)
    return grants, failures


async def _note_failures(ctx: AgentContext, store: GrantStore, failures: list[GrantFailure]) -> None:
    for failure in failures:
        try:
            await ctx.call(
                store.note_condition_failure, failure.grant_id, error=failure.error, at=ctx.clock()
            )
        except Exception:
            logger.exception("Grant #%s: its condition's failure could not be recorded", failure.grant_id)


async def apply_grants(ctx: AgentContext, run: StoredRun, covering: Covering) -> tuple[StoredRun, int | None]:
    """The run once the grants ``check_grants`` found approved its calls, and the version the last of
    those approvals claimed it at (None: it still waits on someone). A grant revoked or used up since
    approves nothing (the store checks it in the decision's atomic step); the next one is tried."""
    claimed: int | None = None
    for call in run.undecided:
        for grant in covering.get(call.tool_call_id, ()):
            try:
                receipt = await _approve_by_grant(ctx, run.run_id, call, grant)
            except (RunAlreadyDecided, ToolCallNotSuspended, RunNotFound):
                # A reviewer decided it in the moment it was visible: no other grant is tried.
                logger.info("Run %s: call %s was decided before a grant", run.run_id, call.tool_call_id)
                break
            except Exception:
                # The store broke while a grant approved: the call waits for a person, announced.
                logger.exception(
                    "Run %s: grant #%s could not approve call %s", run.run_id, grant.id, call.tool_call_id
                )
                break
            if receipt is None:
                continue
            run, claimed = receipt.run, receipt.claimed_version
            await ctx.notify(
                "call-decided",
                run.run_id,
                tool_call_id=call.tool_call_id,
                action=DecisionAction.APPROVE,
                actor=grant.label,
            )
            break
    return run, claimed


async def _approve_by_grant(
    ctx: AgentContext, run_id: str, call: ParkedCall, grant: Grant
) -> DecisionReceipt | None:
    """The grant's approval through the one door's rules (its maker's rights, risky calls,
    separation of duties: ``agents_runtime.policy``), recorded with one use of the grant; None when
    the grant may not or cannot approve it (revoked or used up since it was read)."""
    request = DecisionRequest(
        run_id,
        call.tool_call_id,
        DecisionAction.APPROVE,
        actor=grant.created_by,
        origin=Origin.GRANT,
        grant=grant,
    )
    try:
        receipt: DecisionReceipt = await ctx.call(
            ctx.store.decide, agent_id=ctx.agent_id, run_id=run_id, rule=decision_rule(ctx, request)
        )
    except DecisionRefused as refused:
        logger.info("Run %s: %s did not approve call %s: %s", run_id, grant.label, call.tool_call_id, refused)
        return None
    except GrantUnavailable:
        return None  # revoked or used up since it was read: the next grant, or a person
    return receipt
