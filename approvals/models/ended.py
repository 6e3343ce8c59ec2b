"""The permanent record of an ended run: where it belonged, how it ended, and its transcript.

A run's row (``RunRecord``) is deleted when it ends, with its snapshot: the snapshot is pydantic-ai's
whole conversation with usage, model and provider details, kept only so that the run can continue.
What people read later is kept here instead, written by the run store in the step that ends the run:
the run's messages in the runtime's plain form (``RunEnding.transcript``). The decisions taken on the
run are not copied: they are in the audit log, which the record page shows inline.

``manage.py prune_run_records`` empties records older than ``RUN_RECORD_RETENTION_DAYS``: the
transcript and final answer go, a row saying when it was pruned stays (the audit log's links then say
so, instead of "no such run").
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from django.db import models

from agents_runtime.vocabulary import Outcome, choices

from .fields import OrderedJSONField

#: How a recorded run ended.
ENDINGS = (Outcome.COMPLETED, Outcome.FAILED)


class EndedRunQuerySet(models.QuerySet["EndedRun"]):
    def visible_to(self, agent_ids: frozenset[str] | set[str] | list[str]) -> EndedRunQuerySet:
        return self.filter(agent_id__in=agent_ids)

    def kept(self) -> EndedRunQuerySet:
        return self.filter(pruned_at__isnull=True)

    def ended_before(self, moment: datetime) -> EndedRunQuerySet:
        return self.filter(ended_at__lt=moment)


class EndedRun(models.Model):
    run_id = models.CharField(max_length=255, unique=True)
    agent_id = models.CharField(max_length=255)
    thread_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    resource_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    parent_run_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=choices(ENDINGS))
    #: The final answer (completed) or the error (failed); emptied when pruned.
    detail = models.TextField(blank=True)
    #: The run's messages (``RunEnding.transcript``), oldest first; NULL once pruned.
    transcript = OrderedJSONField(null=True, blank=True)
    pruned_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[EndedRunQuerySet] = EndedRunQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "approvals_ended_run"
        indexes = [
            # Pruning: records ended before a moment and not pruned yet.
            models.Index(
                fields=["ended_at"], condition=models.Q(pruned_at__isnull=True), name="ended_run_kept_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.run_id} ({self.status})"

    @property
    def pruned(self) -> bool:
        return self.pruned_at is not None
