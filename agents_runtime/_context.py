"""Why a call waits: what a parked call's card shows beside it, gathered once, when the run parks.

The conversation is at hand then (the run's snapshot is being written); reading it back for every
card of an inbox page would cost a snapshot per run. Kept small: texts are shortened, only the
fields a tool marks as key of its results are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)

from ._host import RunAgent
from .store import ParkedCall
from .tools import to_jsonable
from .vocabulary import CallKind, DecisionAction

#: Characters kept of the user's message and of what the agent said.
TEXT_CHARS = 1_000
#: Key results kept (the latest ones).
MAX_KEY_RESULTS = 5


def _short(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


def _find_tool(agent: RunAgent, name: str) -> Any:
    found = agent._tools_by_name.get(name)
    if found is None:
        for sub in agent.agents:
            found = _find_tool(sub, name)
            if found is not None:
                break
    return found


def conversation_context(agent: RunAgent, messages: Sequence[ModelMessage]) -> dict[str, Any]:
    """The last user message, what the agent said last, and the key fields of earlier results."""
    user_message: str | None = None
    agent_said: str | None = None
    key_results: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    user_message = part.content if isinstance(part.content, str) else str(part.content)
                elif isinstance(part, ToolReturnPart):
                    spec = _find_tool(agent, part.tool_name)
                    keys = getattr(spec, "key_results", ())
                    content = to_jsonable(part.content) if keys else None
                    if isinstance(content, dict):
                        values = {k: content[k] for k in keys if k in content}
                        if values:
                            key_results.append({"tool_name": part.tool_name, "values": values})
        elif isinstance(message, ModelResponse):
            said = "\n".join(p.content for p in message.parts if isinstance(p, TextPart) and p.content)
            # The turn that made the call; an earlier turn's text is older than the call.
            agent_said = said or None
    return {
        "user_message": None if user_message is None else _short(user_message),
        "agent_said": None if agent_said is None else _short(agent_said),
        "key_results": key_results[-MAX_KEY_RESULTS:],
    }


def previous_answers(calls: Iterable[ParkedCall]) -> list[dict[str, Any]]:
    """The answers given to the decided ``suspend()`` calls a continuation carries on from."""
    answers = []
    for call in calls:
        decision = call.decision
        if call.kind != CallKind.INPUT or decision is None or decision.action != DecisionAction.RESUME:
            continue
        payload = call.suspend_payload
        question = payload.get("question") if isinstance(payload, Mapping) else None
        answers.append(
            {
                "tool_name": call.tool_name,
                "question": question if isinstance(question, str) else None,
                "answer": decision.resume_data,
            }
        )
    return answers


def call_context(shared: Mapping[str, Any], *, approval_reason: str = "") -> dict[str, Any]:
    return {**shared, "approval_reason": approval_reason or None}
