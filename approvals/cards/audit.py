"""What a row of the audit log shows besides the record itself: the call's title as its card read
("Refund $890.00 · A-1044"), the agent by name, and links to the bulk decision and the standing
grant that decided it.

The title is the card's (``call.call_title``, with the tool's presentation from the runtime); an
agent no longer served, or a tool it no longer has, reads by the tool's name. Arguments are model
output: the template escapes the title like any other text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.urls import reverse

from agents_runtime import Agent
from approvals import agents
from approvals.cards.call import call_title, find_tool
from approvals.models import AuditEntry


@dataclass(frozen=True)
class AuditRowView:
    entry: AuditEntry
    agent_name: str
    #: The call's title as its card read (empty: the row records no call's arguments, e.g. a grant
    #: made or revoked, whose detail says what it allows).
    title: str
    #: Approved with edited arguments: the title of what ran instead.
    edited_title: str
    batch_url: str
    grant_url: str


def _agent(agent_id: str, known: dict[str, Agent | None]) -> Agent | None:
    if agent_id not in known:
        try:
            known[agent_id] = agents.get(agent_id)
        except agents.UnknownAgent:
            known[agent_id] = None
    return known[agent_id]


def grant_url(grant_id: int) -> str:
    """The grant's row on the grants page (every grant listed: it may be revoked or used up since)."""
    return f"{reverse('approvals:grants')}?show=all#grant-{grant_id}"


def audit_row(entry: AuditEntry, known: dict[str, Agent | None]) -> AuditRowView:
    agent = _agent(entry.agent_id, known)
    # (A supervisor's mirror of a sub-agent's call: titled by that sub-agent's tool, as its card was.)
    tool = find_tool(agent, entry.tool_name, via=entry.via_agent_id or None)
    title = edited = ""
    if entry.args is not None or entry.suspend_payload is not None:
        title = call_title(
            tool,
            entry.tool_name,
            args=entry.args,
            suspend_payload=entry.suspend_payload,
            approval=entry.args is not None,
        )
    if entry.edited_args is not None:
        edited = call_title(tool, entry.tool_name, args=entry.edited_args, approval=True)
    return AuditRowView(
        entry=entry,
        agent_name=(agent.name if agent is not None else None) or entry.agent_id,
        title=title,
        edited_title=edited,
        batch_url=reverse("approvals:batch", args=[entry.batch_id]) if entry.batch_id else "",
        grant_url=grant_url(entry.grant_id) if entry.grant_id else "",
    )


def audit_rows(entries: Iterable[AuditEntry]) -> list[AuditRowView]:
    """A page's rows; each agent is looked up once."""
    known: dict[str, Agent | None] = {}
    return [audit_row(entry, known) for entry in entries]
