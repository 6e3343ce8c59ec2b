"""Reminders before a deadline: a call still waiting ``NOTIFY_REMINDER_BEFORE_SECONDS`` before it
expires is brought to its deciders once (once per deadline: an extended one is reminded of again).

Run by the expiry sweep (``approvals.tasks``) each second: one probe of the undecided-deadline
index. ``CallReminder`` rows, written before the message is recorded, make it once even with
several sweepers; a call that parked already this close to its deadline is not reminded of (its
parked message says the same).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from approvals.models import CallReminder, Notification, ParkedCallRecord
from approvals.notifications import options
from approvals.notifications.events import call_fields, notify

#: Reminded-of deadlines are kept this long after they passed, then forgotten.
_KEEP = timedelta(days=1)


def remind_due(now: datetime | None = None) -> int:
    """Record the reminders due at ``now``; how many calls were reminded of."""
    before = timedelta(seconds=options.reminder_before_seconds())
    if not before:
        return 0
    now = now or timezone.now()
    reminded = CallReminder.objects.filter(
        run_id=OuterRef("run__run_id"),
        tool_call_id=OuterRef("tool_call_id"),
        expires_at=OuterRef("expires_at"),
    )
    due = (
        ParkedCallRecord.objects.undecided()
        .filter(expires_at__gt=now, expires_at__lte=now + before, run__parent_run_id__isnull=True)
        .exclude(Exists(reminded))
        .select_related("run")
        .only(
            "run__run_id",
            "run__agent_id",
            "run__suspended_at",
            "tool_call_id",
            "tool_name",
            "kind",
            "args",
            "suspend_payload",
            "context",
            "delegation",
            "expires_at",
            "escalated_to",
        )[:200]
    )
    count = 0
    for call in due:
        if call.expires_at is None:
            continue
        try:
            with transaction.atomic():
                CallReminder.objects.create(
                    run_id=call.run.run_id, tool_call_id=call.tool_call_id, expires_at=call.expires_at
                )
        except IntegrityError:
            continue  # another sweeper has it
        if call.expires_at - call.run.suspended_at <= before:
            continue
        fields = call_fields(call, call.run.agent_id)
        notify(Notification.Kind.REMINDER, call.run.agent_id, call.run.run_id, [fields])
        count += 1
    return count


def forget_old(now: datetime | None = None) -> int:
    """Drop the marks of deadlines long past."""
    deleted, _ = CallReminder.objects.filter(expires_at__lt=(now or timezone.now()) - _KEEP).delete()
    return deleted
