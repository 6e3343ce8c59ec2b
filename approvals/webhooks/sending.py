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
sweep (``schedule_orphans``, from ``approvals.expiry``) or ``manage.py send_webhooks``. A delivery is
claimed before it is sent (a lease), so two senders never send the same attempt; an attempt cut off
mid-send is taken again once its lease runs out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.db.models import Q
from django.tasks import task
from django.tasks.backends.immediate import ImmediateBackend
from django.utils import timezone

from approvals.models import WebhookDelivery
from approvals.models.webhooks import secret_key

logger = logging.getLogger(__name__)

#: Svix's schedule, as Standard Webhooks suggests: about a day in all.
DEFAULT_RETRY_SECONDS = (5, 300, 1800, 7200, 18000, 36000, 36000)


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def _claim(delivery_id: int, *, force: bool = False) -> WebhookDelivery | None:
    """Take the delivery for one attempt, if it is due and no other sender holds it."""
    now = timezone.now()
    timeout = float(_setting("WEBHOOK_TIMEOUT_SECONDS", 10))
    waiting = Q(status=WebhookDelivery.Status.PENDING) & (
        Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    )
    if not force:
        waiting &= Q(next_attempt_at__lte=now)
    # A sender that died mid-attempt leaves it "sending": its lease running out makes it due again.
    due = Q(pk=delivery_id) & (waiting | Q(status=WebhookDelivery.Status.SENDING, claimed_until__lt=now))
    taken = WebhookDelivery.objects.filter(due).update(
        status=WebhookDelivery.Status.SENDING, claimed_until=now + timedelta(seconds=timeout * 3 + 5)
    )
    if not taken:
        return None
    return WebhookDelivery.objects.select_related("endpoint").get(pk=delivery_id)


def _post(delivery: WebhookDelivery) -> tuple[int | None, str]:
    """One POST; ``(status, error)``, error empty on a 2xx."""
    body = json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False).encode()
    stamp = int(time.time())
    request = urllib.request.Request(
        delivery.endpoint.url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "Countersign-Webhooks/1",
            "webhook-id": delivery.message_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": sign(delivery.endpoint.secret, delivery.message_id, stamp, body),
        },
    )
    timeout = float(_setting("WEBHOOK_TIMEOUT_SECONDS", 10))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), ""
    except urllib.error.HTTPError as exc:
        return exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, f"{type(exc).__name__}: {reason}"[:1000]


def attempt(delivery_id: int, *, force: bool = False) -> float | None:
    """Send one attempt of a due delivery; the delay to the next attempt, or ``None`` when done."""
    delivery = _claim(delivery_id, force=force)
    if delivery is None:
        return None
    code, error = _post(delivery)
    now = timezone.now()
    delivery.attempts += 1
    delivery.last_status_code = code
    delivery.claimed_until = None
    if not error and code is not None and 200 <= code < 300:
        delivery.status = WebhookDelivery.Status.DELIVERED
        delivery.delivered_at = now
        delivery.last_error = ""
        delivery.save()
        return None
    delivery.last_error = error
    schedule_: tuple[float, ...] = tuple(_setting("WEBHOOK_RETRY_SECONDS", DEFAULT_RETRY_SECONDS))
    give_up = float(_setting("WEBHOOK_GIVE_UP_SECONDS", 86400))
    delay = float(schedule_[delivery.attempts - 1]) if delivery.attempts <= len(schedule_) else None
    if delay is None or (now + timedelta(seconds=delay) - delivery.created_at).total_seconds() > give_up:
        delivery.status = WebhookDelivery.Status.FAILED
        delivery.save()
        logger.warning(
            "Webhook %s to %s failed for good: %s", delivery.message_id, delivery.endpoint.url, error
        )
        return None
    delivery.status = WebhookDelivery.Status.PENDING
    delivery.next_attempt_at = now + timedelta(seconds=delay)
    delivery.save()
    return delay


@task
def send_webhook(delivery_id: int) -> None:
    """One attempt (a background task); a failed one schedules the next."""
    delay = attempt(delivery_id)
    if delay is not None:
        schedule(delivery_id, delay)


def _in_thread(delivery_id: int, delay: float) -> None:
    def run() -> None:
        wait: float | None = delay
        try:
            while wait is not None:
                time.sleep(wait)
                wait = attempt(delivery_id)
        except Exception:
            logger.exception("Webhook delivery %s: sending failed", delivery_id)
        finally:
            close_old_connections()

    threading.Thread(target=run, name=f"countersign-webhook-{delivery_id}", daemon=True).start()


def schedule(delivery_id: int, delay: float) -> None:
    """Send the delivery ``delay`` seconds from now, without waiting for it."""
    backend = send_webhook.get_backend()
    if isinstance(backend, ImmediateBackend) or not backend.supports_defer:
        _in_thread(delivery_id, delay)
        return
    when: datetime = timezone.now() + timedelta(seconds=delay)
    send_webhook.using(run_after=when).enqueue(delivery_id)


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


#: How long past its time a delivery waits for the thread that should send it before it counts as
#: orphaned (that thread's process is gone).
ORPHAN_GRACE = timedelta(seconds=30)


def schedule_orphans() -> int:
    """Deliveries no sender holds any more (their threads died with a restart): sent again, each
    with its own ``webhook-id``; how many. Only for the Immediate backend: another keeps its retries
    as tasks of its queue."""
    if not isinstance(send_webhook.get_backend(), ImmediateBackend):
        return 0
    now = timezone.now()
    orphans = list(
        WebhookDelivery.objects.filter(
            Q(status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now - ORPHAN_GRACE)
            | Q(status=WebhookDelivery.Status.SENDING, claimed_until__lt=now)
        ).values_list("pk", flat=True)[:500]
    )
    for pk in orphans:
        schedule(pk, 0.0)
    return len(orphans)


def send_due() -> int:
    """Every pending delivery that is due, one attempt each (``manage.py send_webhooks``)."""
    due = WebhookDelivery.objects.filter(
        status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=timezone.now()
    ).values_list("pk", flat=True)
    sent = 0
    for pk in list(due):
        delay = attempt(pk)
        sent += 1
        if delay is not None:
            schedule(pk, delay)
    return sent
