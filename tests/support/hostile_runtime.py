"""A runtime for the hostile-input tests: a scripted model that says whatever a test tells it to.

Agent ``hostile``:
- ``pay(target, amount=0.0, data=None)`` always needs approval (its ``data`` takes any JSON);
- ``ask(topic)`` calls ``suspend()`` and takes any JSON answer (no resume schema);
- ``fill(topic)`` calls ``suspend()`` with a resume schema of string and integer fields; a test may
  give it another schema, which is set past ``tool()``'s checks (what an older version stored).

The first model step of a run is what the test registered for the run's prompt (``Hostile.start``);
the second is the registered final reply, or a summary of the tool results. ``boss`` supervises
``worker``, whose model plays the same registered steps (its calls are mirrored on the boss).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agents_runtime import Agent, Call, Reply, RunResult, Runtime, Tool, ToolContext, tool
from agents_runtime.scripted import _current_turn
from approvals.store import DjangoRunStore
from tests.support.runtime_helpers import ToolLog

#: What ``AGENTS_RUNTIME`` imports (set by ``build_runtime``).
runtime: Runtime | None = None

FILL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "count": {"type": "integer", "minimum": 0},
    },
    "required": ["name"],
}


@dataclass(frozen=True)
class RawCall:
    """A tool call whose arguments are the JSON text a model sent (``-1e400``, huge integers...)."""

    tool: str
    json_args: str
    tool_call_id: str = "raw_1"


@dataclass
class Hostile:
    runtime: Runtime
    executed: dict[str, ToolLog]
    #: The first step of each prompt's run, and its final reply.
    steps: dict[str, Any] = field(default_factory=dict)
    replies: dict[str, Any] = field(default_factory=dict)
    _prompts: itertools.count[int] = field(default_factory=itertools.count)

    def agent(self, agent_id: str = "hostile") -> Agent:
        return self.runtime.get_agent(agent_id)

    def start(self, first: Any, *, reply: Any = None, agent_id: str = "hostile") -> RunResult:
        """Start a run whose model first plays ``first`` (a ``Call``, calls or a ``Reply``)."""
        prompt = f"prompt-{next(self._prompts)}"
        self.steps[prompt] = first
        if reply is not None:
            self.replies[prompt] = reply
        return async_to_sync(self.agent(agent_id).generate)(prompt)

    def suspended(self, agent_id: str = "hostile", **filters: Any) -> list[Any]:
        return list(async_to_sync(self.agent(agent_id).list_suspended_runs)(**filters).runs)

    @property
    def ran(self) -> int:
        """How many times any tool's body ran to the end."""
        return sum(log.count for log in self.executed.values())


def _response(outcome: Any) -> ModelResponse:
    if isinstance(outcome, Reply):
        return ModelResponse(parts=[TextPart(outcome.text)])
    parts = []
    for index, call in enumerate(outcome if isinstance(outcome, list) else [outcome]):
        if isinstance(call, RawCall):
            parts.append(ToolCallPart(call.tool, call.json_args, tool_call_id=call.tool_call_id))
        else:
            call_id = call.tool_call_id if call.tool_call_id is not None else f"call_{index}"
            parts.append(ToolCallPart(call.tool, dict(call.args), tool_call_id=call_id))
    return ModelResponse(parts=parts)


def scripted(first: Callable[[str], Any], replies: dict[str, Any], name: str) -> FunctionModel:
    """The model of a hostile agent: the registered first step, then the reply (or a summary).

    Streams like a real model: text in two deltas, tool calls as JSON text (sent as given for a
    ``RawCall``; ``json.dumps`` writes NaN and the infinities as JavaScript does).
    """

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt, step, results = _current_turn(messages)
        if step == 0:
            return _response(first(prompt))
        summary = "; ".join(f"{name}: {value}" for name, value in results) or "Done."
        return _response(replies.get(prompt, Reply(summary)))

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        response = respond(messages, info)
        for part in response.parts:
            if isinstance(part, TextPart):
                half = len(part.content) // 2
                yield part.content[:half]
                yield part.content[half:]
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        if calls:
            yield {
                i: DeltaToolCall(
                    name=c.tool_name,
                    json_args=c.args if isinstance(c.args, str) else json.dumps(c.args),
                    tool_call_id=c.tool_call_id,
                )
                for i, c in enumerate(calls)
            }

    return FunctionModel(respond, stream_function=stream, model_name=name)


def with_schema(spec: Tool, schema: Any) -> Tool:
    """``spec`` with another resume schema, set past the checks of ``tool()`` (a frozen dataclass)."""
    object.__setattr__(spec, "resume_schema", schema)
    return spec


def build_runtime(fill_schema: Any = None) -> Hostile:
    """A fresh runtime on the test database; also what ``AGENTS_RUNTIME`` imports from now on."""
    global runtime
    executed = {name: ToolLog() for name in ("pay", "ask", "fill", "wipe")}

    @tool(requires_approval=True)
    def pay(target: str, amount: float = 0.0, data: Any = None) -> str:
        """Pay someone."""
        executed["pay"].record(target=target, amount=amount, data=data)
        return f"paid {target}"

    @tool
    def ask(ctx: ToolContext, topic: str) -> str:
        """Ask a human anything."""
        if ctx.resume_data is None:
            ctx.suspend({"topic": topic})
        executed["ask"].record(answer=ctx.resume_data)
        return "answered " + json.dumps(ctx.resume_data)[:80]

    @tool(resume_schema=FILL_SCHEMA)
    def fill(ctx: ToolContext, topic: str) -> str:
        """Ask a human to fill in a form."""
        if ctx.resume_data is None:
            ctx.suspend({"topic": topic})
        executed["fill"].record(answer=ctx.resume_data)
        return "filled"

    @tool(requires_approval=True)
    def wipe(disk: str) -> str:
        """Erase a disk."""
        executed["wipe"].record(disk=disk)
        return f"wiped {disk}"

    if fill_schema is not None:
        with_schema(fill, fill_schema)

    steps: dict[str, Any] = {}
    replies: dict[str, Any] = {}

    def registered(prompt: str) -> Any:
        return steps.get(prompt, Reply("Nothing to do."))

    def delegate(prompt: str) -> Any:
        return Call("agent_worker", {"prompt": prompt}, tool_call_id="deleg/" + "d" * 120)

    worker = Agent("worker", model=scripted(registered, replies, "worker"), tools=[wipe])
    boss = Agent("boss", model=scripted(delegate, {}, "boss"), agents=[worker])
    agent = Agent(
        "hostile", name="Hostile", model=scripted(registered, replies, "hostile"), tools=[pay, ask, fill]
    )
    runtime = Runtime(agents=[agent, boss], storage=DjangoRunStore())
    hostile = Hostile(runtime=runtime, executed=executed, steps=steps, replies=replies)
    return hostile


__all__ = ["FILL_SCHEMA", "Call", "Hostile", "RawCall", "Reply", "build_runtime", "with_schema"]
