"""What the batch page shows: the preview of a bulk decision and its progress.

The preview groups the batch's calls by tool (a supervisor's mirrors of a sub-agent's calls by that
sub-agent's tool: a namesake of the supervisor's is another group) and shows, per tool, the
arguments that are the same in every call once and only those that differ call by call, money as
the card formats it, and what each call would do (its tool's preview): what a reviewer must check
before deciding them all. Arguments and previews are model or tool output; the template escapes
them like any other text.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Decimal, localcontext
from typing import Any

from agents_runtime import Agent, Preview, Tool, Would
from agents_runtime.presentation import Money
from agents_runtime.store import would_approve_line
from approvals.cards.call import find_tool, via_name
from approvals.cards.text import compact_json
from approvals.models import Batch, BatchItem
from approvals.services.batches import Prediction

#: Calls listed per tool in the preview (the count says how many there are in all).
PREVIEW_ROWS = 200


@dataclass(frozen=True)
class CallRow:
    item: BatchItem
    #: The differing arguments (name, compact JSON or money as "$890.00"), in the order of
    #: ``ToolGroup.differing`` ("—": not given).
    values: list[tuple[str, str]]

    @functools.cached_property
    def preview(self) -> Preview | None:
        """What the call would do, as the preview showed it when the batch was drafted."""
        return Preview.from_json(self.item.preview)


@dataclass(frozen=True)
class ToolGroup:
    tool_name: str
    count: int
    #: The sub-agent whose calls these are, by name (a supervisor's mirrors; "": the agent's own).
    via_agent: str
    #: Arguments with one value in every call of the group: (name, compact JSON).
    same: list[tuple[str, str]]
    differing: list[str]
    rows: list[CallRow]

    @functools.cached_property
    def has_previews(self) -> bool:
        return any(row.preview is not None for row in self.rows)


@dataclass(frozen=True)
class BatchView:
    batch: Batch
    groups: list[ToolGroup]
    skipped: list[BatchItem]
    decided: list[BatchItem]
    counts: dict[str, int] = field(default_factory=dict)
    #: Every call the batch takes on (the groups list the first ``PREVIEW_ROWS`` of each tool).
    taken: list[BatchItem] = field(default_factory=list)

    @property
    def decidable(self) -> int:
        """Calls the batch will decide (draft) or took on (started): all but those skipped up front."""
        return sum(g.count for g in self.groups)

    @property
    def done(self) -> int:
        return self.counts.get(BatchItem.State.DECIDED, 0) + self.counts.get(BatchItem.State.SKIPPED, 0)

    @property
    def percent(self) -> int:
        total = self.counts.get("total", 0)
        return round(100 * self.done / total) if total else 100


def _args(item: BatchItem) -> dict[str, Any]:
    return item.args if isinstance(item.args, dict) else {}


def _value(name: str, value: Any, money: Mapping[str, Money]) -> str:
    """An argument as the card shows it: money formatted by its tool ("$890.00"), else compact JSON."""
    hint = money.get(name)
    formatted = hint.format(value) if hint is not None else None
    return formatted if formatted is not None else compact_json(value)


def _tool(agent: Agent | None, tool_name: str, via_agent_id: str) -> Tool | None:
    """The tool of a batch's call: a mirror's is its sub-agent's, as the decision will judge it."""
    return find_tool(agent, tool_name, via=via_agent_id or None)


def tool_group(
    tool_name: str, via_agent_id: str, items: list[BatchItem], agent: Agent | None = None
) -> ToolGroup:
    """The calls of one tool (``via_agent_id``: of that sub-agent's, "" the agent's own)."""
    tool = _tool(agent, tool_name, via_agent_id)
    money = tool.money if tool is not None else {}
    names: list[str] = []
    for item in items:
        names.extend(n for n in _args(item) if n not in names)
    same: list[tuple[str, str]] = []
    differing: list[str] = []
    for name in names:
        values = [_value(name, _args(item)[name], money) if name in _args(item) else None for item in items]
        if len(set(values)) == 1 and values[0] is not None:
            same.append((name, values[0]))
        else:
            differing.append(name)
    rows = [
        CallRow(
            item=item,
            values=[(n, _value(n, _args(item)[n], money) if n in _args(item) else "—") for n in differing],
        )
        for item in items[:PREVIEW_ROWS]
    ]
    return ToolGroup(
        tool_name=tool_name,
        count=len(items),
        via_agent=via_name(agent, via_agent_id) if via_agent_id else "",
        same=same,
        differing=differing,
        rows=rows,
    )


def batch_view(batch: Batch, agent: Agent | None = None) -> BatchView:
    """The batch's calls by tool (``agent``: its tools format their money)."""
    items = list(batch.items.all())
    # Taken on: every item but those skipped before the batch started (their decided_at is unset).
    taken = [i for i in items if not (i.state == BatchItem.State.SKIPPED and i.decided_at is None)]
    # By tool and sub-agent: two namesakes are two tools, each group read by its own.
    by_tool: dict[tuple[str, str], list[BatchItem]] = {}
    for item in taken:
        by_tool.setdefault((item.tool_name, item.via_agent_id), []).append(item)
    counts = {state.value: 0 for state in BatchItem.State}
    for item in items:
        counts[item.state] += 1
    counts["total"] = len(items)
    return BatchView(
        batch=batch,
        groups=[tool_group(name, via, group, agent) for (name, via), group in sorted(by_tool.items())],
        skipped=[i for i in items if i.state == BatchItem.State.SKIPPED],
        decided=[i for i in items if i.state == BatchItem.State.DECIDED],
        counts=counts,
        taken=taken,
    )


# -- what approving them all would do, by rule ---------------------------------------------------


@dataclass(frozen=True)
class RuleGroup:
    """Calls the rules answer alike: "23 will get your vote, 1 of 2: nothing runs yet"."""

    kind: str
    line: str
    count: int
    #: Their money, summed per currency ("$1,250.00"; "" when the tool marks no field as money).
    total: str
    #: Approving them changes something (decides, or records a vote).
    takes_effect: bool


def _kind(would: Would) -> tuple[str, dict[str, object]]:
    if would.effect == "decides":
        return ("escalated", {"group": would.escalated_to}) if would.escalated_to else ("decides", {})
    if would.effect == "vote":
        return "vote", {"votes": len(would.votes), "required": would.required}
    if would.effect == "refused":
        return would.rule, {"holder": would.holder}
    return "not_waiting", {}


def money_total(items: Iterable[BatchItem], agent: Agent | None) -> str:
    """The money of ``items``' arguments, per currency, as their tools format it ("$1,250.00")."""
    sums: dict[Money, Decimal] = {}
    for item in items:
        tool = _tool(agent, item.tool_name, item.via_agent_id)
        for name, hint in (tool.money if tool is not None else {}).items():
            amount = hint.major(_args(item).get(name))
            if amount is not None:
                # Summed in major units: a tool in cents and one in dollars add up alike.
                major = Money(currency=hint.code)
                sums[major] = _exact_sum(sums.get(major, Decimal(0)), amount)
    return " + ".join(text for hint, total in sums.items() if (text := hint.format(total)))


def _exact_sum(a: Decimal, b: Decimal) -> Decimal:
    # The default context rounds a sum to 28 digits, and the total is part of what is approved.
    with localcontext(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN):
        return a + b


def rule_groups(predictions: list[Prediction], agent: Agent | None) -> list[RuleGroup]:
    """The draft's calls grouped by what approving them would do, those that take effect first."""
    grouped: dict[tuple[str, str], tuple[dict[str, object], list[BatchItem]]] = {}
    for p in predictions:
        kind, values = _kind(p.would)
        key = (kind, str(sorted(values.items())))
        grouped.setdefault(key, (values, []))[1].append(p.item)
    groups = [
        RuleGroup(
            kind=kind,
            line=would_approve_line(kind, **values),
            count=len(items),
            total=money_total(items, agent),
            takes_effect=kind in {"decides", "vote", "escalated"},
        )
        for (kind, _), (values, items) in grouped.items()
    ]
    return sorted(groups, key=lambda g: (not g.takes_effect, -g.count))
