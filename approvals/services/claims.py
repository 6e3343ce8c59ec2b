"""Claims: "I'm on it" on a parked call, and the warning a decision on someone else's claim gets.

A claim is a courtesy between reviewers, not a lock: it never blocks a decision, it only makes the
dashboard ask "decide anyway?" first (``claim_warning``). It lapses after ``CALL_CLAIM_SECONDS``
unless its holder renews it (claiming again). Each change is announced (ids only) so open pages
refetch the card.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents_runtime import RunNotFound, escalated
from approvals import live
from approvals.models import CallClaim, ParkedCallRecord
from approvals.policy import DECIDE_PERMISSION, AgentAccess


class ClaimRefused(Exception):
    """The call is not waiting, or someone else holds it (``holder``)."""

    def __init__(self, message: str, *, holder: CallClaim | None = None) -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class ClaimChange:
    claim: CallClaim | None
    message: str


def _duration() -> timedelta:
    return timedelta(seconds=int(getattr(settings, "CALL_CLAIM_SECONDS", 300)))


def claim_call(access: AgentAccess, *, run_id: str, tool_call_id: str) -> ClaimChange:
    """Claim (or renew one's claim on) a waiting call the user may decide; refused while someone else
    holds it. A call that is not theirs (seen only for escalations: one not escalated to them) is
    refused as one that does not wait: it says nothing of the call."""
    who = access.access
    who.require(DECIDE_PERMISSION, to="claim tool calls")
    try:
        run = access.agent.get_suspended_run_sync(run_id)
    except RunNotFound:
        raise ClaimRefused("This run is not waiting any more.") from None
    call = next((c for c in run.tool_calls if c.tool_call_id == tool_call_id), None)
    if call is None or not access.decides(call):
        raise ClaimRefused("This call is not waiting any more.")
    now = timezone.now()
    with transaction.atomic():
        held = CallClaim.objects.select_for_update().filter(run_id=run_id, tool_call_id=tool_call_id).first()
        if held is not None and held.expires_at > now and held.user_id != who.user.pk:
            raise ClaimRefused(f"{held.username} is already on this call.", holder=held)
        if held is not None:
            held.delete()
        claim = CallClaim.objects.create(
            agent_id=access.agent.id,
            run_id=run_id,
            tool_call_id=tool_call_id,
            user=who.user,
            username=who.username,
            claimed_at=now,
            expires_at=now + _duration(),
        )
        _announce(claim.agent_id, run_id, tool_call_id, who.username, "claim", call.escalated_to)
    renewed = held is not None and held.user_id == who.user.pk and held.expires_at > now
    minutes = round(_duration().total_seconds() / 60)
    verb = "renewed" if renewed else "claimed"
    return ClaimChange(claim, f"You {verb} this call for {minutes} minutes.")


def release_claim(access: AgentAccess, *, run_id: str, tool_call_id: str) -> ClaimChange:
    """Give up one's own claim (someone else's stays)."""
    who = access.access
    who.require(DECIDE_PERMISSION, to="claim tool calls")
    with transaction.atomic():
        gone, _ = CallClaim.objects.filter(run_id=run_id, tool_call_id=tool_call_id, user=who.user).delete()
        if gone:
            escalated_to = _escalated_to(run_id, tool_call_id)
            _announce(access.agent.id, run_id, tool_call_id, who.username, "release", escalated_to)
    return ClaimChange(None, "You released this call." if gone else "You held no claim on this call.")


def claim_warning(run_id: str, tool_call_id: str, username: str) -> CallClaim | None:
    """Someone else's claim on the call that is still live (a decision asks for confirmation)."""
    return (
        CallClaim.objects.filter(run_id=run_id, tool_call_id=tool_call_id, expires_at__gt=timezone.now())
        .exclude(username=username)
        .first()
    )


def _escalated_to(run_id: str, tool_call_id: str) -> str | None:
    """The group the call was escalated to, if it was (one indexed read: a release has no call at
    hand, and a claim's row does not keep it)."""
    calls = ParkedCallRecord.objects.filter(run__run_id=run_id, tool_call_id=tool_call_id)
    group: str | None = calls.values_list("escalated_to", flat=True).first()
    return group


def _announce(
    agent_id: str, run_id: str, tool_call_id: str, actor: str, op: str, escalated_to: str | None
) -> None:
    # Who and what, as a decision's event says who decided: open cards say it at once (live-notes.js);
    # the cards of the group the call was escalated to too (``escalated_to``: ``live.deliver``).
    event = {
        "type": "call-claimed",
        "agent_id": agent_id,
        "run_id": run_id,
        "tool_call_id": tool_call_id,
        "actor": actor,
        "op": op,
        "escalated_to": escalated([escalated_to]),
    }
    transaction.on_commit(partial(live.announce, event), robust=True)
