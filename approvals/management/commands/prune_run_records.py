"""``manage.py prune_run_records``: empty the records of runs that ended longer ago than the retention.

The retention is ``RUN_RECORD_RETENTION_DAYS`` (unset: records are kept for good, and this command
prunes nothing unless given ``--days``). A pruned record loses its transcript and final answer; a row
saying when it was pruned stays, so the run's page (where the audit log links) says so. The audit log
itself is never touched: it is the append-only record of every decision.
"""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from approvals.cards.record import retention_days
from approvals.models import EndedRun


class Command(BaseCommand):
    help = "Prune the transcripts of runs that ended more than RUN_RECORD_RETENTION_DAYS days ago."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--days", type=int, help="Prune records older than this (default: the setting).")
        parser.add_argument("--dry-run", action="store_true", help="Only count what would be pruned.")

    def handle(self, *args: Any, days: int | None = None, dry_run: bool = False, **options: Any) -> None:
        if days is None:
            days = retention_days()
        if days is None:
            self.stdout.write("RUN_RECORD_RETENTION_DAYS is not set: run records are kept for good.")
            return
        if days < 1:
            raise CommandError("--days must be at least 1.")
        now = timezone.now()
        old = EndedRun.objects.kept().ended_before(now - timedelta(days=days))
        if dry_run:
            self.stdout.write(f"Would prune {old.count()} run record(s) older than {days} day(s).")
            return
        pruned = old.update(transcript=None, detail="", pruned_at=now)
        self.stdout.write(f"Pruned {pruned} run record(s) older than {days} day(s).")
