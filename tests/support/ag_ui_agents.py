"""The agent the AG-UI tests chat with (``AGENTS_RUNTIME=tests.support.ag_ui_agents:runtime``).

``concierge`` (scripted, no network) answers a greeting in text; asked for a refund it calls
``refund`` (needs approval), asked to wire money it calls ``wire`` (needs approval, and whoever
started the run may not approve it: separation of duties), asked to paint something it calls
``pick_colour``, which ``suspend()``s for a colour (its resume schema); a payout needs two
reviewers' approvals (``payout``). After a tool's result it
says what came back. ``EXECUTED`` counts each tool's runs in this process, by call id.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel

from agents_runtime import Agent, Call, Reply, Runtime, ScriptContext, ToolContext, scripted_model, tool

EXECUTED: Counter[str] = Counter()


class Colour(BaseModel):
    colour: str


@tool(requires_approval=True)
def refund(ctx: ToolContext, order_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund an order."""
    EXECUTED[ctx.tool_call_id] += 1
    return {"refunded": order_id, "amount_cents": amount_cents}


@tool(requires_approval=True, separate_duties=True)
def wire(ctx: ToolContext, to: str, amount_cents: int) -> dict[str, Any]:
    """Wire money out: someone other than whoever asked must approve it."""
    EXECUTED[ctx.tool_call_id] += 1
    return {"wired": amount_cents, "to": to}


@tool(requires_approval=True, approvals=2)
def payout(ctx: ToolContext, amount_cents: int) -> dict[str, Any]:
    """Pay out: two reviewers approve it."""
    EXECUTED[ctx.tool_call_id] += 1
    return {"paid_out": amount_cents}


@tool(resume_schema=Colour)
def pick_colour(ctx: ToolContext, item: str) -> dict[str, str]:
    """Ask the person which colour to paint ``item``."""
    if ctx.resume_data is None:
        ctx.suspend({"question": f"Which colour for the {item}?", "item": item})
    EXECUTED[ctx.tool_call_id] += 1
    return {"item": item, "colour": ctx.resume_data.colour}


def _number(text: str, default: int) -> int:
    """The last number standing alone in ``text``."""
    found = re.findall(r"(?<![\w#])\d+\b", text)
    return int(found[-1]) if found else default


def first(ctx: ScriptContext) -> Any:
    prompt = ctx.prompt.lower()
    if "refund" in prompt:
        order = re.search(r"#(\w+)", ctx.prompt)
        args = {"order_id": order.group(1) if order else "A1", "amount_cents": _number(prompt, 500)}
        return Call("refund", args, say="I'll refund that once the desk approves.")
    if "wire" in prompt:
        return Call("wire", {"to": "ACME", "amount_cents": _number(prompt, 1000)})
    if "payout" in prompt:
        return Call("payout", {"amount_cents": _number(prompt, 100)})
    if "paint" in prompt:
        return Call("pick_colour", {"item": ctx.prompt.split()[-1]})
    return Reply(f"Hello! You said: {ctx.prompt}")


def second(ctx: ScriptContext) -> Any:
    return Reply("Result: " + json.dumps(ctx.results, sort_keys=True, default=str))


def build() -> Runtime:
    model = scripted_model(first, second, name="scripted-concierge")
    return Runtime(agents=[Agent("concierge", model=model, tools=[refund, wire, pick_colour, payout])])


runtime = build()
