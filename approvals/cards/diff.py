"""What a reviewer changed: the arguments approved against the model's, field by field.

Wherever an edited decision is shown (the decided card, the run page, the audit log), each changed
leaf reads as its path (``amount_cents``, ``items[0].qty``), the model's value struck and the approved
value marked; money reads as money (``$890.00`` → ``$40.00``). Values are model or reviewer input:
the template escapes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agents_runtime import Agent, Tool
from agents_runtime.presentation import Money
from approvals import agents
from approvals.cards.args import arg_view
from approvals.cards.call import find_tool
from approvals.cards.text import compact_json

#: Changes listed; the rest are counted ("and 3 more changes": the JSON beside has them all).
MAX_CHANGES = 50
#: How deep the walk goes; a change below shows as the whole value at this depth.
MAX_DEPTH = 12


@dataclass(frozen=True)
class Change:
    """One changed leaf: its path and its value before (the model's) and after (the approved)."""

    path: str
    #: ``changed``, ``added`` (only the approved has it) or ``removed`` (only the model's had it).
    kind: str
    before: str = ""
    after: str = ""


@dataclass(frozen=True)
class ArgsDiff:
    changes: tuple[Change, ...] = ()
    #: Changes past ``MAX_CHANGES``, not listed.
    more: int = 0

    def __bool__(self) -> bool:
        return bool(self.changes)


_MISSING = object()


def args_diff(model: Any, approved: Any, tool: Tool | None = None) -> ArgsDiff:
    """The changed leaves from ``model``'s arguments to ``approved``, in the order the model gave them
    (then the added ones); top-level money fields of ``tool`` read as money."""
    money = tool.money if tool is not None else {}
    changes = list(_walk(model, approved, "", 0, money))
    return ArgsDiff(tuple(changes[:MAX_CHANGES]), max(0, len(changes) - MAX_CHANGES))


def _same(a: Any, b: Any) -> bool:
    # ``True == 1`` and ``1 == 1.0``: a value of another JSON type is a change.
    return type(a) is type(b) and a == b


def _walk(before: Any, after: Any, path: str, depth: int, money: Mapping[str, Money]) -> Iterator[Change]:
    if _same(before, after):
        return
    nested = depth < MAX_DEPTH and type(before) is type(after) and isinstance(before, dict | list)
    if not nested:
        yield _change(path, before, after, money.get(path) if depth == 1 else None)
        return
    if isinstance(before, dict):
        keys = [*before, *(k for k in after if k not in before)]
        for key in keys:
            where = f"{path}.{key}" if path else str(key)
            yield from _walk(before.get(key, _MISSING), after.get(key, _MISSING), where, depth + 1, money)
        return
    for index in range(max(len(before), len(after))):
        b = before[index] if index < len(before) else _MISSING
        a = after[index] if index < len(after) else _MISSING
        yield from _walk(b, a, f"{path}[{index}]", depth + 1, money)


def _change(path: str, before: Any, after: Any, money: Money | None) -> Change:
    path = path or "arguments"
    if before is _MISSING:
        return Change(path, "added", after=_text(path, after, money))
    if after is _MISSING:
        return Change(path, "removed", before=_text(path, before, money))
    return Change(path, "changed", before=_text(path, before, money), after=_text(path, after, money))


def _text(path: str, value: Any, money: Money | None) -> str:
    if isinstance(value, str):
        # A string reads as itself (quoted: "" and " " are values too), invisible characters marked.
        return arg_view(path, compact_json(value), json_text=compact_json).text
    return arg_view(path, value, hint=money, json_text=compact_json).text


def decision_diff(decision: Any) -> ArgsDiff:
    """The diff of a decision as recorded (an audit row, an outcome: ``args``, ``edited_args``,
    ``agent_id``, ``tool_name``, ``via_agent_id``); empty when it was not approved with edits."""
    edited = getattr(decision, "edited_args", None)
    if edited is None:
        return ArgsDiff()
    agent: Agent | None
    try:
        agent = agents.get(str(decision.agent_id))
    except agents.UnknownAgent:
        agent = None
    # (A supervisor's mirror of a sub-agent's call: its money read by that sub-agent's tool.)
    tool = find_tool(agent, str(decision.tool_name or ""), via=getattr(decision, "via_agent_id", "") or None)
    return args_diff(getattr(decision, "args", None), edited, tool)
