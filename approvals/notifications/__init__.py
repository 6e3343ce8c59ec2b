"""Notifications to reviewers: calls that wait, deadlines near, escalations; by mail and chat.

``events`` hears the runtime (a call parked or escalated) and records who is told; ``recipients``
says who may decide an agent's calls (``approvals.policy``'s rule as one query); ``reminders`` is the
sweep's part (deadlines near); ``messages`` words them; ``sending`` sends them from a background
task with retries (``approvals.outbound.deliveries``); ``preferences`` is each user's choice.
"""

from approvals.notifications.events import EVENT_TYPES, on_run_event
from approvals.notifications.reminders import forget_old, remind_due
from approvals.notifications.sending import schedule_orphans, send_due, send_notification

__all__ = [
    "EVENT_TYPES",
    "forget_old",
    "on_run_event",
    "remind_due",
    "schedule_orphans",
    "send_due",
    "send_notification",
]
