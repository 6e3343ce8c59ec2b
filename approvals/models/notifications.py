"""Notifications to reviewers: each user's preference, each message sent (or due), the calls it covers.

A message collects calls while it is open (pending, never attempted): calls parked on one agent
within the collapse window, or everything of a digest's window, join one row instead of making
their own. At most one open row per recipient, channel, kind and agent (a partial unique index), so
two parks at once cannot open two.
"""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone


class NotificationMode(models.TextChoices):
    EACH = "each", "Each call (bursts collapse into one message)"
    DIGEST = "digest", "A digest of what waited (daily, unless you choose how often below)"
    OFF = "off", "Off"


#: Who never chose gets one message a day listing what waited for them, not one per call.
DEFAULT_DIGEST_MINUTES = 24 * 60


class NotificationPreference(models.Model):
    """How one user hears of calls that wait for them (no row: the defaults, a daily digest)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    mode = models.CharField(max_length=8, choices=NotificationMode.choices, default=NotificationMode.DIGEST)
    email = models.BooleanField(default=True, help_text="To the address of your account.")
    chat_url = models.URLField(
        "Chat webhook URL",
        max_length=500,
        blank=True,
        help_text="A Slack-compatible incoming webhook; empty: no chat messages.",
    )
    digest_minutes = models.PositiveIntegerField(
        default=DEFAULT_DIGEST_MINUTES, validators=[MinValueValidator(1), MaxValueValidator(24 * 60)]
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects: ClassVar[models.Manager[NotificationPreference]]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.mode}"


class Notification(models.Model):
    """One message to one recipient on one channel, sent in the background and retried."""

    class Channel(models.TextChoices):
        EMAIL = "email", "email"
        CHAT = "chat", "chat"

    class Kind(models.TextChoices):
        PARKED = "parked", "calls wait"
        REMINDER = "reminder", "deadline soon"
        ESCALATED = "escalated", "escalated"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENDING = "sending", "sending"
        SENT = "sent", "sent"
        FAILED = "failed", "failed (gave up)"

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    channel = models.CharField(max_length=8, choices=Channel.choices)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    #: The agent whose calls it covers; empty on a digest (any agent).
    agent_id = models.CharField(max_length=255, blank=True)
    #: How many calls it covers (its ``calls`` rows; kept here so joining one is one UPDATE).
    call_count = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    #: The end of its collecting window, then of each wait before a retry.
    next_attempt_at = models.DateTimeField(default=timezone.now)
    #: Set while one sender holds it (a lease: a sender that died lets go after it).
    claimed_until = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[models.Manager[Notification]]

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="notification_due_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["recipient", "channel", "kind", "agent_id"],
                condition=Q(status="pending", attempts=0),
                name="notification_one_open_uniq",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} → {self.recipient_id} by {self.channel} ({self.status})"


class NotificationCall(models.Model):
    """One call a notification covers (ids only: the call itself goes once decided)."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="calls")
    agent_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    #: The call's title as its card reads it ("Refund $890.00 · A-1044", ``cards.call.call_title``),
    #: made when it joined: the line a message lists it by (model output: escaped where shown).
    title = models.CharField(max_length=300, blank=True)
    #: The call's arguments (model output: escaped wherever a message shows them).
    args = models.JSONField(null=True, blank=True)
    #: What the call would do, in one line (its preview's ``summary``; the tool's text, escaped too).
    preview = models.TextField(blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    escalated_to = models.CharField(max_length=150, blank=True)

    objects: ClassVar[models.Manager[NotificationCall]]

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.run_id}/{self.tool_call_id})"


class CallReminder(models.Model):
    """A deadline whose reminder went out: each deadline of a call is reminded of once."""

    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    objects: ClassVar[models.Manager[CallReminder]]

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run_id", "tool_call_id", "expires_at"], name="call_reminder_once_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.tool_call_id} at {self.expires_at}"


class ServedAddress(models.Model):
    """The address the site was last reached at by a signed-in person's browser (one row): where links
    in messages point when ``COUNTERSIGN_BASE_URL`` is not set (``approvals.site``). In the database,
    so a message sent by another process, or after a restart, has it."""

    url = models.CharField(max_length=300)
    seen_at = models.DateTimeField(default=timezone.now)

    objects: ClassVar[models.Manager[ServedAddress]]

    def __str__(self) -> str:
        return self.url
