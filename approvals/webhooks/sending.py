"""Signing and sending webhook deliveries, with retries and exponential backoff up to a day.

Standard Webhooks: ``webhook-id`` (the delivery's, the same on each retry), ``webhook-timestamp``
(Unix seconds of this attempt) and ``webhook-signature: v1,<base64 HMAC-SHA256 of id.timestamp.body>``.
A 2xx answer delivers; anything else (another status, a refused or dropped connection, a timeout)
is retried after ``WEBHOOK_RETRY_SECONDS[attempt - 1]``, until the schedule ends or the next try
would fall more than ``WEBHOOK_GIVE_UP_SECONDS`` after the event: then the delivery is ``failed``.

Each attempt is a ``django.tasks`` task. With a backend that defers (the database backend, run by
``db_worker``) the retry is a task due later; the Immediate backend would run a task inside the
request that made the event, so there each delivery goes on in a thread of its own instead; a
delivery whose thread died with its process (a restart) is picked up by the server's background
sweep (``schedule_orphans``, from ``approvals.tasks``) or ``manage.py send_webhooks``. A delivery is
claimed before it is sent (a lease), so two senders never send the same attempt; an attempt cut off
mid-send is taken again once its lease runs out. That machinery is ``approvals.outbound.deliveries.Outbox``,
shared with the notifications.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

from django.conf import settings
from django.tasks import task
from django.utils import timezone

from approvals.models import WebhookDelivery, secret_key
from approvals.outbound.deliveries import Outbox
from approvals.outbound.posting import post

#: Svix's schedule, as Standard Webhooks suggests: about a day in all.
DEFAULT_RETRY_SECONDS = (5, 300, 1800, 7200, 18000, 36000, 36000)


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def _send(delivery: WebhookDelivery) -> str:
    """One signed POST, to an address checked as it was resolved (``outbound``); the error, "" on a 2xx."""
    body = json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False).encode()
    stamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Countersign-Webhooks/1",
        "webhook-id": delivery.message_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign(delivery.endpoint.secret, delivery.message_id, stamp, body),
    }
    timeout = float(_setting("WEBHOOK_TIMEOUT_SECONDS", 10))
    delivery.last_status_code, error = post(delivery.endpoint.url, body, headers, timeout)
    return error


@task
def send_webhook(delivery_id: int) -> None:
    """One attempt (a background task); a failed one schedules the next."""
    OUTBOX.run_task(delivery_id)


OUTBOX = Outbox(
    model=WebhookDelivery,
    send=_send,
    task=send_webhook,
    lease_seconds=lambda: float(_setting("WEBHOOK_TIMEOUT_SECONDS", 10)) * 3 + 5,
    retry_seconds=lambda: _setting("WEBHOOK_RETRY_SECONDS", DEFAULT_RETRY_SECONDS),
    give_up_seconds=lambda: float(_setting("WEBHOOK_GIVE_UP_SECONDS", 86400)),
    done_status=WebhookDelivery.Status.DELIVERED,
    done_at_field="delivered_at",
    name="webhook",
    describe=lambda d: f"{d.message_id} to {d.endpoint.url}",
    select_related=("endpoint",),
)
attempt = OUTBOX.attempt
schedule = OUTBOX.schedule
schedule_orphans = OUTBOX.schedule_orphans
send_due = OUTBOX.send_due


def resend(deliveries: list[WebhookDelivery]) -> int:
    """Send these again now (an admin's action), keeping their ``webhook-id``; how many were queued."""
    count = 0
    for delivery in deliveries:
        if delivery.status == WebhookDelivery.Status.SENDING:
            continue
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            status=WebhookDelivery.Status.PENDING, next_attempt_at=timezone.now(), claimed_until=None
        )
        schedule(delivery.pk, 0.0)
        count += 1
    return count
