"""Standing grants from the dashboard: "approve and allow" on a card, and revoking.

A grant is made only together with the approval of the call it was offered on, and only after that
approval took effect: terms that cannot be kept (a tool that forbids grants, a condition that is not
an expression) refuse both before anything is decided. Who may revoke: whoever made the grant, and
holders of ``approvals.manage_grants`` (the Admins group). The runtime does the rest: it approves
covered calls as they park, inside its store's atomic step (``agents_runtime.grants``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from agents_runtime import DecisionRequest, Grant, GrantNotFound, GrantScope, RunNotFound, required_approvals
from agents_runtime.store import DecisionAction, Outcome
from approvals import agents
from approvals.models import GrantRecord
from approvals.policy import MANAGE_GRANTS_PERMISSION, Access, AgentAccess, grant_refusal, grants_in_sight
from approvals.services.decisions import DecisionOutcome, decide, same_json

#: Why "approve and allow" refuses edited arguments: a grant lets later calls through with the
#: model's arguments, which the reviewer just showed they did not accept as they were.
EDITS_AND_GRANT = (
    "Nothing was decided: you edited the arguments, and a standing grant would let later calls "
    "through with the model's arguments as proposed. Approve with your edits (no grant), or allow "
    "the call as the model proposed it."
)
#: What "approve and allow" says when the approval was one vote of several.
ONE_VOTE = (
    "No standing grant: a rule asks for several approvals of this call, so yours is one vote, and "
    "allowing such calls ahead of time is not one person's to give."
)


@dataclass(frozen=True)
class GrantTerms:
    """What a reviewer chose on the card: for whom, for how long, how many times, for which arguments."""

    scope: GrantScope
    lasts: timedelta | None
    max_uses: int | None
    condition: str = ""
    #: Also for calls the tool marks risky (without it those always wait for a person).
    covers_risky: bool = False


def describe(grant: Grant) -> str:
    """ "refund for this thread, 3 uses, until 14:05 UTC, when amount_cents <= 10000 (grant #4)"."""
    parts = [f"{grant.tool_name} for {GrantScope(grant.scope).label}"]
    if grant.max_uses is not None:
        parts.append(f"{grant.max_uses} use{'s' if grant.max_uses != 1 else ''}")
    if grant.expires_at is not None:
        parts.append(f"until {timezone.localtime(grant.expires_at):%Y-%m-%d %H:%M %Z}")
    if grant.condition:
        parts.append(f"when {grant.condition}")
    return f"{', '.join(parts)} (grant #{grant.id})"


def approve_and_allow(
    access: AgentAccess, decision: DecisionRequest, *, terms: GrantTerms
) -> tuple[DecisionOutcome, Grant | None]:
    """Approve the call through the one door, then allow its tool on these terms from now on.

    ``InvalidGrant`` (nothing decided) when the terms cannot be kept. The grant is made only when
    the approval decided the call alone; a lost race, a refusal or a vote of several (the last one
    too, which decides the call) makes none. Edited arguments that differ from the model's are
    refused (``refused``, nothing decided): never dropped for the model's.
    """
    agent = access.agent
    try:
        shown = agent.get_suspended_run_sync(decision.run_id)
    except RunNotFound:
        shown = None
    wanted = decision.tool_call_id
    call = None if shown is None else next((c for c in shown.tool_calls if c.tool_call_id == wanted), None)
    if shown is None or call is None:
        # Nothing to allow: the door says what became of the call (decided, gone).
        return decide(access, decision), None
    if decision.edited_args is not None and not same_json(decision.edited_args, call.args):
        return _refused(access, shown, call.tool_name, call.tool_call_id, EDITS_AND_GRANT), None
    refusal = grant_refusal(access)
    if refusal:
        return _refused(access, shown, call.tool_name, call.tool_call_id, refusal), None
    request = agent.grant_request(
        call.tool_name,
        scope=terms.scope,
        created_by=access.access.username,
        thread_id=shown.thread_id,
        resource_id=shown.resource_id,
        expires_at=None if terms.lasts is None else timezone.now() + terms.lasts,
        max_uses=terms.max_uses,
        condition=terms.condition,
        from_run_id=shown.run_id,
        from_tool_call_id=call.tool_call_id,
        covers_risky=terms.covers_risky,
    )
    # Counted as the votes rule counts it, before deciding: the vote that completes the approvals
    # decides the call, and is a vote still.
    several = required_approvals(call, agent.find_tool(call.tool_name, call.via_agent_id)) > 1
    # Taken at once, never held for an undo window: the grant is made only on an approval taken.
    outcome = decide(access, decision, hold=False)
    if not outcome.took_effect:
        return outcome, None
    if several or outcome.status == Outcome.VOTE_RECORDED:
        # The call needs several people: theirs is not one person's to give ahead of time.
        return replace(outcome, grant_note=ONE_VOTE), None
    grant: Grant = async_to_sync(agent.add_grant)(request)
    return replace(outcome, grant_note=f"Allowed from now on: {describe(grant)}."), grant


def allow(access: AgentAccess, tool_name: str, *, terms: GrantTerms, scope_value: str = "") -> Grant:
    """A grant made without a call to approve (an accepted suggestion): the same checks as
    "approve and allow" (``grant_refusal``, then the runtime's ``grant_request``), and its making
    in the audit log. ``PermissionDenied`` for a user who may not grant, ``InvalidGrant`` for
    terms that cannot be kept (nothing made)."""
    refusal = grant_refusal(access)
    if refusal:
        raise PermissionDenied("You may not make standing grants for this agent's calls.")
    scope = GrantScope(terms.scope)
    request = access.agent.grant_request(
        tool_name,
        scope=scope,
        created_by=access.access.username,
        thread_id=scope_value if scope == GrantScope.THREAD else None,
        resource_id=scope_value if scope == GrantScope.RESOURCE else None,
        expires_at=None if terms.lasts is None else timezone.now() + terms.lasts,
        max_uses=terms.max_uses,
        condition=terms.condition,
        covers_risky=terms.covers_risky,
    )
    grant: Grant = async_to_sync(access.agent.add_grant)(request)
    return grant


def _refused(
    access: AgentAccess, run: Any, tool_name: str, tool_call_id: str, message: str
) -> DecisionOutcome:
    return DecisionOutcome(
        status=Outcome.REFUSED,
        action=DecisionAction.APPROVE,
        agent_id=access.agent.id,
        run_id=run.run_id,
        tool_call_id=tool_call_id,
        decided_by=access.access.username,
        decided_at=timezone.now(),
        tool_name=tool_name,
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        message=message,
    )


def may_revoke(access: Access, row: GrantRecord) -> bool:
    """Its maker, or one who manages grants for its agent (``policy.grants_in_sight``)."""
    seen = grants_in_sight(access)
    if seen is not None and row.agent_id not in seen:
        return False
    return bool(access.user.has_perm(MANAGE_GRANTS_PERMISSION)) or row.created_by_name == access.username


def revoke(access: Access, grant_id: int) -> Grant | None:
    """Revoke a grant at once: no call is approved by it afterwards. ``GrantNotFound`` if the user
    cannot see it, ``PermissionDenied`` if it is someone else's and they do not manage grants. None
    for a grant of an agent no longer served (revoked in the database all the same)."""
    row = GrantRecord.objects.filter(pk=grant_id).first()
    seen = grants_in_sight(access)
    if row is None or (seen is not None and row.agent_id not in seen):
        raise GrantNotFound(grant_id)
    if not may_revoke(access, row):
        raise PermissionDenied("Only the reviewer who made this grant, or an admin, may revoke it.")
    try:
        agent = agents.get(row.agent_id)
    except agents.UnknownAgent:
        GrantRecord.objects.filter(pk=grant_id, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_by_name=access.username
        )
        return None
    revoked: Grant = async_to_sync(agent.revoke_grant)(grant_id, actor=access.username)
    return revoked
