"""What the batch page shows: the preview of a bulk decision and its progress.

The preview groups the batch's calls by tool and shows, per tool, the arguments that are the same in
every call once and only those that differ call by call: what a reviewer must check before deciding
them all. Arguments are model output; the template escapes them like any other text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from approvals.cards.text import compact_json
from approvals.models.batches import Batch, BatchItem

#: Calls listed per tool in the preview (the count says how many there are in all).
PREVIEW_ROWS = 200


@dataclass(frozen=True)
class CallRow:
    item: BatchItem
    #: The differing arguments (name, compact JSON), in the order of ``ToolGroup.differing``
    #: ("—": not given).
    values: list[tuple[str, str]]


@dataclass(frozen=True)
class ToolGroup:
    tool_name: str
    count: int
    #: Arguments with one value in every call of the group: (name, compact JSON).
    same: list[tuple[str, str]]
    differing: list[str]
    rows: list[CallRow]


@dataclass(frozen=True)
class BatchView:
    batch: Batch
    groups: list[ToolGroup]
    skipped: list[BatchItem]
    decided: list[BatchItem]
    counts: dict[str, int] = field(default_factory=dict)

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


def tool_group(tool_name: str, items: list[BatchItem]) -> ToolGroup:
    names: list[str] = []
    for item in items:
        names.extend(n for n in _args(item) if n not in names)
    same: list[tuple[str, str]] = []
    differing: list[str] = []
    for name in names:
        values = [compact_json(_args(item)[name]) if name in _args(item) else None for item in items]
        if len(set(values)) == 1 and values[0] is not None:
            same.append((name, values[0]))
        else:
            differing.append(name)
    rows = [
        CallRow(
            item=item,
            values=[(n, compact_json(_args(item)[n]) if n in _args(item) else "—") for n in differing],
        )
        for item in items[:PREVIEW_ROWS]
    ]
    return ToolGroup(tool_name=tool_name, count=len(items), same=same, differing=differing, rows=rows)


def batch_view(batch: Batch) -> BatchView:
    items = list(batch.items.all())
    # Taken on: every item but those skipped before the batch started (their decided_at is unset).
    taken = [i for i in items if not (i.state == BatchItem.State.SKIPPED and i.decided_at is None)]
    by_tool: dict[str, list[BatchItem]] = {}
    for item in taken:
        by_tool.setdefault(item.tool_name, []).append(item)
    counts = {state.value: 0 for state in BatchItem.State}
    for item in items:
        counts[item.state] += 1
    counts["total"] = len(items)
    return BatchView(
        batch=batch,
        groups=[tool_group(name, group) for name, group in sorted(by_tool.items())],
        skipped=[i for i in items if i.state == BatchItem.State.SKIPPED],
        decided=[i for i in items if i.state == BatchItem.State.DECIDED],
        counts=counts,
    )
