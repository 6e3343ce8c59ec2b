"""Calls that wait, as notifications: a parked call joins each of its reviewers' open messages.

The runtime listener (``apps.compose``) hears ``run-suspended`` (calls parked: their agent's
deciders are told) and ``call-escalated`` (a call moved to a group: that group's members and the
agent's deciders are told).
Recording is a few writes in the process where the event happened, after the run's change was
committed; sending is a background task at the end of the message's collecting window, so neither
a slow mail server nor a burst of parked calls slows the run that parked.

Collecting: per recipient and channel, calls parked on one agent within ``NOTIFY_COLLAPSE_SECONDS``
of the first join one message ("each" mode); in "digest" mode everything of the user's window joins
one. Reminders and escalations collapse like "each" in both modes (a digest would come too late).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from channels.db import database_sync_to_async
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from agents_runtime import AgentRunToolCall, Preview, RunEvent, RunNotFound, Tool
from agents_runtime.store import CallKind
from approvals import agents
from approvals.cards.call import call_title, find_tool
from approvals.models import (
    Notification,
    NotificationCall,
    NotificationMode,
    NotificationPreference,
    ParkedCallRecord,
)
from approvals.notifications import options, recipients
from approvals.notifications.sending import schedule

logger = logging.getLogger(__name__)

Kind = Notification.Kind
#: The run events the listener is called for (``apps.compose``): calls parked, a call escalated.
EVENT_TYPES = ("run-suspended", "call-escalated")
Channel = Notification.Channel


async def on_run_event(event: RunEvent) -> None:
    """The runtime listener: record the notifications a parked or escalated call calls for."""
    if event.type not in EVENT_TYPES:
        return
    try:
        run = await agents.get(event.agent_id).get_suspended_run(event.run_id)
    except (RunNotFound, agents.UnknownAgent):
        return  # decided already
    if run.parent_run_id:
        return  # a sub-agent's inner run: its calls are told once, on the supervisor's run
    if event.type == "run-suspended":
        calls = [call_fields(c, event.agent_id) for c in run.tool_calls]
        await database_sync_to_async(notify)(Kind.PARKED, event.agent_id, event.run_id, calls)
        return
    escalated = [
        call_fields(c, event.agent_id) for c in run.tool_calls if c.tool_call_id == event.tool_call_id
    ]
    if escalated and escalated[0]["escalated_to"]:
        await database_sync_to_async(notify)(Kind.ESCALATED, event.agent_id, event.run_id, escalated)


def _preference(user: Any) -> NotificationPreference:
    try:
        preference: NotificationPreference = user.notification_preference
    except NotificationPreference.DoesNotExist:
        return NotificationPreference(user=user)  # the defaults
    return preference


def _preview_line(call: AgentRunToolCall | ParkedCallRecord) -> str:
    context = call.context
    stored = context.get("preview") if isinstance(context, dict) else getattr(context, "preview", None)
    preview = Preview.from_json(stored)
    return preview.summary() if preview is not None else ""


def _tool_of(call: AgentRunToolCall | ParkedCallRecord, agent_id: str) -> Tool | None:
    """The tool as it applies to the call, as its card reads it: a supervisor's mirror's is its
    sub-agent's (not a namesake's), an external agent's request brings its own title and schema;
    None for an agent no longer served (its calls read by the tool's name)."""
    try:
        return find_tool(agents.get(agent_id), call.tool_name, call)
    except agents.UnknownAgent:
        return None


def call_fields(call: AgentRunToolCall | ParkedCallRecord, agent_id: str) -> dict[str, Any]:
    """What a message keeps of a waiting call of ``agent_id`` (the runtime's view of it, or the
    store's row): its title as its card reads, among the rest."""
    if isinstance(call, AgentRunToolCall):
        approval = call.requires_approval
    else:
        approval = call.kind == CallKind.APPROVAL
    tool = _tool_of(call, agent_id)
    title = call_title(
        tool, call.tool_name, args=call.args, suspend_payload=call.suspend_payload, approval=approval
    )
    return {
        "tool_call_id": call.tool_call_id,
        "tool_name": call.tool_name,
        "title": title[: NotificationCall._meta.get_field("title").max_length],
        "args": call.args if call.args is not None else call.suspend_payload,
        "preview": _preview_line(call),
        "expires_at": call.expires_at,
        "escalated_to": call.escalated_to or "",
    }


def notify(kind: str, agent_id: str, run_id: str, calls: Sequence[dict[str, Any]]) -> int:
    """Add ``calls`` (of one run: ``NotificationCall`` fields) to the messages of everyone who may
    decide them; how many messages they joined or opened."""
    if not calls:
        return 0
    group = str(calls[0]["escalated_to"])
    if kind == Kind.PARKED:
        users = recipients.deciders_of(agent_id)
    else:
        # An escalation is told to everyone who can act on it now: the group it moved to, and
        # those who could decide it all along (its deadline passed, not their right to it).
        users = recipients.deciders_of_call(agent_id, group)
    rows = [{"agent_id": agent_id, "run_id": run_id, **call} for call in calls]
    try:
        return record(kind, agent_id, rows, users.select_related("notification_preference"))
    except Exception:
        logger.exception("Notifications of %s calls of run %s could not be recorded", kind, run_id)
        return 0


def record(kind: str, agent_id: str, calls: list[dict[str, Any]], users: Iterable[Any]) -> int:
    """Per user and channel they asked for, the calls join an open message or open one."""
    joined = 0
    with transaction.atomic():
        for user in users:
            preference = _preference(user)
            if preference.mode == NotificationMode.OFF:
                continue
            digest = kind == Kind.PARKED and preference.mode == NotificationMode.DIGEST
            window = preference.digest_minutes * 60.0 if digest else options.collapse_seconds()
            channels = [Channel.EMAIL] if preference.email and user.email else []
            channels += [Channel.CHAT] if preference.chat_url else []
            for channel in channels:
                _join(user, channel, kind, "" if digest else agent_id, calls, window)
                joined += 1
    return joined


def _join(user: Any, channel: str, kind: str, key: str, calls: list[dict[str, Any]], window: float) -> None:
    open_ = Notification.objects.filter(
        recipient=user,
        channel=channel,
        kind=kind,
        agent_id=key,
        status=Notification.Status.PENDING,
        attempts=0,
    )
    for _ in range(3):
        try:
            with transaction.atomic():  # (a savepoint: a lost race to open one is tried again)
                # Conditional, so a sender that claimed it meanwhile (status "sending") is not
                # joined: its message is built already. The row lock orders the two.
                pk = open_.values_list("pk", flat=True).first()
                if pk is not None and open_.filter(pk=pk).update(call_count=F("call_count") + len(calls)):
                    _add(pk, calls)
                    return
                now = timezone.now()
                notification = Notification.objects.create(
                    recipient=user,
                    channel=channel,
                    kind=kind,
                    agent_id=key,
                    call_count=len(calls),
                    created_at=now,
                    next_attempt_at=now + timedelta(seconds=window),
                )
                _add(notification.pk, calls)
                transaction.on_commit(partial(schedule, notification.pk, window), robust=True)
                return
        except IntegrityError:
            continue  # another park opened it first: join that one
    logger.warning("Could not record a %s notification for user %s", kind, user.pk)


def _add(notification_id: int, calls: list[dict[str, Any]]) -> None:
    NotificationCall.objects.bulk_create(
        [NotificationCall(notification_id=notification_id, **call) for call in calls]
    )
