"""``manage.py demo_setup``: the demo login, a week's decided calls, and some runs waiting for it
(what ``make run`` calls)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand

from approvals import agents

DEMO_USERNAME = "reviewer"
DEMO_PASSWORD = "countersign-demo"


class Command(BaseCommand):
    help = "Create the demo login (in the Admins group) and seed demo runs if nothing is waiting yet."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--no-seed", action="store_true", help="Only create the demo login.")
        parser.add_argument(
            "--no-history",
            action="store_true",
            help="Seed the waiting runs only, not the decided calls before them.",
        )
        parser.add_argument(
            "--banner",
            nargs="+",
            metavar="URL",
            help="End with a banner: where to open (these URLs, best first) and how to log in.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._demo_login()
        if not options["no_seed"]:
            self._seed(history=not options["no_history"])
        if options["banner"]:
            self._banner(options["banner"])

    def _banner(self, urls: list[str]) -> None:
        """What `make run` leaves on screen above the server's own lines: where to go, who to be."""
        rule = "=" * 78
        lines = [rule, f"  Countersign is starting. Open {urls[0]}"]
        lines += [f"                           or {url}" for url in urls[1:]]
        lines += [
            f"  Log in as {DEMO_USERNAME!r} with password {DEMO_PASSWORD!r}",
            "  (in Admins: sees and decides every agent's calls, reads the audit log, opens /admin/).",
            "  Ctrl-C stops the server.",
            rule,
        ]
        self.stdout.write(self.style.SUCCESS("\n".join(lines)))

    def _demo_login(self) -> None:
        User = get_user_model()
        user, created = User.objects.get_or_create(username=DEMO_USERNAME)
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        user.groups.add(Group.objects.get(name="Admins"))
        state = "created" if created else "exists"
        login = f"username {DEMO_USERNAME!r}, password {DEMO_PASSWORD!r}"
        self.stdout.write(self.style.SUCCESS(f"Demo login ({state}): {login}"))
        if not created:
            self.stdout.write(
                "  (an existing account keeps its password; `manage.py changepassword` resets it)"
            )

    def _seed(self, *, history: bool) -> None:
        runtime = agents.runtime()
        try:
            from demo.seed import seed_demo_history, seed_demo_rules, seed_demo_runs
        except ImportError:
            self.stdout.write(self.style.WARNING("No demo/seed.py yet: no demo runs seeded."))
            return

        async def waiting() -> int:
            counts = [(await a.list_suspended_runs(per_page=1, page=0)).total for a in runtime.agents]
            return sum(counts)

        already = async_to_sync(waiting)()
        if already:
            self.stdout.write(f"{already} run(s) already waiting: not seeding more demo runs.")
            return
        if history:
            waited = async_to_sync(seed_demo_history)(runtime, DEMO_USERNAME)
            self.stdout.write(f"Seeded decided calls: {sum(waited.values())} decided by {DEMO_USERNAME!r}.")
        rules = async_to_sync(seed_demo_rules)(runtime, DEMO_USERNAME)
        if rules:
            self.stdout.write(self.style.SUCCESS(f"Seeded demo routing rules: {rules} (see /rules/)."))
        seeded = async_to_sync(seed_demo_runs)(runtime)
        self.stdout.write(self.style.SUCCESS(f"Seeded demo runs: {seeded} waiting for a decision."))
