"""The recording's agents (``approver``, ``asker``, ``nomem``: tests/api/mastra/server.mjs) on our runtime.

Same tools and the same scripted behaviour as Mastra's ``lib/scripted-model.mjs``: on a user turn
one tool call with id ``<agent>-call_<n>`` (``n`` counts per agent), the arguments taken from the
prompt; after a tool result the text ``[scripted-<agent>] MODEL_SAW_TOOL_RESULTS <json>``.
``AGENTS_RUNTIME=tests.support.mastra_agents:runtime`` serves them.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from pydantic import BaseModel

from agents_runtime import Agent, Call, Reply, Runtime, ScriptContext, ToolContext, scripted_model, tool


class Color(BaseModel):
    color: str


@tool(requires_approval=True, name="deleteFile")
def delete_file(ctx: ToolContext, path: str) -> dict[str, str]:
    """Delete a file (requires human approval)"""
    return {"deleted": path}


@tool(resume_schema=Color, name="askColor")
def ask_color(ctx: ToolContext, item: str) -> dict[str, str]:
    """Asks the human for a colour via suspend()"""
    if ctx.resume_data is None:
        ctx.suspend({"question": f"Which colour for {item}?", "item": item})
    return {"item": item, "color": ctx.resume_data.color}


def _path_arg(text: str) -> dict[str, Any]:
    match = re.search(r"/\S+", text)
    return {"path": match.group(0) if match else "/tmp/default.txt"}


def _item_arg(text: str) -> dict[str, Any]:
    words = text.split()
    return {"item": words[-1] if words else "thing"}


def _model(agent_id: str, tool_name: str, args: Any) -> Any:
    counter = itertools.count(1)
    calls: dict[str, str] = {}

    def first(ctx: ScriptContext) -> Any:
        call_id = f"{agent_id}-call_{next(counter)}"
        calls[ctx.prompt] = call_id
        return Call(tool_name, args(ctx.prompt), tool_call_id=call_id)

    def second(ctx: ScriptContext) -> Any:
        seen = [
            {
                "toolCallId": calls.get(ctx.prompt, ""),
                "toolName": name,
                # A declined call's result is the reason (text), as Mastra shows it to the model.
                "output": {"type": "text", "value": value}
                if isinstance(value, str)
                else {"type": "json", "value": value},
            }
            for name, value in ctx.results.items()
        ]
        return Reply(
            f"[scripted-{agent_id}] MODEL_SAW_TOOL_RESULTS " + json.dumps(seen, separators=(",", ":"))
        )

    return scripted_model(first, second, name=f"scripted-{agent_id}")


def build() -> Runtime:
    return Runtime(
        agents=[
            Agent("approver", model=_model("approver", "deleteFile", _path_arg), tools=[delete_file]),
            Agent("asker", model=_model("asker", "askColor", _item_arg), tools=[ask_color]),
            Agent("nomem", model=_model("nomem", "deleteFile", _path_arg), tools=[delete_file]),
        ]
    )


runtime = build()
