"""Test doubles at the boundary (the model) and small builders shared by the runtime suite."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
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
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agents_runtime import (
    Agent,
    AgentRun,
    Call,
    ListSuspendedRunsResult,
    Reply,
    RunStore,
    ToolContext,
    scripted_model,
    tool,
)
from agents_runtime.store import StoredRun


async def off_loop[T](call: Callable[[], T]) -> T:
    """Call a store protocol method the way the runtime does: in a worker thread, never on the event
    loop (``DjangoRunStore`` refuses to run there)."""
    return await asyncio.to_thread(call)


async def stored_run(store: RunStore, run_id: str) -> StoredRun | None:
    """The run as the store holds it (``RunStore.get_run``), snapshot included."""
    return await off_loop(lambda: store.get_run(run_id))


class ModelSpy:
    """A ``FunctionModel`` that plays scripted steps (``Call`` / ``Reply`` / step functions, as
    ``scripted_model``) and records every request it receives, so tests can see what the model saw.
    """

    def __init__(self, *steps: Any, name: str = "spy") -> None:
        self._script = scripted_model(*steps, name=name)
        self._lock = threading.Lock()
        self.requests: list[list[ModelMessage]] = []
        self.infos: list[AgentInfo] = []
        self.model = FunctionModel(self._respond, model_name=name)

    async def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        with self._lock:
            self.requests.append(list(messages))
            self.infos.append(info)
        assert self._script.function is not None
        response = await self._script.function(messages, info)  # type: ignore[misc]
        assert isinstance(response, ModelResponse)
        return response

    @property
    def calls(self) -> int:
        """How many times the model was called."""
        return len(self.requests)

    def tool_results(self, request: int = -1) -> dict[str, Any]:
        """Every tool result the model had seen at that request, by tool call id."""
        return {
            part.tool_call_id: part.content
            for message in self.requests[request]
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        }

    def user_prompts(self, request: int = -1) -> list[str]:
        return [
            str(part.content)
            for message in self.requests[request]
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        ]

    def tool_call_ids(self, request: int = -1) -> list[str]:
        """The ids of the tool calls in the conversation the model saw."""
        return [
            part.tool_call_id
            for message in self.requests[request]
            if isinstance(message, ModelResponse)
            for part in message.parts
            if isinstance(part, ToolCallPart)
        ]

    def texts(self, request: int = -1) -> list[str]:
        """The model's own earlier text answers in the conversation it saw."""
        return [
            part.content
            for message in self.requests[request]
            if isinstance(message, ModelResponse)
            for part in message.parts
            if isinstance(part, TextPart)
        ]

    def tools_offered(self, request: int = -1) -> dict[str, dict[str, Any]]:
        """The tools the model was offered: name -> JSON schema of its arguments."""
        return {t.name: t.parameters_json_schema for t in self.infos[request].function_tools}


class ToolLog:
    """What a test tool was called with, in order (tools may run in worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []

    def record(self, **args: Any) -> None:
        with self._lock:
            self.calls.append(args)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.calls)


def only_run(listing: ListSuspendedRunsResult) -> AgentRun:
    """The single run of a listing (and its total agrees)."""
    assert listing.total == 1, listing
    assert len(listing.runs) == 1, listing
    return listing.runs[0]


def run_ids(listing: ListSuspendedRunsResult) -> list[str]:
    return [run.run_id for run in listing.runs]


class Team:
    """A supervisor ("desk") that delegates "Refund A-1" (call ``deleg-1``) to a sub-agent ("billing").

    The sub-agent plays ``inner_steps`` (default: one ``refund`` call ``inner-1`` that needs approval);
    it also has ``ask_customer``, a tool that suspends until it gets ``{"answer": ...}``.
    """

    def __init__(self, *inner_steps: Any) -> None:
        self.refunds = ToolLog()
        self.questions: list[Any] = []

        @tool(requires_approval=True)
        def refund(order_id: str, amount: int) -> str:
            self.refunds.record(order_id=order_id, amount=amount)
            return f"refunded {amount} on {order_id}"

        @tool
        def ask_customer(ctx: ToolContext, question: str) -> str:
            self.questions.append(ctx.resume_data)
            if ctx.resume_data is None:
                ctx.suspend({"question": question})
            return f"customer says {ctx.resume_data['answer']}"

        self.inner = ModelSpy(
            *(inner_steps or (Call("refund", {"order_id": "A-1", "amount": 30}, tool_call_id="inner-1"),)),
            name="billing-model",
        )
        self.outer = ModelSpy(
            Call("agent_billing", {"prompt": "Refund A-1"}, tool_call_id="deleg-1"),
            Reply("Handled."),
            name="desk-model",
        )
        self.billing = Agent("billing", model=self.inner.model, tools=[refund, ask_customer])
        self.desk = Agent("desk", model=self.outer.model, agents=[self.billing])
