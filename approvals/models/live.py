"""The live-event outbox: how run events cross processes when there is no Redis."""

from __future__ import annotations

from django.db import models


class LiveEvent(models.Model):
    """One run event, written by whichever process changed the run, read by every server process.

    Only used with the in-process channel layer (the embedded default): each server process polls
    this table and forwards new rows to its own websocket consumers. With Redis, events go straight
    through the channel layer and this table stays empty.
    """

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    agent_id = models.CharField(max_length=200)
    run_id = models.CharField(max_length=200)
    payload = models.JSONField()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.payload.get('type')} {self.agent_id}/{self.run_id}"
