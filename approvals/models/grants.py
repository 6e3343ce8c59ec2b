"""Standing grants ("always allow"): the Django store's rows for ``agents_runtime.grants``.

A grant is never deleted: revoking stamps ``revoked_at``, and audit rows of the approvals it gave
point at it (``AuditEntry.grant``). ``uses`` only grows, by the conditional update the run store
makes in the step that records each approval (``approvals.store.grants``).
"""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from agents_runtime.grants import GrantScope


class GrantQuerySet(models.QuerySet["GrantRecord"]):
    def live(self, at: object | None = None) -> GrantQuerySet:
        """Not revoked, not used up, not expired at ``at`` (default: now)."""
        at = at or timezone.now()
        return self.filter(
            Q(revoked_at__isnull=True),
            Q(max_uses__isnull=True) | Q(uses__lt=F("max_uses")),
            Q(expires_at__isnull=True) | Q(expires_at__gt=at),
        )


class GrantRecord(models.Model):
    agent_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    scope = models.CharField(max_length=16, choices=[(s.value, s.label) for s in GrantScope])
    #: The thread or resource id for those scopes; empty for everyone.
    scope_value = models.CharField(max_length=255, blank=True)
    #: A CEL expression over the call's arguments; empty: any arguments.
    condition = models.TextField(blank=True)
    max_uses = models.PositiveIntegerField(null=True, blank=True)
    uses = models.PositiveIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # SET_NULL keeps the grant (and what it approved) when the account goes; the name stays.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=150)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by_name = models.CharField(max_length=150, blank=True)
    #: The call it was made from ("approve and allow ..."), if any.
    from_run_id = models.CharField(max_length=255, blank=True)
    from_tool_call_id = models.CharField(max_length=400, blank=True)
    #: Made for risky calls too; without it the grant never approves a call the tool marks risky.
    covers_risky = models.BooleanField(default=False)
    #: Calls this grant could have let through but whose arguments its condition could not be
    #: evaluated on (it raised, or was over its budget), and the latest reason: queue health shows them.
    condition_failures = models.PositiveIntegerField(default=0)
    last_condition_error = models.TextField(blank=True)
    last_condition_error_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[GrantQuerySet] = GrantQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "approvals_grant"
        ordering = ["-created_at", "-id"]
        verbose_name = "standing grant"
        default_permissions = ("view",)
        permissions = [("manage_grants", "Can see and revoke everyone's standing grants")]
        indexes = [
            # What a parking call asks: the unrevoked grants of one agent's tool.
            models.Index(
                fields=["agent_id", "tool_name"], name="grant_live_idx", condition=Q(revoked_at__isnull=True)
            ),
        ]

    def __str__(self) -> str:
        return (
            f"grant #{self.pk} of {self.created_by_name}: {self.agent_id}.{self.tool_name} for {self.scope}"
        )
