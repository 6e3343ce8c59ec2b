"""Webhooks out: run events to the endpoints admins register, signed, retried, each delivery recorded.

``events`` turns the runtime's run events into webhook events and records one delivery per
matching endpoint; ``sending`` signs and sends them from a background task, retrying with backoff.
"""

from approvals.webhooks.events import EVENT_TYPES, on_run_event
from approvals.webhooks.sending import resend, send_due, send_webhook

__all__ = ["EVENT_TYPES", "on_run_event", "resend", "send_due", "send_webhook"]
