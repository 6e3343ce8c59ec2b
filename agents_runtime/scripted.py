"""A deterministic scripted model for demos and tests: no network, same answers every time.

A script is a list of steps. Each model request of a run takes the next step, counted from the last
user prompt, so a run resumed in another process picks up exactly where it stopped.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel


@dataclass(frozen=True)
class Call:
    """A tool call the scripted model makes."""

    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    tool_call_id: str | None = None
    #: What the model says in the same turn, before the call ("" says nothing).
    say: str = ""


@dataclass(frozen=True)
class Reply:
    """A final text answer."""

    text: str


@dataclass(frozen=True)
class ScriptContext:
    """What a step function sees."""

    prompt: str
    #: Which step of this run this is (0 for the first model request after the prompt).
    step: int
    #: The results of the tool calls answered since the previous step, by tool name.
    results: dict[str, Any]
    tools: list[str]


Step = Reply | Call | Sequence[Call] | Callable[[ScriptContext], Any]


def _current_turn(messages: Sequence[ModelMessage]) -> tuple[str, int, list[tuple[str, Any]]]:
    prompt, start = "", 0
    for index, message in enumerate(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    prompt, start = part.content, index
    turn = messages[start:]
    steps = sum(1 for m in turn if isinstance(m, ModelResponse))
    results: list[tuple[str, Any]] = []
    last = turn[-1] if turn else None
    if isinstance(last, ModelRequest):
        results = [(p.tool_name, p.content) for p in last.parts if isinstance(p, ToolReturnPart)]
    return prompt, steps, results


def _summary(results: list[tuple[str, Any]]) -> str:
    if not results:
        return "Done."
    return " ".join(f"{name}: {value}" for name, value in results)


def _to_response(outcome: Any) -> ModelResponse:
    if isinstance(outcome, str):
        outcome = Reply(outcome)
    if isinstance(outcome, Reply):
        return ModelResponse(parts=[TextPart(outcome.text)])
    calls = [outcome] if isinstance(outcome, Call) else list(outcome)
    said = " ".join(c.say for c in calls if c.say)
    parts: list[Any] = [TextPart(said)] if said else []
    parts += [
        ToolCallPart(c.tool, dict(c.args), tool_call_id=c.tool_call_id or f"call_{uuid.uuid4().hex[:16]}")
        for c in calls
    ]
    return ModelResponse(parts=parts)


def scripted_model(*steps: Step, name: str = "scripted") -> FunctionModel:
    """A ``FunctionModel`` that plays ``steps`` in order; past the end it summarises the tool results."""

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt, index, results = _current_turn(messages)
        tools = [t.name for t in info.function_tools]
        if index >= len(steps):
            return _to_response(Reply(_summary(results)))
        step = steps[index]
        if callable(step) and not isinstance(step, (Reply, Call)):
            context = ScriptContext(prompt=prompt, step=index, results=dict(results), tools=tools)
            outcome = step(context)
            if inspect.isawaitable(outcome):
                outcome = await outcome
        else:
            outcome = step
        return _to_response(outcome)

    return FunctionModel(respond, stream_function=streaming(respond), model_name=name)


def streaming(
    respond: Callable[[list[ModelMessage], AgentInfo], Awaitable[ModelResponse] | ModelResponse],
) -> Callable[[list[ModelMessage], AgentInfo], AsyncIterator[str | DeltaToolCalls]]:
    """Derive a ``stream_function`` from a plain ``FunctionModel`` function (text word by word)."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        response = respond(messages, info)
        if inspect.isawaitable(response):
            response = await response
        assert isinstance(response, ModelResponse)
        texts = [p.content for p in response.parts if isinstance(p, TextPart)]
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        if texts:
            words = " ".join(texts).split(" ")
            for i, word in enumerate(words):
                yield word if i == len(words) - 1 else word + " "
        if calls:
            # Part indexes: the text (if any) is part 0, the calls come after it.
            offset = 1 if texts else 0
            yield {
                i + offset: DeltaToolCall(
                    name=c.tool_name, json_args=json.dumps(c.args_as_dict()), tool_call_id=c.tool_call_id
                )
                for i, c in enumerate(calls)
            }

    return stream
