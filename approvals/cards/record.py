"""An ended run's record page, prepared for the template: the transcript with each decision inline.

The transcript comes from the run's permanent record (``EndedRun``), the decisions from the audit
log (which outlives the record when it is pruned). A decision is shown under the tool call it
decided, matched by tool call id; a supervisor's call into a sub-agent (``agent_<id>``) carries the
decisions taken on its mirrored calls (``<delegation id>:<inner id>``). Invalid attempts are kept
apart (the audit log shows them on request); lost races stay, marked as such.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings

from agents_runtime.store import DecisionAction, Outcome
from approvals import agents
from approvals.cards.run import MessageView, conversation
from approvals.models import AuditEntry, EndedRun

#: The setting that says how long records are kept (empty: forever).
RETENTION_SETTING = "RUN_RECORD_RETENTION_DAYS"


@dataclass
class TranscriptItem:
    message: MessageView
    #: Decisions taken on this tool call, oldest first (tool calls only).
    decisions: list[AuditEntry] = field(default_factory=list)


@dataclass
class RunRecordView:
    record: EndedRun
    agent_name: str
    #: Whether the agent is still registered (the breadcrumb links to its inbox).
    agent_registered: bool
    items: list[TranscriptItem]
    #: Decisions that match no tool call of the transcript (e.g. the record was pruned).
    unplaced: list[AuditEntry]
    retention_days: int | None

    @property
    def pruned(self) -> bool:
        return self.record.pruned

    @property
    def headline(self) -> tuple[str, str]:
        """What happened, as the record's heading says it, and its badge's class: a run whose call was
        declined or let pass its deadline "completed" for the model, not for the reader."""
        if self.record.status == "failed":
            return "Failed", "outcome-failed"
        decided = [d for item in self.items for d in item.decisions] + self.unplaced
        taken = [d for d in decided if d.outcome not in (Outcome.LOST_RACE, Outcome.NOT_FOUND)]
        expired = [d for d in taken if d.deadline_line]
        if expired:
            return expired[-1].deadline_line, "outcome-expired"
        if any(d.action == DecisionAction.DECLINE for d in taken):
            return "Declined", "outcome-declined"
        return "Completed", "outcome-completed"


def _decided_call(entry: AuditEntry, tool_call_ids: set[str]) -> str | None:
    if entry.tool_call_id in tool_call_ids:
        return entry.tool_call_id
    # A supervisor's mirror of a sub-agent's call: "<delegation call id>:<inner call id>".
    delegation, _, _ = entry.tool_call_id.partition(":")
    return delegation if delegation in tool_call_ids else None


def record_view(record: EndedRun, decisions: Iterable[AuditEntry]) -> RunRecordView:
    try:
        agent = agents.get(record.agent_id)
        agent_name, registered = agent.name or agent.id, True
    except agents.UnknownAgent:
        agent_name, registered = record.agent_id, False
    messages = conversation(list(record.transcript or []))
    items = [TranscriptItem(m) for m in messages]
    calls = {item.message.tool_call_id: item for item in items if item.message.kind == "tool-call"}
    unplaced: list[AuditEntry] = []
    for entry in decisions:
        if entry.outcome == Outcome.INVALID:
            continue
        call_id = _decided_call(entry, {c for c in calls if c is not None})
        if call_id is None:
            unplaced.append(entry)
        else:
            calls[call_id].decisions.append(entry)
    return RunRecordView(
        record=record,
        agent_name=agent_name,
        agent_registered=registered,
        items=items,
        unplaced=unplaced,
        retention_days=retention_days(),
    )


def retention_days() -> int | None:
    """``RUN_RECORD_RETENTION_DAYS``: how many days records are kept after a run ends (None: forever)."""
    days = getattr(settings, RETENTION_SETTING, None)
    return int(days) if days else None
