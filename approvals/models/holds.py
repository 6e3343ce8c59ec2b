"""Held decisions: a decision taken in the browser, held for an undo window before it is taken.

The row is the decision as asked (``DecisionRequest``'s fields) and when it is to be taken
(``commit_at``). Nothing of the run changes while it is held; the sweep (``approvals.tasks``) takes
it through the one door once ``commit_at`` passes, in whichever process sweeps, so a restart loses
nothing. At most one per call: while it exists the call is taken (``approvals.policy.DeskPolicy``
refuses every other decision on it, the deadline's included).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from agents_runtime.vocabulary import DecisionAction, choices


class HeldDecisionQuerySet(models.QuerySet["HeldDecision"]):
    def due(self, now: object) -> HeldDecisionQuerySet:
        return self.filter(commit_at__lte=now).order_by("commit_at", "pk")


class HeldDecision(models.Model):
    """A decision held for its undo window (deleted once taken or undone)."""

    agent_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    #: Kept as shown: other reviewers' cards say who is deciding.
    username = models.CharField(max_length=150)
    action = models.CharField(max_length=16, choices=choices(DecisionAction))
    reason = models.TextField(blank=True)
    resume_data = models.JSONField(null=True, blank=True)
    edited_args = models.JSONField(null=True, blank=True)
    #: The fingerprint of the arguments the card showed (``DecisionRequest.seen``).
    seen = models.CharField(max_length=64, blank=True)
    #: ``Confirmation`` values the reviewer ticked.
    confirmations = models.JSONField(default=list)
    held_at = models.DateTimeField()
    #: Taken then (the end of the undo window, or the call's deadline if sooner).
    commit_at = models.DateTimeField()
    #: Set when a sweep starts taking it: from then on it cannot be undone.
    committing_since = models.DateTimeField(null=True, blank=True)

    objects = HeldDecisionQuerySet.as_manager()

    class Meta:
        db_table = "approvals_held_decision"
        constraints = [models.UniqueConstraint(fields=["run_id", "tool_call_id"], name="held_call_uniq")]
        indexes = [models.Index(fields=["commit_at"], name="held_commit_at_idx")]

    def __str__(self) -> str:
        return f"{self.username} {self.action} {self.run_id}/{self.tool_call_id} (held)"
