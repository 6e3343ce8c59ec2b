"""``manage.py run_agent AGENT_ID "prompt" [--thread T] [--resource R] [--as USER]
[--expires-after S [--on-expiry X]]``: start a run, print id and status."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents_runtime.store import CallKind, Deadline
from approvals import agents


class Command(BaseCommand):
    help = "Start a run of an agent from the command line; prints the run id and its status."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("agent_id", help="The agent's id (see the dashboard's overview).")
        parser.add_argument("prompt", help="What to ask the agent.")
        parser.add_argument("--thread", default=None, help="Thread id (runs on one thread share memory).")
        parser.add_argument("--resource", default=None, help="Resource id (e.g. the end user).")
        parser.add_argument(
            "--expires-after",
            type=float,
            default=None,
            metavar="SECONDS",
            help="The run's deadline for every call it parks, instead of its tools' own.",
        )
        parser.add_argument(
            "--on-expiry",
            choices=["decline", "approve", "escalate"],
            default="decline",
            help="What a call of this run becomes when nobody answered in time (with --expires-after).",
        )
        parser.add_argument(
            "--escalate-to",
            default=None,
            metavar="GROUP",
            help="The group an expired call moves to (with --on-expiry escalate).",
        )
        parser.add_argument(
            "--as",
            dest="user",
            default=None,
            help="Username the run is started as (tools with separate_duties=True refuse their approvals).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        runtime = agents.runtime()
        try:
            agent = runtime.get_agent(options["agent_id"])
        except KeyError:
            known = ", ".join(a.id for a in runtime.agents) or "none"
            raise CommandError(f"Unknown agent {options['agent_id']!r}; known agents: {known}") from None
        deadline = None
        if options["expires_after"] is not None:
            try:
                deadline = Deadline(
                    timedelta(seconds=options["expires_after"]),
                    options["on_expiry"],
                    escalate_to=options["escalate_to"],
                )
            except ValueError as exc:
                raise CommandError(f"--expires-after: {exc}") from None
        started_by = options["user"]
        if started_by is not None:
            user = get_user_model()
            if not user._default_manager.filter(**{user.USERNAME_FIELD: started_by}).exists():
                raise CommandError(f"Unknown user {started_by!r}")
        result = async_to_sync(agent.generate)(
            options["prompt"],
            thread_id=options["thread"],
            resource_id=options["resource"],
            deadline=deadline,
            started_by=started_by,
        )
        self.stdout.write(f"run_id: {result.run_id}")
        self.stdout.write(f"status: {result.status}")
        if result.status == "suspended":
            for call in result.tool_calls:
                kind = CallKind.APPROVAL if call.requires_approval else CallKind.INPUT
                self.stdout.write(f"waiting: {call.tool_name} ({kind}) tool_call_id={call.tool_call_id}")
        elif result.status == "success" and result.text:
            self.stdout.write(f"text: {result.text}")
        elif result.status == "failed":
            self.stdout.write(f"error: {result.error}")
            raise CommandError(f"Run {result.run_id} failed")
