"""Grants suggested from the decided history, and what people do with them (Accept, Dismiss).

Where reviewers approved the same kind of call many times (one agent's tool, for everyone, or
narrowed to an amount ceiling, one value of an argument or one end user), never declined one and
never edited one in the window, the desk offers a scoped grant that expires: "12 of 12 issue_refund
calls where amount_cents is at most $120.00, none edited, in 7 days", with what the grant would have matched
in the same history (``history.trial``) before anything is made. Nothing becomes automatic: a user
who may make grants for the agent (``policy.may_grant``) accepts (the grant is made through
``grants.allow``, whose making the audit log records) or dismisses it; each choice is a
``GrantSuggestionRecord``, and the same terms are not offered again for ``QUIET``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from agents_runtime import Grant
from agents_runtime.grants import GrantScope
from agents_runtime.store import DecisionAction
from approvals import agents
from approvals.models import AuditEntry, GrantRecord, GrantSuggestionRecord, SuggestionChoice
from approvals.policy import Access, may_grant
from approvals.services import grants
from approvals.services.history import WINDOW, DecidedCall, Terms, Trial, decided_calls, trial

#: A kind of call is suggested after this many approvals by reviewers in the window, with no
#: decline and no edit among them.
MIN_APPROVALS = 10
#: How long an accepted suggestion's grant lasts.
LASTS = timedelta(days=7)
#: How long a suggestion dismissed (or accepted) is not offered again.
QUIET = timedelta(days=14)
#: The longest argument value a suggestion names in its condition.
_MAX_VALUE_LENGTH = 100


class SuggestionGone(Exception):
    """The suggestion is no longer offered (history changed, it was chosen meanwhile)."""


@dataclass(frozen=True)
class Suggestion:
    terms: Terms
    trial: Trial

    @property
    def key(self) -> str:
        """A stable id for the page (the terms hashed)."""
        t = self.terms
        raw = json.dumps([t.agent_id, t.tool_name, t.scope.value, t.scope_value, t.condition])
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    @property
    def narrowed(self) -> str:
        """ "where amount_cents is at most $120.00", "where amount_cents <= 12", "for end user dana",
        or "" (a ceiling on a money argument reads as money, as the card shows it)."""
        parts = []
        if self.terms.condition:
            parts.append(f"where {_readable(self.terms)}")
        if self.terms.scope == GrantScope.RESOURCE:
            parts.append(f"for end user {self.terms.scope_value}")
        elif self.terms.scope == GrantScope.THREAD:
            parts.append(f"in thread {self.terms.scope_value}")
        return " ".join(parts)

    @property
    def headline(self) -> str:
        """ "12 of 12 issue_refund calls where amount_cents is at most $120.00 approved, none edited,
        in 7 days"."""
        t = self.trial
        what = f"{t.terms.tool_name} call{'s' if t.matched != 1 else ''}"
        narrowed = f" {self.narrowed}" if self.narrowed else ""
        return (
            f"{t.approved_by_person} of {t.matched} {what}{narrowed} approved by reviewers, "
            f"none declined, none edited, in {WINDOW.days} days"
        )

    @property
    def grant_line(self) -> str:
        scope = "everyone" if self.terms.scope == GrantScope.EVERYONE else self.narrowed
        when = f", when {self.terms.condition}" if self.terms.condition else ""
        return f"Allow {self.terms.tool_name} for {scope}{when}, for {LASTS.days} days"

    @property
    def summary(self) -> str:
        return f"{self.headline}. {self.trial.sentence}"


def _readable(terms: Terms) -> str:
    """A condition as a reviewer reads it: a ceiling on a money argument in money, else as written."""
    ceiling = _CEILING.fullmatch(terms.condition)
    if ceiling is None:
        return terms.condition
    name, value = ceiling.group(1), int(terms.condition.rsplit(" ", 1)[1])
    try:
        tool = agents.get(terms.agent_id).find_tool(terms.tool_name)
    except agents.UnknownAgent:
        return terms.condition
    formatted = tool.money[name].format(value) if tool is not None and name in tool.money else None
    return f"{name} is at most {formatted}" if formatted else terms.condition


def _number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _counts(rows: list[DecidedCall]) -> tuple[int, bool]:
    """Approvals by a person among ``rows``, and whether they qualify (no decline, no edit)."""
    approved = sum(1 for r in rows if r.approved_by_person)
    clean = not any(r.declined or r.edited for r in rows)
    return approved, clean and approved >= MIN_APPROVALS


def _candidates(agent_id: str, tool_name: str, rows: list[DecidedCall]) -> Iterator[tuple[Terms, int]]:
    """Terms worth trying, each with the approvals it would rest on (worked out here in Python,
    then confirmed by ``history.trial`` with the bounded CEL evaluator), broadest first."""
    everyone = Terms(agent_id, tool_name)
    approved, ok = _counts(rows)
    if ok:
        yield everyone, approved
        return
    approvals = [r for r in rows if r.approved_by_person]
    names = sorted({name for r in approvals for name in r.args})
    narrower: list[tuple[Terms, int]] = []
    for name in names:
        numbers = [r.args[name] for r in approvals if _number(r.args.get(name))]
        if numbers:
            ceiling = max(numbers)
            subset = [r for r in rows if _number(r.args.get(name)) and r.args[name] <= ceiling]
            count, ok = _counts(subset)
            if ok:
                narrower.append((Terms(agent_id, tool_name, condition=f"{name} <= {ceiling}"), count))
        texts = {r.args[name] for r in approvals if isinstance(r.args.get(name), str)}
        for text in sorted(t for t in texts if len(t) <= _MAX_VALUE_LENGTH):
            count, ok = _counts([r for r in rows if r.args.get(name) == text])
            if ok:
                condition = f"{name} == {json.dumps(text)}"
                narrower.append((Terms(agent_id, tool_name, condition=condition), count))
    for resource in sorted({r.resource_id for r in approvals if r.resource_id}):
        count, ok = _counts([r for r in rows if r.resource_id == resource])
        if ok:
            narrower.append((Terms(agent_id, tool_name, GrantScope.RESOURCE, resource), count))
    yield from sorted(narrower, key=lambda pair: -pair[1])


_CEILING = re.compile(r"(\w+) <= -?\d+")


def _family(scope: str, scope_value: str, condition: str) -> tuple[str, str, str]:
    """What a choice settles: these terms, or any ceiling on the same argument (a dismissed
    "amount_cents <= 12000" is not offered again as "amount_cents <= 12500" the next day)."""
    ceiling = _CEILING.fullmatch(condition)
    return scope, scope_value, f"{ceiling.group(1)} <=" if ceiling else condition


def _settled(agent_id: str, tool_name: str, now: datetime) -> set[tuple[str, str, str]]:
    """The terms not to offer: chosen lately, or already a live grant."""
    chosen = GrantSuggestionRecord.objects.filter(
        agent_id=agent_id, tool_name=tool_name, decided_at__gte=now - QUIET
    ).values_list("scope", "scope_value", "condition")
    live = (
        GrantRecord.objects.live(now)
        .filter(agent_id=agent_id, tool_name=tool_name)
        .values_list("scope", "scope_value", "condition")
    )
    return {_family(scope, value, condition) for scope, value, condition in [*chosen, *live]}


def suggestion_for(agent_id: str, tool_name: str, *, now: datetime | None = None) -> Suggestion | None:
    """The grant to suggest for one agent's tool (None: nothing qualifies, or it was settled)."""
    now = now or timezone.now()
    try:
        spec = agents.get(agent_id).find_tool(tool_name)
    except agents.UnknownAgent:
        return None
    if spec is None or not spec.takes_grants:
        return None
    rows = decided_calls(agent_id, tool_name, since=now - WINDOW)
    settled = _settled(agent_id, tool_name, now)
    for terms, _ in _candidates(agent_id, tool_name, rows):
        if _family(terms.scope.value, terms.scope_value, terms.condition) in settled:
            continue
        tried = trial(terms, now=now, calls=rows)
        if tried.approved_by_person >= MIN_APPROVALS and not tried.declined and not tried.edited:
            return Suggestion(terms, tried)
    return None


def suggestions(access: Access, *, now: datetime | None = None) -> list[Suggestion]:
    """The grants suggested to this user: for the agents they may make grants for only (one who
    sees an agent only for the calls escalated to them sees none of its suggestions)."""
    now = now or timezone.now()
    found = []
    for agent_id in access.agent_ids:
        if not may_grant(access, agent_id):
            continue
        tools = (
            AuditEntry.objects.filter(
                agent_id=agent_id, created_at__gte=now - WINDOW, action=DecisionAction.APPROVE
            )
            .order_by("tool_name")
            .values_list("tool_name", flat=True)
            .distinct()
        )
        for tool_name in tools:
            suggestion = suggestion_for(agent_id, tool_name, now=now)
            if suggestion is not None:
                found.append(suggestion)
    return found


def _offered(access: Access, terms: Terms) -> Suggestion:
    """The suggestion with these terms, if this user may choose it and it is still offered."""
    if terms.agent_id not in access.agent_ids:
        raise SuggestionGone("No such suggestion.")
    if not may_grant(access, terms.agent_id):
        raise PermissionDenied("You may not make standing grants for this agent's calls.")
    offered = suggestion_for(terms.agent_id, terms.tool_name)
    if offered is None or offered.terms != terms:
        raise SuggestionGone("This suggestion is no longer offered: the history changed or it was chosen.")
    return offered


def _record(access: Access, suggestion: Suggestion, choice: str, grant: Grant | None = None) -> None:
    t = suggestion.terms
    user = access.user if getattr(access.user, "pk", None) else None
    GrantSuggestionRecord.objects.create(
        agent_id=t.agent_id,
        tool_name=t.tool_name,
        scope=t.scope.value,
        scope_value=t.scope_value,
        condition=t.condition,
        choice=choice,
        summary=suggestion.summary,
        decided_by=user,
        decided_by_name=access.username,
        grant_id=None if grant is None else grant.id,
    )


def accept(access: Access, terms: Terms) -> Grant:
    """Make the suggested grant (expiring after ``LASTS``) and record the choice.
    ``PermissionDenied``: the user may not grant; ``SuggestionGone``: not offered (nothing made)."""
    suggestion = _offered(access, terms)
    made = grants.allow(
        access.for_agent(terms.agent_id),
        terms.tool_name,
        terms=grants.GrantTerms(terms.scope, LASTS, None, terms.condition),
        scope_value=terms.scope_value,
    )
    _record(access, suggestion, SuggestionChoice.ACCEPTED, made)
    return made


def dismiss(access: Access, terms: Terms) -> None:
    """Record that the user dismissed the suggestion: not offered again for ``QUIET``."""
    _record(access, _offered(access, terms), SuggestionChoice.DISMISSED)
