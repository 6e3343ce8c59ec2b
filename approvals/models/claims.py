"""Claims: a reviewer's "I'm on it" on a parked call. Shown to the others, lapses unless renewed,
never blocks a decision (``approvals.services.claims``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class CallClaim(models.Model):
    """Who holds a parked call right now (at most one row per call; a lapsed row is as none)."""

    agent_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="call_claims")
    #: Kept as shown: the holder's name is on every card that shows the claim.
    username = models.CharField(max_length=150)
    claimed_at = models.DateTimeField()
    #: The claim lapses then unless its holder renews it.
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "approvals_call_claim"
        constraints = [models.UniqueConstraint(fields=["run_id", "tool_call_id"], name="claim_call_uniq")]

    def __str__(self) -> str:
        return f"{self.username} on {self.run_id}/{self.tool_call_id}"
