"""What the API sends: runs as Mastra's JSON, and a run's chunks as Mastra's server-sent events.

Mastra's event stream (``@mastra/core`` 1.71, as recorded in tests/api/golden.json) frames each
event as ``data: <one-line JSON>\\n\\n`` with the envelope ``{type, runId, from: "AGENT", payload}``
and ends with ``data: [DONE]``. The runtime's chunks are coarser (no steps, no text blocks), so the
translation adds the step and text boundaries the client's message builder expects. The
``step-finish`` and ``finish`` payloads carry ``messageId``, ``stepResult`` and ``output.text`` /
``output.toolCalls`` only: Mastra's copies of the whole conversation, usage and model metadata have
no counterpart here (a deliberate difference, listed in tests/api/test_mastra_client.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from agents_runtime import AgentRun, AgentRunToolCall, Chunk

DONE = b"data: [DONE]\n\n"

#: What Mastra sends as the resume schema of an approval (a JSON Schema as a string).
APPROVAL_RESUME_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "approved": {
                "type": "boolean",
                "description": "Controls if the tool call is approved or not, should be true when "
                "approved and false when declined",
            },
            "reason": {
                "description": "Optional explanation for the decision, surfaced to the model when the "
                "tool call is declined",
                "type": "string",
            },
        },
        "required": ["approved"],
        "additionalProperties": False,
    },
    separators=(",", ":"),
)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def dumps(value: Any) -> str:
    # One line, compact, like JSON.stringify; values only ``str`` can show (dates) as text.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def iso(when: datetime) -> str:
    """``Date.toISOString()``: UTC, milliseconds, ``Z``.

    (Not ``strftime``: glibc's looks the local time zone up again on every call, which made the
    times of a page of fifty runs cost more than reading the page.)"""
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


# -- JSON ----------------------------------------------------------------------------------------


def tool_call_json(call: AgentRunToolCall) -> dict[str, Any]:
    out: dict[str, Any] = {"toolCallId": call.tool_call_id, "toolName": call.tool_name}
    if call.requires_approval:
        out["args"] = call.args or {}
        out["requiresApproval"] = True
    else:
        out["requiresApproval"] = False
        out["suspendPayload"] = call.suspend_payload
    if call.tool_started_at is not None:
        # Beyond Mastra: the call's tool started before its continuation died; deciding it again
        # needs ``confirmRerun``.
        out["toolStartedAt"] = iso(call.tool_started_at)
    return out


def run_json(run: AgentRun) -> dict[str, Any]:
    out: dict[str, Any] = {"runId": run.run_id, "status": "suspended"}
    # Absent, not null, for runs without memory (as Mastra).
    if run.thread_id is not None:
        out["threadId"] = run.thread_id
    if run.resource_id is not None:
        out["resourceId"] = run.resource_id
    out["suspendedAt"] = iso(run.suspended_at)
    out["toolCalls"] = [tool_call_json(c) for c in run.tool_calls]
    return out


def resume_schema_text(schema: dict[str, Any] | None) -> str:
    body = dict(schema or {"type": "object"})
    return dumps({"$schema": "http://json-schema.org/draft-07/schema#", **body})


# -- events --------------------------------------------------------------------------------------


def frame(event: dict[str, Any]) -> bytes:
    return f"data: {dumps(event)}\n\n".encode()


class MastraEvents:
    """Turns one run's (or continuation's) chunks into Mastra's events, keeping the step state.

    ``calls`` are the run's parked calls before a decision (their arguments go into ``tool-result``
    and ``tool-output-denied``); ``declined`` maps a declined call's id to the reason the model got.
    """

    def __init__(
        self,
        run_id: str,
        *,
        calls: list[AgentRunToolCall] | None = None,
        args: dict[str, Any] | None = None,
        declined: dict[str, str] | None = None,
    ) -> None:
        self.run_id = run_id
        self.message_id = str(uuid.uuid4())
        #: Each call's arguments: a ``suspend()``-ed call's come from the run's conversation.
        self.args: dict[str, Any] = {
            **(args or {}),
            **{c.tool_call_id: c.args for c in calls or [] if c.args is not None},
        }
        #: The calls the client saw in the stream that parked them: a continuation re-announces them.
        self.announced = {c.tool_call_id for c in calls or []}
        self.declined = declined or {}
        self.text_open = False
        self.text = ""
        self.step_calls: list[dict[str, Any]] = []
        #: Tool results came: the step that called the tools ends before the model's next output.
        self.results_pending = False

    def _event(self, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"type": type_, "runId": self.run_id, "from": "AGENT", "payload": payload}

    def start(self, agent_id: str) -> Iterator[dict[str, Any]]:
        yield self._event("start", {"id": agent_id, "messageId": self.message_id})
        yield self.step_start()

    def step_start(self) -> dict[str, Any]:
        payload = {"warnings": [], "messageId": self.message_id, "startedAt": _epoch_ms(), "request": {}}
        return {"runId": self.run_id, "from": "AGENT", "type": "step-start", "payload": payload}

    def _step_finish(self, reason: str, *, type_: str = "step-finish") -> dict[str, Any]:
        continued = reason == "tool-calls"
        step: dict[str, Any] = {"reason": reason, "isContinued": continued}
        if continued:
            step["messageId"] = self.message_id
        payload = {
            "messageId": self.message_id,
            "stepResult": step,
            "output": {"text": self.text, "toolCalls": self.step_calls},
        }
        return self._event(type_, payload)

    def _close_text(self) -> Iterator[dict[str, Any]]:
        if self.text_open:
            self.text_open = False
            yield self._event("text-end", {"type": "text-end", "id": "t1"})

    def events(self, chunk: Chunk) -> Iterator[dict[str, Any]]:
        p = chunk.payload
        if chunk.type == "tool-call" and p["tool_call_id"] in self.announced:
            return
        if self.results_pending and chunk.type != "tool-result":
            # The model's next step starts once all the tool results are in.
            self.results_pending = False
            yield self._step_finish("tool-calls")
            self.step_calls = []
            self.text = ""
            yield self.step_start()
        if chunk.type == "text-delta":
            if not self.text_open:
                self.text_open = True
                yield self._event("text-start", {"id": "t1"})
            self.text += str(p.get("text", ""))
            yield self._event("text-delta", {"id": "t1", "text": p.get("text", "")})
        elif chunk.type == "tool-call":
            yield from self._close_text()
            call = {"toolCallId": p["tool_call_id"], "toolName": p["tool_name"], "args": p.get("args") or {}}
            self.args[p["tool_call_id"]] = call["args"]
            self.step_calls.append(call)
            yield self._event("tool-call", call)
        elif chunk.type == "tool-result":
            yield from self._tool_result(p)
        elif chunk.type == "tool-call-approval":
            yield from self._close_text()
            payload = {
                "toolCallId": p["tool_call_id"],
                "toolName": p["tool_name"],
                "args": p.get("args") or {},
                "resumeSchema": APPROVAL_RESUME_SCHEMA,
            }
            yield self._event("tool-call-approval", payload)
        elif chunk.type == "tool-call-suspended":
            yield from self._close_text()
            payload = {
                "toolCallId": p["tool_call_id"],
                "toolName": p["tool_name"],
                "suspendPayload": p.get("suspend_payload"),
                "args": self.args.get(p["tool_call_id"]) or {},
                "resumeSchema": resume_schema_text(p.get("resume_schema")),
            }
            yield self._event("tool-call-suspended", payload)
        elif chunk.type == "error":
            yield from self._close_text()
            yield self._event("error", {"error": {"message": str(p.get("error", ""))}})
        elif chunk.type == "finish":
            yield from self._finish(p)

    def _tool_result(self, p: dict[str, Any]) -> Iterator[dict[str, Any]]:
        call_id = p["tool_call_id"]
        args = self.args.get(call_id) or {}
        if not any(c["toolCallId"] == call_id for c in self.step_calls):
            self.step_calls.append({"toolCallId": call_id, "toolName": p["tool_name"], "args": args})
        self.results_pending = True
        if call_id in self.declined:
            approval = {"id": call_id, "approved": False, "reason": self.declined[call_id]}
            payload = {"toolCallId": call_id, "toolName": p["tool_name"], "args": args, "approval": approval}
            yield self._event("tool-output-denied", payload)
        else:
            payload = {
                "args": args,
                "toolCallId": call_id,
                "toolName": p["tool_name"],
                "result": p.get("result"),
            }
            yield self._event("tool-result", payload)

    def _finish(self, p: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield from self._close_text()
        status = p.get("status")
        if status == "suspended":
            # Mastra ends a suspended stream after the suspension event, with no finish.
            return
        reason = "stop" if status == "success" else "error"
        yield self._step_finish(reason)
        yield self._step_finish(reason, type_="finish")


def _epoch_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)
