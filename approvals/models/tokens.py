"""API tokens: a user's keys for the HTTP API (``Authorization: Bearer <token>``).

A token is ``cs_<key id>_<secret>``. Only a salted SHA-256 of the secret is kept: the secret has 256
bits of entropy, so a fast hash is enough (a token is not a password) and a database leak gives no
working token. The key id is public and finds the row; the digest comparison is constant-time.
"""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def active(self) -> ApiTokenQuerySet:
        """Not revoked and not expired (now)."""
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    key_id = models.CharField(max_length=16, unique=True)
    salt = models.CharField(max_length=32)
    #: hex SHA-256 of salt + secret.
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    #: An external agent's token: it may only create and read that agent's approval requests (its
    #: ``user`` is the agent's own account). None: a person's token, with the person's rights.
    external_agent = models.ForeignKey(
        "approvals.ExternalAgent", null=True, blank=True, on_delete=models.CASCADE, related_name="tokens"
    )

    objects: ClassVar[ApiTokenQuerySet] = ApiTokenQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} (cs_{self.key_id}_…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"
