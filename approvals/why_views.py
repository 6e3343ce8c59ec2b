"""Why a call waits, as its card shows it: what the user asked, what the agent said before the call,
what earlier calls found, the approval rule's reason and the tool's description (gathered when the
run parked: ``agents_runtime._context``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agents_runtime import Agent, AgentRunToolCall, Tool
from approvals.arg_views import ArgView, values_view
from approvals.display import reveal_invisible
from approvals.json_text import compact_json


@dataclass(frozen=True)
class WhyView:
    """Why the call waits: what the user asked, what the agent said, what earlier calls found."""

    user_message: str = ""
    agent_said: str = ""
    #: ``(tool name, its key fields)`` of earlier results in the run.
    key_results: tuple[tuple[str, tuple[ArgView, ...]], ...] = ()
    description: str = ""
    approval_reason: str = ""
    #: ``(question, the answer's fields)`` given earlier in the run (a follow-up question).
    previous_answers: tuple[tuple[str, tuple[ArgView, ...]], ...] = ()
    #: ``(grant, why its condition failed)``: grants that did not apply, so the call waits.
    grant_failures: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return any(
            (
                self.user_message,
                self.agent_said,
                self.key_results,
                self.description,
                self.approval_reason,
                self.previous_answers,
                self.grant_failures,
            )
        )


def find_tool(agent: Agent | None, tool_name: str) -> Tool | None:
    return agent.find_tool(tool_name) if agent is not None else None


def _first_paragraph(text: str | None) -> str:
    return (text or "").strip().split("\n\n", 1)[0].strip()


def why_view(call: AgentRunToolCall, tool: Tool | None, agent: Agent | None) -> WhyView:
    context = call.context
    description = _first_paragraph(tool.description if tool is not None else None)
    if context is None:
        return WhyView(description=description)
    return WhyView(
        user_message=reveal_invisible(context.user_message or ""),
        agent_said=reveal_invisible(context.agent_said or ""),
        key_results=tuple(
            (r.tool_name, tuple(values_view(r.values, find_tool(agent, r.tool_name), json_text=compact_json)))
            for r in context.key_results
        ),
        description=description,
        approval_reason=reveal_invisible(context.approval_reason or ""),
        previous_answers=tuple(
            (
                reveal_invisible(a.question or a.tool_name),
                tuple(
                    values_view(a.answer, find_tool(agent, a.tool_name), json_text=compact_json)
                    if isinstance(a.answer, Mapping)
                    else values_view({"answer": a.answer}, None, json_text=compact_json)
                ),
            )
            for a in context.previous_answers
        ),
        grant_failures=tuple(
            (reveal_invisible(f.grant), reveal_invisible(f.error)) for f in context.grant_failures
        ),
    )
