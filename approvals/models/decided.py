"""Who decided a parked call, recorded the moment the runtime accepted the decision."""

from __future__ import annotations

from django.db import models


class DecidedCall(models.Model):
    """Written by a runtime listener when a decision is recorded, before the run continues.

    The audit entry of a decision is written once the run has gone as far as it goes, and a run that
    ends is deleted from the run store; a reviewer who loses a race in between would otherwise find
    no trace of the winner. This row says who won from the start.
    """

    run_id = models.CharField(max_length=200)
    tool_call_id = models.CharField(max_length=400)
    actor = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=20)
    decided_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["run_id", "tool_call_id"], name="decided_call_lookup")]

    def __str__(self) -> str:
        return f"{self.action} {self.run_id}/{self.tool_call_id} by {self.actor}"
