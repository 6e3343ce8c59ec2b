"""The audit log folded into ``HealthCount``, a bounded batch at a time, by a watermark.

``fold`` takes the audit rows past ``HealthWatermark.last_id`` in id order, adds what they count
(``counting.count_rows``) to the hourly rows with one upsert, and moves the watermark, all in one
transaction: a row is counted once however many processes fold. The watermark row is locked
(PostgreSQL: ``FOR UPDATE SKIP LOCKED``, so a second folder goes away rather than wait; SQLite's
transactions are ``IMMEDIATE`` already).

Ids come from a sequence, and on PostgreSQL a row may commit after one with a higher id: folding
past it would skip it for good. So the fold stops at the first row younger than ``FOLD_LAG``
(decision rows are written by one statement; a commit that late would be a stalled transaction),
and readers add the rows past the watermark themselves (``tail``), so the figures are exact and
live while the fold lags behind.

Ended runs are folded the same way, by their own watermark (``ended_last_id``): the tool calls
each one's transcript holds are the calls made (``counting.count_ended``), counted when the run
ends.

The expiry sweep folds in the background (``approvals.tasks``); the page and ``/metrics`` fold
once (bounded) before they read, so the rollup keeps up without the sweep too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from approvals.health.counting import AuditRow, Counts, EndedRow, count_ended, count_rows, merge
from approvals.models import AuditEntry, EndedRun, HealthWatermark, add_counts

#: The columns ``counting.AuditRow`` holds, in its order.
AUDIT_COLUMNS = tuple(AuditRow._fields)
#: The columns ``counting.EndedRow`` holds, in its order.
ENDED_COLUMNS = tuple(EndedRow._fields)
#: Audit rows one fold takes at most (about a third of a second on a small machine: the sweep that
#: runs it expires calls too, so a fold must not hold it long).
FOLD_BATCH = 1_000
#: Rows younger than this are left to the next fold (see the module's docstring).
FOLD_LAG = timedelta(seconds=5)
#: Rows past the watermark a read adds itself at most; beyond, the figures say they lag behind.
TAIL_MAX = 5_000
_WATERMARK = 1


def fold(*, limit: int = FOLD_BATCH, now: datetime | None = None) -> int:
    """Fold up to ``limit`` audit rows into the rollup: how many (0 when another fold holds it)."""
    settled = (now or timezone.now()) - FOLD_LAG
    audit_mark, ended_mark = watermarks()
    # Nothing to fold (most reads): no transaction, no lock, no write.
    if (
        not AuditEntry.objects.filter(id__gt=audit_mark, created_at__lte=settled).exists()
        and not EndedRun.objects.filter(id__gt=ended_mark, ended_at__lte=settled).exists()
    ):
        return 0
    HealthWatermark.objects.bulk_create([HealthWatermark(pk=_WATERMARK)], ignore_conflicts=True)
    with transaction.atomic():
        mark = (
            HealthWatermark.objects.select_for_update(skip_locked=True).filter(pk=_WATERMARK).first()
            if connection.features.has_select_for_update_skip_locked
            else HealthWatermark.objects.filter(pk=_WATERMARK).first()
        )
        if mark is None:
            return 0  # another process is folding these very rows
        rows = []
        for row in _rows_after(mark.last_id, limit):
            if row.created_at > settled:
                break
            rows.append(row)
        ended = []
        for run in _ended_after(mark.ended_last_id, limit):
            if run.ended_at > settled:
                break
            ended.append(run)
        if not rows and not ended:
            return 0
        _upsert(merge(count_rows(rows), count_ended(ended)))
        mark.last_id = rows[-1].id if rows else mark.last_id
        mark.ended_last_id = ended[-1].id if ended else mark.ended_last_id
        mark.folded_at = timezone.now()
        mark.save(update_fields=["last_id", "ended_last_id", "folded_at"])
    return len(rows) + len(ended)


def fold_all(*, batch: int = FOLD_BATCH) -> int:
    """Fold until caught up (a command, a test): how many rows."""
    total = 0
    while done := fold(limit=batch):
        total += done
    return total


@dataclass(frozen=True)
class Tail:
    """The audit rows past the watermark, counted: what a read adds to the rollup."""

    counts: Counts
    #: Rows past the watermark not counted (more than ``TAIL_MAX``): the figures lag by these.
    behind: int


def watermark() -> int:
    return watermarks()[0]


def watermarks() -> tuple[int, int]:
    """The last audit row and the last ended run folded."""
    found = HealthWatermark.objects.filter(pk=_WATERMARK).values_list("last_id", "ended_last_id").first()
    return found or (0, 0)


def tail(*, limit: int = TAIL_MAX) -> Tail:
    after, ended_after = watermarks()
    rows = list(_rows_after(after, limit + 1))
    ended = list(_ended_after(ended_after, limit + 1))
    behind = 0
    if len(rows) > limit:
        behind += AuditEntry.objects.filter(id__gt=rows[limit - 1].id).count()
    if len(ended) > limit:
        behind += EndedRun.objects.filter(id__gt=ended[limit - 1].id).count()
    return Tail(merge(count_rows(rows[:limit]), count_ended(ended[:limit])), behind)


def _rows_after(last_id: int, limit: int) -> Iterable[AuditRow]:
    found = AuditEntry.objects.filter(id__gt=last_id).order_by("id").values_list(*AUDIT_COLUMNS)[:limit]
    return (AuditRow(*values) for values in found)


def _ended_after(last_id: int, limit: int) -> Iterable[EndedRow]:
    found = EndedRun.objects.filter(id__gt=last_id).order_by("id").values_list(*ENDED_COLUMNS)[:limit]
    return (EndedRow(*values) for values in found)


def _upsert(counts: Counts) -> None:
    add_counts((*k, tally.count, tally.seconds) for k, tally in counts.items())
