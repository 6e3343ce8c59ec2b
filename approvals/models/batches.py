"""Bulk decisions: a batch of approval calls decided one by one, and the agents a reviewer follows.

A ``Batch`` is prepared from a selection (or every call matching an inbox's filters) as a draft the
reviewer previews; once started, a background task decides each ``BatchItem`` on its own through the
runtime's normal API, so the run store's exactly-once rule holds for every call: a call decided
elsewhere meanwhile loses nothing and is reported as skipped. Audit rows written while a batch
decides carry its id (``DECIDING_BATCH``), which ties the batch's entries together.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone

from agents_runtime.vocabulary import DecisionAction

#: The batch whose decisions are being recorded in this context (the run store and the services
#: write it on the audit row). A context variable, not an argument: the runtime's API between the
#: batch and the store knows nothing of batches, and asgiref carries the context across its threads.
DECIDING_BATCH: ContextVar[int | None] = ContextVar("countersign_deciding_batch", default=None)

#: What a batch may do: approvals and declines only (answers to ``suspend()`` are one by one).
BULK_ACTIONS = (DecisionAction.APPROVE, DecisionAction.DECLINE)


class Batch(models.Model):
    class State(models.TextChoices):
        DRAFT = "draft", "Not started"
        RUNNING = "running", "Running"
        DONE = "done", "Finished"

    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    username = models.CharField(max_length=150)
    agent_id = models.CharField(max_length=255)
    action = models.CharField(max_length=16, blank=True, choices=[(a.value, a.label) for a in BULK_ACTIONS])
    reason = models.TextField(blank=True)
    #: The inbox filters "all matching" used (query-string names), or empty for a selection.
    filters = models.JSONField(default=dict, blank=True)
    all_matching = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=State.choices, default=State.DRAFT)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"batch {self.pk} of {self.username} on {self.agent_id} ({self.state})"

    @property
    def running(self) -> bool:
        return self.state == self.State.RUNNING


class BatchItem(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Waiting"
        DECIDING = "deciding", "Deciding"
        DECIDED = "decided", "Decided"
        SKIPPED = "skipped", "Skipped"

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=400)
    tool_name = models.CharField(max_length=255, blank=True)
    #: The arguments as the preview showed them (model output: escaped wherever shown).
    args = models.JSONField(null=True, blank=True)
    #: The fingerprint of the call as the preview showed it (``agents_runtime.shown``): the batch's
    #: decision is bound to it, so a call changed since (edited, re-previewed, its tool upgraded) is
    #: skipped, not decided unseen. Empty for items never decidable.
    fingerprint = models.CharField(max_length=64, blank=True)
    #: What the call would do as the preview showed it (its tool's ``previews.Preview``, JSON form).
    preview = models.JSONField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    #: Why it was skipped, or what the decision led to.
    detail = models.TextField(blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "run_id", "tool_call_id"], name="batch_item_once")
        ]

    def __str__(self) -> str:
        return f"{self.tool_name or self.tool_call_id} on {self.run_id} ({self.state})"


class FollowedAgent(models.Model):
    """A reviewer follows an agent: their open pages notify them of its new calls (opt-in)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    agent_id = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)

    objects: ClassVar[models.Manager[FollowedAgent]]

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "agent_id"], name="follow_once")]

    def __str__(self) -> str:
        return f"{self.user_id} follows {self.agent_id}"
