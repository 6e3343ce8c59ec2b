"""What people did with the grants Countersign suggested from the decided history.

A row per Accept or Dismiss (never changed): who, when, the suggestion's terms and what it said.
An accepted suggestion points at the grant it made (whose making the audit log records too); a
dismissed one keeps the same terms from being offered again for a while
(``approvals.services.suggestions``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from agents_runtime.grants import GrantScope


class SuggestionChoice(models.TextChoices):
    ACCEPTED = "accepted", "accepted"
    DISMISSED = "dismissed", "dismissed"


class GrantSuggestionRecord(models.Model):
    agent_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    scope = models.CharField(max_length=16, choices=[(s.value, s.label) for s in GrantScope])
    scope_value = models.CharField(max_length=255, blank=True)
    condition = models.TextField(blank=True)
    choice = models.CharField(max_length=16, choices=SuggestionChoice.choices)
    #: What the suggestion said when it was chosen ("12 of 12 ... in 7 days. Would have matched ...").
    summary = models.TextField(blank=True)
    decided_at = models.DateTimeField(default=timezone.now)
    # SET_NULL keeps the record when the account goes; the name stays.
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_by_name = models.CharField(max_length=150)
    grant = models.ForeignKey(
        "approvals.GrantRecord", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        db_table = "approvals_grant_suggestion"
        ordering = ["-decided_at", "-id"]
        verbose_name = "grant suggestion chosen"
        default_permissions = ("view",)
        indexes = [models.Index(fields=["agent_id", "tool_name", "-decided_at"], name="suggestion_tool_idx")]

    def __str__(self) -> str:
        return f"{self.decided_by_name} {self.choice} {self.agent_id}.{self.tool_name} ({self.scope})"
