"""Sending notifications: mail through Django's mail framework, chat as a JSON POST; retried, recorded.

The machinery (a lease per attempt, the retry schedule, sending off the request in a task or a
thread of its own, orphans picked up by the background sweep) is ``approvals.outbound.deliveries.Outbox``,
shared with the webhooks. Each notification is one recipient on one channel, so a mail server or
chat hook that fails delays only its own messages. A notification's first attempt is at the end of
its collecting window; the message is built then, from the calls that joined it.
"""

from __future__ import annotations

import json
import smtplib

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.tasks import task

from approvals.models import Notification, NotificationPreference
from approvals.notifications import messages, options
from approvals.outbound.deliveries import Outbox
from approvals.outbound.posting import post
from approvals.policy import Access, may_decide


def _send_email(notification: Notification, message: messages.Message) -> str:
    address = notification.recipient.email
    if not address:
        return "The recipient has no email address."
    mail = EmailMultiAlternatives(message.subject, message.text, settings.DEFAULT_FROM_EMAIL, [address])
    mail.attach_alternative(message.html, "text/html")
    try:
        mail.send()
    except (smtplib.SMTPException, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"[:1000]
    return ""


def _send_chat(notification: Notification, message: messages.Message) -> str:
    url = (
        NotificationPreference.objects.filter(user=notification.recipient_id)
        .values_list("chat_url", flat=True)
        .first()
    )
    if not url:
        return "The recipient has no chat webhook URL any more."
    body = json.dumps(message.chat, ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "Countersign-Notifications/1"}
    return post(url, body, headers, options.timeout_seconds(), what="Chat webhooks")[1]


def _send(notification: Notification) -> str:
    if not _still_theirs(notification):
        return "Nothing sent: its recipient may no longer decide any of its calls."
    message = messages.build(notification)
    if notification.channel == Notification.Channel.EMAIL:
        return _send_email(notification, message)
    return _send_chat(notification, message)


def _still_theirs(notification: Notification) -> bool:
    """Leave out the calls its recipient may no longer decide (a digest collects for up to a day,
    and rights change meanwhile: an agent taken away, the account closed); whether any is left."""
    recipient = notification.recipient
    access = Access.of(recipient)
    calls = list(notification.calls.all())
    gone = [
        c.pk
        for c in calls
        if not recipient.is_active or not may_decide(access, c.agent_id, c.escalated_to or None)
    ]
    if gone:
        notification.calls.filter(pk__in=gone).delete()
        notification.call_count = max(0, notification.call_count - len(gone))
        Notification.objects.filter(pk=notification.pk).update(call_count=notification.call_count)
    return len(gone) < len(calls)


@task
def send_notification(notification_id: int) -> None:
    """One attempt (a background task); a failed one schedules the next."""
    OUTBOX.run_task(notification_id)


def _lease() -> float:
    mailer = getattr(settings, "MAILERS", {}).get("default", {})
    mail_timeout = float(mailer.get("OPTIONS", {}).get("timeout") or 10)
    return max(mail_timeout, options.timeout_seconds()) * 3 + 5


OUTBOX = Outbox(
    model=Notification,
    send=_send,
    task=send_notification,
    lease_seconds=_lease,
    retry_seconds=options.retry_seconds,
    give_up_seconds=options.give_up_seconds,
    done_status=Notification.Status.SENT,
    done_at_field="sent_at",
    name="notification",
    describe=lambda n: f"{n.pk} ({n.channel} to user {n.recipient_id})",
    select_related=("recipient",),
)
attempt = OUTBOX.attempt
schedule = OUTBOX.schedule
schedule_orphans = OUTBOX.schedule_orphans
send_due = OUTBOX.send_due
