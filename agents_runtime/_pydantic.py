"""The bridge to pydantic-ai: our tools and sub-agents as pydantic-ai tools, models and snapshots, and the
conversions across it (stored runs to listings, pydantic-ai events to chunks, messages to dicts)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import ApprovalRequired, DeferredToolRequests, RunContext
from pydantic_ai import Tool as PydanticTool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.conversation import Conversation, ConversationTypeAdapter
from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import FunctionModel

from .errors import InvalidPagination
from .scripted import streaming
from .store import (
    AgentRunToolCall,
    CallKind,
    Chunk,
    Deadline,
    ParkedCall,
    RunResult,
    deadline_from_json,
    deadline_to_json,
)
from .tools import Tool, ToolContext, ToolSuspended
from .untrusted import SNAPSHOT_MAX_DEPTH, clean_id, clean_json, clean_text, parse_model_json, to_jsonable

logger = logging.getLogger("agents_runtime")

# Keys of the metadata that travels with a parked call through pydantic-ai.
#: Metadata of an approval call: why the tool's rule asked for it.
REASON_KEY = "countersign_approval_reason"
KIND_KEY = "countersign"
RESUME_KEY = "countersign_resume"
DELEGATION_RESULT_KEY = "countersign_delegation_result"
DELEGATION_ERROR_KEY = "countersign_delegation_error"
SNAPSHOT_FORMAT = 1


class ToolPayloadError(Exception):
    """A tool suspended with a payload that breaks its ``suspend_schema``: the run fails."""


class SubAgentFailed(Exception):
    """A sub-agent's run failed; the supervisor's run fails with it."""


class ClaimLost(Exception):
    """The continuation's claim on its run was lost before a decided tool could start: it must not run."""


class AgentSpec(Protocol):
    """What the bridge reads of an ``Agent`` to build its pydantic-ai agent and tools."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str | None: ...

    @property
    def instructions(self) -> str: ...

    @property
    def model(self) -> Any: ...

    @property
    def tools(self) -> Sequence[Tool]: ...

    @property
    def agents(self) -> Sequence[AgentSpec]: ...


@dataclass
class RunDeps:
    """What our tool wrappers need from the run they execute in."""

    run_id: str
    agent_id: str
    thread_id: str | None
    resource_id: str | None
    #: Runs a sub-agent's inner run for a delegation call: (sub-agent id, prompt, these deps).
    delegate: Callable[[str, str, RunDeps], Awaitable[RunResult]]
    #: The inner runs this run started (sub-agent id, run id), to discard if this run never waits on them.
    inner_runs: list[tuple[str, str]] = field(default_factory=list)
    #: In a continuation: records durably that a decided call's tool starts (its tool call id);
    #: False when the run's claim was lost.
    tool_started: Callable[[str], Awaitable[bool]] | None = None
    #: The run's own deadline for every call it parks (``Agent.generate(deadline=...)``).
    deadline: Deadline | None = None
    #: Who started the run (``Agent.stream(started_by=...)``), written with its first suspension.
    started_by: str | None = None


def delegation_tool_name(agent_id: str) -> str:
    return "agent_" + re.sub(r"[^A-Za-z0-9_]", "_", agent_id)


def resolve_model(model: Any) -> Model | str:
    if callable(model) and not isinstance(model, Model):
        model = model()
    if isinstance(model, FunctionModel) and model.stream_function is None and model.function is not None:
        # We always stream (for chunks); give plain scripted functions a streaming twin.
        return FunctionModel(
            model.function, stream_function=streaming(model.function), model_name=model.model_name
        )
    if not isinstance(model, (Model, str)):
        raise TypeError(f"model must be a pydantic-ai Model or model name, not {type(model).__name__}")
    return model


def _approved_metadata(ctx: RunContext[RunDeps]) -> dict[str, Any]:
    if ctx.tool_call_approved and isinstance(ctx.tool_call_metadata, dict):
        return ctx.tool_call_metadata
    return {}


def wrap_tool(spec: Tool) -> PydanticTool[RunDeps]:
    """A pydantic-ai tool that runs ``spec`` with our approval and suspend rules."""

    async def invoke(ctx: RunContext[RunDeps], **kwargs: Any) -> Any:
        metadata = _approved_metadata(ctx)
        resume_data: Any = None
        if RESUME_KEY in metadata:
            resume_data = spec.validate_resume_data(metadata[RESUME_KEY])
        elif not ctx.tool_call_approved:
            # The rule is asked once, with the validated arguments; its reason goes to the card.
            needed, because = spec.approval(kwargs)
            if needed:
                raise ApprovalRequired(metadata={KIND_KEY: CallKind.APPROVAL.value, REASON_KEY: because})
        call_kwargs = dict(kwargs)
        if spec.context_param is not None:
            deps = ctx.deps
            call_kwargs[spec.context_param] = ToolContext(
                run_id=deps.run_id,
                tool_call_id=ctx.tool_call_id or "",
                agent_id=deps.agent_id,
                thread_id=deps.thread_id,
                resource_id=deps.resource_id,
                resume_data=resume_data,
            )
        # Write-ahead: if this process dies while the tool runs, the call is offered again marked
        # "interrupted after the tool started", never as a plain pending call.
        started = ctx.deps.tool_started
        if ctx.tool_call_approved and started is not None and not await started(ctx.tool_call_id or ""):
            raise ClaimLost(f"the claim on run {ctx.deps.run_id} was lost before {spec.name} started")
        try:
            if inspect.iscoroutinefunction(spec.function):
                return await spec.function(**call_kwargs)
            result = await asyncio.to_thread(spec.function, **call_kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result
        except ToolSuspended as suspended:
            try:
                payload = spec.validate_suspend_payload(suspended.payload)
            except Exception as exc:
                raise ToolPayloadError(f"{spec.name} suspended with an invalid payload: {exc}") from None
            metadata = {KIND_KEY: CallKind.INPUT.value, "payload": to_jsonable(payload)}
            raise ApprovalRequired(metadata=metadata) from None

    _present_as(invoke, spec.name, spec.description, spec.function, list(spec.parameters))
    return PydanticTool(invoke, name=spec.name, takes_ctx=True, description=spec.description)


def delegation_tool(sub_agent: AgentSpec) -> PydanticTool[RunDeps]:
    """The ``agent_<id>`` tool through which a supervisor delegates to ``sub_agent``."""

    async def delegate(ctx: RunContext[RunDeps], prompt: str) -> Any:
        metadata = _approved_metadata(ctx)
        if DELEGATION_RESULT_KEY in metadata:
            return metadata[DELEGATION_RESULT_KEY]
        if DELEGATION_ERROR_KEY in metadata:
            raise SubAgentFailed(metadata[DELEGATION_ERROR_KEY])
        result = await ctx.deps.delegate(sub_agent.id, prompt, ctx.deps)
        if result.status == "success":
            return result.text
        if result.status == "failed":
            raise SubAgentFailed(f"Sub-agent {sub_agent.id!r} failed: {result.error}")
        raise ApprovalRequired(metadata={KIND_KEY: "delegation", "inner_run_id": result.run_id})

    description = sub_agent.description or f"Delegate a task to the {sub_agent.name} agent."
    name = delegation_tool_name(sub_agent.id)
    prompt_param = inspect.Parameter("prompt", inspect.Parameter.KEYWORD_ONLY, annotation=str)
    _present_as(delegate, name, description, None, [prompt_param])
    return PydanticTool(delegate, name=name, takes_ctx=True, description=description)


def _present_as(
    wrapper: Callable[..., Any],
    name: str,
    description: str | None,
    original: Callable[..., Any] | None,
    parameters: list[inspect.Parameter],
) -> None:
    """Give ``wrapper`` the signature pydantic-ai should build the tool's schema from."""
    ctx_param = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=RunContext[RunDeps]
    )
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in parameters]
    wrapper.__signature__ = inspect.Signature([ctx_param, *params])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {"ctx": RunContext[RunDeps], **{p.name: p.annotation for p in params}}
    wrapper.__name__ = name
    wrapper.__qualname__ = name
    wrapper.__doc__ = description
    if original is not None:
        wrapper.__module__ = original.__module__


@dataclass
class UntrustedOutput(AbstractCapability[RunDeps]):
    """Puts each model response in the normal form (``untrusted``) as soon as it arrives.

    Before pydantic-ai acts on it: the tools run with, the conversation keeps, the snapshot stores and
    the dashboard shows the same tool call ids, arguments and text.
    """

    async def after_model_request(
        self, ctx: RunContext[RunDeps], *, request_context: Any, response: ModelResponse
    ) -> ModelResponse:
        parts = [_clean_part(part, ctx.deps.run_id) for part in response.parts]
        if all(new is old for new, old in zip(parts, response.parts, strict=True)):
            return response
        return replace(response, parts=parts)


def _clean_part(part: Any, run_id: str) -> Any:
    if isinstance(part, TextPart):
        text = clean_text(part.content)
        return part if text is part.content else replace(part, content=text)
    if not isinstance(part, ToolCallPart):
        return part
    changes: dict[str, Any] = {}
    tool_call_id = clean_id(part.tool_call_id)
    if tool_call_id != part.tool_call_id:
        changes["tool_call_id"] = tool_call_id
    what = f"the arguments of {part.tool_name} in run {run_id}"
    try:
        args = part.args_as_dict(raise_if_invalid=True)
    except (ValueError, AssertionError):
        args = None
    if args is not None:
        cleaned = clean_json(args, what=what)
        if cleaned is not args:
            changes["args"] = cleaned
    elif isinstance(part.args, str):
        try:
            parsed = parse_model_json(part.args)
        except ValueError:
            parsed = None  # not JSON: pydantic-ai asks the model again; the snapshot normalises the text
        if isinstance(parsed, dict):
            logger.warning("Normalised %s: JSON that pydantic cannot parse", what)
            changes["args"] = parsed
    return replace(part, **changes) if changes else part


def build_pydantic_agent(agent: AgentSpec) -> PydanticAgent[RunDeps, Any]:
    tools = [wrap_tool(t) for t in agent.tools] + [delegation_tool(a) for a in agent.agents]
    return PydanticAgent(
        resolve_model(agent.model),
        instructions=agent.instructions or None,
        deps_type=RunDeps,
        output_type=[str, DeferredToolRequests],
        tools=tools,
        name=agent.id,
        capabilities=[UntrustedOutput()],
    )


# -- snapshots -----------------------------------------------------------------------------------


@dataclass
class Snapshot:
    """What a suspended run continues from."""

    conversation: Conversation
    #: How many messages at the start came from thread memory (not this run's own).
    history_len: int
    #: Outcomes of sub-agent runs already finished while other delegations wait (by tool call id).
    delegation_results: dict[str, dict[str, Any]]
    #: The run's deadline override, kept for the calls its continuations park.
    deadline: Deadline | None = None

    def to_json(self) -> dict[str, Any]:
        snapshot: dict[str, Any] = clean_json(
            {
                "format": SNAPSHOT_FORMAT,
                "conversation": ConversationTypeAdapter.dump_python(self.conversation, mode="json"),
                "history_len": self.history_len,
                "delegation_results": self.delegation_results,
                "deadline": deadline_to_json(self.deadline),
            },
            max_depth=SNAPSHOT_MAX_DEPTH,
            what="a run's snapshot",
        )
        return snapshot

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        if data.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"Unknown snapshot format {data.get('format')!r}")
        return cls(
            conversation=ConversationTypeAdapter.validate_python(data["conversation"]),
            history_len=int(data["history_len"]),
            delegation_results=dict(data.get("delegation_results") or {}),
            deadline=deadline_from_json(data.get("deadline")),
        )


def messages_to_json(messages: list[ModelMessage]) -> list[Any]:
    dumped = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
    return list(clean_json(dumped, max_depth=SNAPSHOT_MAX_DEPTH, what="a thread's messages"))


def messages_from_json(data: list[Any]) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_python(data)


#: Where a run's chunks go as they happen (a ``RunStream``'s buffer).
Emit = Callable[[Chunk], None]


def now() -> datetime:
    return datetime.now(UTC)


def new_run_id() -> str:
    return uuid.uuid4().hex


def ignore(chunk: Chunk) -> None:
    pass


def check_pagination(per_page: object, page: object) -> None:
    if per_page is not None and (type(per_page) is not int or per_page <= 0):
        raise InvalidPagination(f"per_page must be a positive int, not {per_page!r}")
    if page is not None and (type(page) is not int or page < 0):
        raise InvalidPagination(f"page must be a non-negative int, not {page!r}")


def as_utc(value: datetime | date | None, *, end_of_day: bool) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        start = datetime.combine(value, time.min, tzinfo=UTC)
        return start + timedelta(days=1) - timedelta(microseconds=1) if end_of_day else start
    raise TypeError(f"Dates must be datetime or date objects, not {type(value).__name__}")


def usage_json(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }


def step_finished(
    run_id: str, messages: Sequence[ModelMessage], reported: list[ModelResponse]
) -> Chunk | None:
    """The ``step-finish`` of the model response whose tool calls are about to be handled, once.

    pydantic-ai hands the event handler no event for a finished response; a tool-handling step
    starts with its response last in the run's messages (a model-request step with a request).
    A continuation reports the parked response again, as Mastra's resumed stream does.
    """
    response = messages[-1] if messages else None
    if not isinstance(response, ModelResponse) or any(r is response for r in reported):
        return None
    reported.append(response)
    usage = response.usage
    payload = {
        "usage": usage_json(usage.input_tokens, usage.output_tokens),
        "model_name": response.model_name,
        "provider_name": response.provider_name,
        "response_id": response.provider_response_id,
        "finish_reason": response.finish_reason,
        "timestamp": response.timestamp.isoformat(),
    }
    return Chunk("step-finish", run_id, payload)


def steps_usage(reported: Sequence[ModelResponse]) -> dict[str, int]:
    return usage_json(
        sum(r.usage.input_tokens for r in reported), sum(r.usage.output_tokens for r in reported)
    )


def chunk_for(run_id: str, event: AgentStreamEvent) -> Chunk | None:
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and event.part.content:
        return Chunk("text-delta", run_id, {"text": event.part.content})
    if (
        isinstance(event, PartDeltaEvent)
        and isinstance(event.delta, TextPartDelta)
        and event.delta.content_delta
    ):
        return Chunk("text-delta", run_id, {"text": event.delta.content_delta})
    if isinstance(event, FunctionToolCallEvent):
        part = event.part
        return Chunk(
            "tool-call",
            run_id,
            {"tool_call_id": part.tool_call_id, "tool_name": part.tool_name, "args": part.args_as_dict()},
        )
    if isinstance(event, FunctionToolResultEvent):
        result = event.part
        return Chunk(
            "tool-result",
            run_id,
            {
                "tool_call_id": result.tool_call_id,
                "tool_name": result.tool_name,
                "result": to_jsonable(getattr(result, "content", None)),
            },
        )
    return None


def showing_edits(emit: Emit, calls: Iterable[ParkedCall]) -> Emit:
    """``emit``, with each ``tool-call`` chunk of a call approved with edited arguments telling so.

    pydantic-ai reports the model's call even when ``ToolApproved(override_args=...)`` runs the tool
    with other arguments: the chunk's ``args`` become the ones the tool ran with, and it gains
    ``model_args`` (the model's) and ``edited_by`` (the approving actor, or None).
    """
    edits = {
        c.tool_call_id: c.decision
        for c in calls
        if c.decision is not None and c.decision.edited_args is not None
    }
    if not edits:
        return emit

    def emitshowing_edits(chunk: Chunk) -> None:
        decision = edits.get(chunk.payload.get("tool_call_id", "")) if chunk.type == "tool-call" else None
        if decision is not None:
            chunk = replace(
                chunk,
                payload={
                    **chunk.payload,
                    "args": decision.edited_args,
                    "model_args": chunk.payload.get("args"),
                    "edited_by": decision.actor,
                },
            )
        emit(chunk)

    return emitshowing_edits


def plain_messages(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    plain: list[dict[str, Any]] = []

    def add(role: str, kind: str, timestamp: Any, **fields: Any) -> None:
        entry = {"role": role, "kind": kind, "text": None, "tool_name": None, "args": None, "result": None}
        entry["tool_call_id"] = None
        entry["timestamp"] = timestamp.isoformat() if isinstance(timestamp, datetime) else None
        entry.update(fields)
        plain.append(entry)

    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    text = part.content if isinstance(part.content, str) else str(part.content)
                    add("user", "text", part.timestamp, text=text)
                elif isinstance(part, ToolReturnPart):
                    add(
                        "tool",
                        "tool-result",
                        part.timestamp,
                        tool_name=part.tool_name,
                        tool_call_id=part.tool_call_id,
                        result=to_jsonable(part.content),
                    )
        elif isinstance(message, ModelResponse):
            for rpart in message.parts:
                if isinstance(rpart, TextPart):
                    add("assistant", "text", message.timestamp, text=rpart.content)
                elif isinstance(rpart, ToolCallPart):
                    add(
                        "assistant",
                        "tool-call",
                        message.timestamp,
                        tool_name=rpart.tool_name,
                        tool_call_id=rpart.tool_call_id,
                        args=rpart.args_as_dict(),
                    )
    return plain


def run_transcript(messages: Sequence[ModelMessage]) -> tuple[dict[str, Any], ...]:
    """An ended run's record: its messages in plain form (no usage, model or provider details), in
    the untrusted normal form like everything stored."""
    plain = clean_json(plain_messages(messages), max_depth=SNAPSHOT_MAX_DEPTH, what="a run's transcript")
    return tuple(plain)


def waiting_chunks(run_id: str, listed: list[AgentRunToolCall]) -> list[Chunk]:
    """What a run's stream says when it parks: each call it waits on, then ``finish: suspended``."""
    chunks = []
    for call in listed:
        if call.requires_approval:
            payload = {"tool_call_id": call.tool_call_id, "tool_name": call.tool_name, "args": call.args}
            chunks.append(Chunk("tool-call-approval", run_id, payload))
        else:
            payload = {
                "tool_call_id": call.tool_call_id,
                "tool_name": call.tool_name,
                "suspend_payload": call.suspend_payload,
                "resume_schema": call.resume_schema,
            }
            chunks.append(Chunk("tool-call-suspended", run_id, payload))
    chunks.append(Chunk("finish", run_id, {"status": "suspended"}))
    return chunks
