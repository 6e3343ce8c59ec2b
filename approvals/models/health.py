"""The queue-health rollup: the audit log folded into hourly counts, so the health page and
``/metrics`` read a few hundred rows whatever the size of the log.

``approvals.health.rollup`` folds audit rows past ``HealthWatermark.last_id`` (and ended runs past
``ended_last_id``) into ``HealthCount`` in one transaction (the watermark moves in the same one, so
a row is counted once). The run store adds the calls of runs that ended without parking (never
recorded otherwise). Both write with ``add_counts``, which only adds. Pending calls are not here:
they are read live from the parked calls (``approvals.health``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import connections, models

#: The ``hour`` of the all-time rows (``/metrics``' counters): one row per key, whatever the age.
EVER = datetime(1970, 1, 1, tzinfo=UTC)


class Series(models.TextChoices):
    #: Decided calls by the hour they were parked (pending ones are counted live).
    PARKED = "parked", "parked"
    #: Audit rows by the hour they were written; label: ``<action>:<outcome class>``.
    DECIDED = "decided", "decided"
    #: Time to decision of final decisions; label: the histogram bucket's upper bound in seconds.
    WAIT = "wait", "wait"
    #: A reviewer's decisions and votes; label: the username.
    REVIEWER = "reviewer", "reviewer"
    #: Decisions a standing grant took; label: the grant.
    GRANT = "grant", "grant"
    #: Tool calls made, from the transcripts of ended runs, by the hour the run ended.
    CALLS = "calls", "calls"
    #: The interruption budget per agent and tool (``counting.BUDGET_LABELS``; ``wait:<bound>``:
    #: time to decision of the calls a person or deadline decided, not a grant).
    BUDGET = "budget", "budget"


class HealthCount(models.Model):
    series = models.CharField(max_length=12, choices=Series.choices)
    #: The UTC hour the counts fall in (``EVER``: all time).
    hour = models.DateTimeField()
    agent_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255, blank=True)
    label = models.CharField(max_length=255, blank=True)
    count = models.BigIntegerField(default=0)
    #: ``wait``: the sum of the times to decision in the bucket (the histogram's ``_sum``).
    seconds = models.FloatField(default=0.0)

    class Meta:
        db_table = "approvals_health_count"
        constraints = [
            # The fold's upsert key, and the reads' index: a series over a range of hours.
            models.UniqueConstraint(
                fields=["series", "hour", "agent_id", "tool_name", "label"], name="health_count_key"
            ),
        ]

    def __str__(self) -> str:
        where = f"{self.agent_id}/{self.tool_name}"
        return f"{self.series} {self.hour:%Y-%m-%d %H}h {where} {self.label}: {self.count}"


class HealthWatermark(models.Model):
    """One row: the id of the last audit row (and of the last ended run) folded into ``HealthCount``."""

    last_id = models.BigIntegerField(default=0)
    ended_last_id = models.BigIntegerField(default=0)
    folded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "approvals_health_watermark"

    def __str__(self) -> str:
        return f"folded up to audit row {self.last_id}"


#: One ``HealthCount`` row's key and what to add to it.
CountRow = tuple[str, datetime, str, str, str, int, float]
_ADD_CHUNK = 500
_KEY = ("series", "hour", "agent_id", "tool_name", "label")


def add_counts(rows: Iterable[CountRow], *, using: str = "default") -> None:
    """Add each ``(series, hour, agent, tool, label, count, seconds)`` to its row (created when
    new), in upserts of ``_ADD_CHUNK`` rows."""
    connection = connections[using]
    table = HealthCount._meta.db_table
    key = ", ".join(_KEY)
    hour_field = HealthCount._meta.get_field("hour")
    items = list(rows)
    with connection.cursor() as cursor:
        for start in range(0, len(items), _ADD_CHUNK):
            chunk = items[start : start + _ADD_CHUNK]
            params: list[Any] = []
            for series, hour, agent_id, tool_name, label, count, seconds in chunk:
                prepared = hour_field.get_db_prep_value(hour, connection)
                params += [series, prepared, agent_id, tool_name, label, count, seconds]
            values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(chunk))
            cursor.execute(
                f"INSERT INTO {table} ({key}, count, seconds) VALUES {values}"
                f" ON CONFLICT ({key}) DO UPDATE SET count = {table}.count + excluded.count,"
                f" seconds = {table}.seconds + excluded.seconds",
                params,
            )
