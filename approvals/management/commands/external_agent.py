"""``manage.py external_agent register ID [--name N] [--description D] [--tools JSON] | token ID --name
NAME [--expires-days N] | list``.

External agents run in other processes and ask for decisions through ``/api/v1/approval-requests``
(``approvals.services.requests``). ``register`` adds one (or updates it) and serves it at once; its
reviewers are the groups of any agent (``manage.py grant USER --review ID``). ``token`` prints a
token of the agent, once: it may only create and read that agent's requests. ``--tools`` gives tools'
rules as ``tool()`` would: ``{"deploy": {"approvals": 2, "separate_duties": true, "risky": {"env":
["production"]}, "confirm": true, "grantable": false}}``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from approvals.models import ExternalAgent
from approvals.services import requests


class Command(BaseCommand):
    help = "Register external agents (which ask for approval over HTTP), and make their tokens."

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        register = actions.add_parser("register", help="Add (or update) an external agent and serve it.")
        register.add_argument("agent_id")
        register.add_argument("--name", default="")
        register.add_argument("--description", default="")
        register.add_argument("--tools", default=None, help="The tools' rules, as a JSON object.")
        token = actions.add_parser("token", help="A new token of the agent, printed once.")
        token.add_argument("agent_id")
        token.add_argument("--name", required=True, help="What uses it.")
        token.add_argument("--expires-days", type=int, default=None)
        actions.add_parser("list", help="The registered external agents.")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "register":
            self._register(options)
        elif action == "token":
            self._token(options["agent_id"], options["name"], options["expires_days"])
        else:
            for row in ExternalAgent.objects.all():
                tools = ", ".join(sorted(row.tools)) or "no rules"
                self.stdout.write(
                    f"{row.agent_id}  {row.name!r}  tools: {tools}  tokens: {row.tokens.count()}"
                )

    def _register(self, options: dict[str, Any]) -> None:
        try:
            tools = json.loads(options["tools"]) if options["tools"] is not None else None
        except ValueError as exc:
            raise CommandError(f"--tools is not JSON: {exc}") from None
        try:
            row = requests.register(
                options["agent_id"], name=options["name"], description=options["description"], tools=tools
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"External agent {row.agent_id!r} registered; reviewers: group agent:{row.agent_id}."
        )

    def _token(self, agent_id: str, name: str, days: int | None) -> None:
        if days is not None and days < 1:
            raise CommandError("--expires-days must be at least 1.")
        expires = timezone.now() + timedelta(days=days) if days else None
        try:
            made = requests.agent_token(agent_id, name=name, expires_at=expires)
        except ExternalAgent.DoesNotExist:
            raise CommandError(f"No external agent {agent_id!r}: register it first.") from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"Token {name!r} of the external agent {agent_id} (shown once; keep it secret):")
        self.stdout.write(made.plaintext)
