"""Webhooks out: endpoints an admin registers, and each delivery of an event to one of them.

Signed per Standard Webhooks (https://www.standardwebhooks.com/): the secret is ``whsec_`` and
base64 key bytes; each delivery keeps one ``webhook-id`` across its retries (a receiver dedupes on it).
"""

from __future__ import annotations

import base64
import secrets
from typing import ClassVar

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from approvals.outbound import refused_as_typed

#: The events an endpoint may subscribe to.
WEBHOOK_EVENTS = ("call.suspended", "call.decided", "run.completed", "run.failed")


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret (Standard Webhooks: base64 after the prefix)."""
    return base64.b64decode(secret.removeprefix("whsec_"), validate=True)


def _check_secret(value: str) -> None:
    try:
        key = secret_key(value)
    except ValueError:
        raise ValidationError("A secret is whsec_ followed by base64 (24 to 64 bytes).") from None
    if not value.startswith("whsec_") or not 24 <= len(key) <= 64:
        raise ValidationError("A secret is whsec_ followed by base64 (24 to 64 bytes).")


def _check_events(value: object) -> None:
    if not isinstance(value, list) or not value or any(e not in WEBHOOK_EVENTS for e in value):
        raise ValidationError(f"A non-empty list of: {', '.join(WEBHOOK_EVENTS)}.")


def _check_agents(value: object) -> None:
    if not isinstance(value, list) or any(not isinstance(a, str) or not a for a in value):
        raise ValidationError("A list of agent ids (empty: every agent).")


def _all_events() -> list[str]:
    return list(WEBHOOK_EVENTS)


class WebhookEndpoint(models.Model):
    url = models.URLField(max_length=500, help_text="Receives a POST per event (JSON body).")
    description = models.CharField(max_length=200, blank=True)
    secret = models.CharField(
        max_length=100,
        default=new_secret,
        validators=[_check_secret],
        help_text="Standard Webhooks secret (whsec_…): the receiver verifies webhook-signature with it.",
    )
    events = models.JSONField(
        default=_all_events, validators=[_check_events], help_text=", ".join(WEBHOOK_EVENTS)
    )
    agents = models.JSONField(
        default=list, blank=True, validators=[_check_agents], help_text="Agent ids; empty: every agent."
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        verbose_name = "webhook endpoint"

    def __str__(self) -> str:
        return self.url

    def clean(self) -> None:
        # Here rather than as the field's validator: the rule follows a setting, and migrations
        # would record the validator.
        refused = refused_as_typed(self.url)
        if refused:
            raise ValidationError({"url": refused})

    def wants(self, event_type: str, agent_id: str) -> bool:
        return self.active and event_type in self.events and (not self.agents or agent_id in self.agents)


class WebhookDelivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENDING = "sending", "sending"
        DELIVERED = "delivered", "delivered"
        FAILED = "failed", "failed (gave up)"

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    #: The ``webhook-id`` header: one per event and endpoint, the same on every retry.
    message_id = models.CharField(max_length=64, unique=True)
    event_type = models.CharField(max_length=32)
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    #: Set while one sender holds the delivery (a lease: a sender that died lets go after it).
    claimed_until = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[models.Manager[WebhookDelivery]]

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event_type} → {self.endpoint_id} ({self.status})"
