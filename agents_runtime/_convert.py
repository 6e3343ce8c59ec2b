"""Pure conversions of the agent: stored runs to listings, pydantic-ai events to chunks, messages to dicts."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
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

from .errors import InvalidPagination
from .store import AgentRun, AgentRunToolCall, CallContext, CallKind, Chunk, ParkedCall, StoredRun, construct
from .stream import Emit
from .tools import to_jsonable
from .untrusted import SNAPSHOT_MAX_DEPTH, clean_json


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


def listed_call(call: ParkedCall) -> AgentRunToolCall:
    approval = call.kind == CallKind.APPROVAL
    return construct(
        AgentRunToolCall,
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        args=call.args if approval else None,
        requires_approval=approval,
        suspend_payload=None if approval else call.suspend_payload,
        resume_schema=call.resume_schema,
        suspend_schema=call.suspend_schema,
        tool_started_at=call.tool_started_at if call.decision is None else None,
        context=CallContext.from_json(call.context),
        via_agent_id=call.delegation.agent_id if call.delegation is not None else None,
        expires_at=call.expires_at,
        on_expiry=None if call.deadline is None else call.deadline.on_expiry,
        escalated_to=call.escalated_to,
        approved_by=tuple(v.actor or "" for v in call.votes),
    )


def agent_run(run: StoredRun) -> AgentRun:
    """A stored suspended run as listings show it (for a host that reads its store its own way)."""
    return construct(
        AgentRun,
        run_id=run.run_id,
        agent_id=run.agent_id,
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        suspended_at=run.suspended_at,
        created_at=run.created_at,
        tool_calls=[listed_call(c) for c in run.undecided],
        parent_run_id=run.parent_run_id,
        started_by=run.started_by,
        interrupted=run.interrupted,
        status="suspended",
    )


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
