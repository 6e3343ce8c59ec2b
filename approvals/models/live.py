"""The live outbox: how run events, run output and sign-outs cross processes when there is no Redis."""

from __future__ import annotations

from django.db import models


class LiveEvent(models.Model):
    """One message for the open pages, written by whichever process has it, read by every server process.

    Only used with the in-process channel layer (the embedded default): each server process polls
    this table and forwards new rows to its own websocket consumers. With Redis, messages go straight
    through the channel layer and this table stays empty.
    """

    class Kind(models.TextChoices):
        #: A run event (``payload`` is the event): for the pages showing the run's agent.
        EVENT = "event", "Run event"
        #: A run's streamed output (``payload["chunks"]``, in order): for the pages watching that run.
        OUTPUT = "output", "Run output"
        #: A session logged out (``payload["group"]``): its open sockets close.
        SIGN_OUT = "sign-out", "Sign-out"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.EVENT)
    agent_id = models.CharField(max_length=200)
    run_id = models.CharField(max_length=200)
    payload = models.JSONField()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.agent_id}/{self.run_id}"
