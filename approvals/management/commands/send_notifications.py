"""``manage.py send_notifications``: send the notifications that are due (after a restart, or by cron
when the tasks run immediately: their windows and retries wait in threads that a restart ends)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from approvals.notifications import send_due


class Command(BaseCommand):
    help = "Send the notifications that are due, one attempt each."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"{send_due()} due notifications attempted")
