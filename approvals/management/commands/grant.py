"""``manage.py grant USER --review AGENT… | --admin | --audit | --escalation GROUP… [--revoke]``: who
may review which agents.

Access lives in groups (see ``approvals.policy``): ``--review`` puts the user in Reviewers (may
decide) and in ``agent:<id>`` for each agent named (sees only those); ``--admin`` puts them in Admins
(decides every agent, reads the audit log, manages users in the Django admin); ``--audit`` puts them in
Auditors (reads every agent's calls, ended runs and audit log; decides nothing); ``--escalation`` puts
them in groups calls are escalated to (they see and decide those calls, and nothing else: no
permission is added). ``--revoke`` takes the same away. The Django admin edits the same groups.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from approvals import agents
from approvals.models import ParkedCallRecord
from approvals.policy import (
    ADMINS,
    AGENT_GROUP_PREFIX,
    ALL_AGENTS_GROUPS,
    AUDITORS,
    REVIEWERS,
    agent_group_name,
    escalation_groups,
)


class Command(BaseCommand):
    help = (
        "Let a user review some agents (--review AGENT...), administer (--admin), audit (--audit) or"
        " act on the calls escalated to some groups (--escalation GROUP...); --revoke undoes it."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--review", nargs="+", metavar="AGENT", default=[], help="Agent ids to review.")
        parser.add_argument("--admin", action="store_true", help="Admins: every agent, the audit log, users.")
        parser.add_argument("--audit", action="store_true", help="Auditors: see all, decide nothing.")
        parser.add_argument(
            "--escalation",
            nargs="+",
            metavar="GROUP",
            default=[],
            help="Groups calls are escalated to (the tools' escalate_to): their calls only.",
        )
        parser.add_argument("--revoke", action="store_true", help="Take these rights away instead.")

    def handle(self, *args: Any, **options: Any) -> None:
        reviewed: list[str] = options["review"]
        escalations: list[str] = options["escalation"]
        if not reviewed and not escalations and not options["admin"] and not options["audit"]:
            raise CommandError(
                "Say what to grant: --review AGENT [AGENT ...], --admin, --audit and/or --escalation GROUP."
            )
        known = [agent.id for agent in agents.all_agents()]
        unknown = [a for a in reviewed if a not in known]
        if unknown:
            raise CommandError(f"No agent {', '.join(map(repr, unknown))}. Agents: {', '.join(known)}.")
        _check_escalation_groups(escalations, revoke=options["revoke"])
        User = get_user_model()
        try:
            user = User._default_manager.get_by_natural_key(options["username"])
        except User.DoesNotExist:
            raise CommandError(
                f"No user {options['username']!r} (create it with createsuperuser or the admin)."
            ) from None

        names = [agent_group_name(a) for a in reviewed] + escalations
        if reviewed and not options["revoke"]:
            names.append(REVIEWERS)
        if options["admin"]:
            names.append(ADMINS)
        if options["audit"]:
            names.append(AUDITORS)
        with transaction.atomic():
            groups = [Group.objects.get_or_create(name=name)[0] for name in names]
            if options["revoke"]:
                user.groups.remove(*groups)
                designated = user.groups.filter(name__startswith=AGENT_GROUP_PREFIX).exists()
                if reviewed and not designated:
                    # Reviewers without an agent group see every agent: no longer a reviewer at all.
                    user.groups.remove(*Group.objects.filter(name=REVIEWERS))
                    names.append(REVIEWERS)
            else:
                user.groups.add(*groups)
        verb = "removed from" if options["revoke"] else "added to"
        self.stdout.write(self.style.SUCCESS(f"{user.get_username()} {verb}: {', '.join(names)}"))
        current = sorted(user.groups.values_list("name", flat=True))
        self.stdout.write(f"Groups now: {', '.join(current) or '(none: sees no agent)'}")


def _check_escalation_groups(named: list[str], *, revoke: bool) -> None:
    """Only groups calls are escalated to: those the tools declare, and any a waiting call was
    escalated to (a run's own deadline may name one). The groups that carry rights of their own
    have options of their own: a typo must not make someone a reviewer of every agent."""
    builtin = [g for g in named if g in ALL_AGENTS_GROUPS or g.startswith(AGENT_GROUP_PREFIX)]
    if builtin:
        raise CommandError(
            f"{', '.join(map(repr, builtin))}: not an escalation group; use --review, --admin or --audit."
        )
    if revoke:
        return  # (a group no call escalates to any more may still be left)
    waiting = ParkedCallRecord.objects.undecided().exclude(escalated_to=None).values_list("escalated_to")
    targets = set(escalation_groups()) | {str(name) for (name,) in waiting.distinct()}
    unknown = [g for g in named if g not in targets]
    if unknown:
        listed = ", ".join(sorted(targets)) or "none (no tool declares escalate_to)"
        wrong = ", ".join(map(repr, unknown))
        raise CommandError(f"No call escalates to {wrong}. Escalation groups: {listed}.")
