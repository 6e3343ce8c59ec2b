"""What the API sends: runs as Mastra's JSON, and a run's chunks as Mastra's server-sent events.

Mastra's event stream (``@mastra/core`` 1.71, as recorded in tests/api/golden.json) frames each
event as ``data: <one-line JSON>\\n\\n`` with the envelope ``{type, runId, from: "AGENT", payload}``
and ends with ``data: [DONE]``. The runtime's chunks are coarser (no text blocks), so the
translation adds the text boundaries the client's message builder expects, and draws each step's
end where the model's next output starts. ``step-finish`` and ``finish`` carry what Mastra's types
declare: ``output.usage`` (the step's, the run's in all on ``finish``) and ``metadata.modelId`` from
the runtime's ``step-finish``, ``messages`` (all / user / nonUser, as the AI SDK's model messages),
and on ``finish`` the ``response`` with, for a run on a thread, its ``uiMessages``. Mastra's
``output.steps`` (a copy of each step's messages) is not sent: it is optional in its types.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from agents_runtime import Agent, AgentRun, AgentRunToolCall, Chunk, Tool, shown

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


def tool_call_json(call: AgentRunToolCall, version: str = "") -> dict[str, Any]:
    """A waiting call as Mastra lists it (``version``: its tool's, which a decision is bound to)."""
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
    preview = call.context.preview if call.context is not None else None
    if preview:
        # Beyond Mastra: what the call would do (its tool's effect preview), and for an approval the
        # fingerprint to send back with it, so the approval is refused if the call changed since.
        out["preview"] = preview
        if call.requires_approval:
            out["fingerprint"] = shown(call, version)
    return out


def fingerprint_of(agent: Agent | None, call: AgentRunToolCall) -> str | None:
    """An approval's fingerprint as a decider is shown it, to send back (None for a question)."""
    if not call.requires_approval:
        return None
    return shown(call, tool_version(agent, call.tool_name, call.via_agent_id))


def tool_version(agent: Agent | None, tool_name: str, via: str | None = None) -> str:
    """The version of ``agent``'s tool (what a decision is bound to with the call), "" if unknown;
    ``via``: the sub-agent whose call a supervisor's run mirrors (its tool)."""
    tool = agent.find_tool(tool_name, via) if agent is not None else None
    return tool.version if tool is not None else ""


def run_json(run: AgentRun, agent: Agent | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"runId": run.run_id, "status": "suspended"}
    # Absent, not null, for runs without memory (as Mastra).
    if run.thread_id is not None:
        out["threadId"] = run.thread_id
    if run.resource_id is not None:
        out["resourceId"] = run.resource_id
    out["suspendedAt"] = iso(run.suspended_at)
    out["toolCalls"] = [
        tool_call_json(c, tool_version(agent, c.tool_name, c.via_agent_id)) for c in run.tool_calls
    ]
    return out


def _model_names(model: Any) -> tuple[str | None, str | None]:
    """(provider, model id) of an agent's model: a pydantic-ai ``Model``, or its "provider:name"."""
    if isinstance(model, str):
        provider, _, name = model.rpartition(":")
        return provider or None, name
    return getattr(model, "system", None), getattr(model, "model_name", None)


def _superjson(value: Any) -> str:
    # Mastra sends schemas through superjson's ``stringify``: plain JSON comes out as {"json": ...}.
    return dumps({"json": value})


def _tool_json(tool: Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"id": tool.name}
    if tool.description:
        out["description"] = tool.description
    out["inputSchema"] = _superjson(tool.parameters_json_schema)
    # (A rule that decides per call still asks for approval: Mastra's flag says "may wait".)
    out["requireApproval"] = tool.requires_approval is not False
    return out


def agent_json(agent: Agent) -> dict[str, Any]:
    """An agent as Mastra's server describes it (``GET /api/agents/<id>``); what our agents do not
    have (workflows, skills, processors, a workspace) is empty."""
    provider, model_id = _model_names(agent.model)
    out: dict[str, Any] = {"id": agent.id, "name": agent.name}
    if agent.description:
        out["description"] = agent.description
    out |= {
        "instructions": agent.instructions,
        "tools": {tool.name: _tool_json(tool) for tool in agent.tools},
        "agents": {sub.id: {"id": sub.id, "name": sub.name} for sub in agent.agents},
        "workflows": {},
        "skills": [],
        "workspaceTools": [],
        "browserTools": [],
        "hasBrowser": False,
        "inputProcessors": [],
        "outputProcessors": [],
        "provider": provider,
        "modelId": model_id,
        "supportsMemory": True,
        "defaultOptions": {},
        "defaultGenerateOptionsLegacy": {},
        "defaultStreamOptionsLegacy": {},
        "source": "code",
    }
    return {k: v for k, v in out.items() if v is not None}


def resume_schema_text(schema: dict[str, Any] | None) -> str:
    body = dict(schema or {"type": "object"})
    return dumps({"$schema": "http://json-schema.org/draft-07/schema#", **body})


# -- events --------------------------------------------------------------------------------------


def frame(event: dict[str, Any]) -> bytes:
    return f"data: {dumps(event)}\n\n".encode()


def _iso_text(timestamp: Any) -> str | None:
    """A transcript's ISO time as ``Date.toISOString()`` writes it."""
    try:
        return iso(datetime.fromisoformat(str(timestamp)))
    except ValueError:
        return None


def _result_output(result: Any) -> dict[str, Any]:
    # A declined call's result is the reason the model read: text, as Mastra shows it.
    return {"type": "text", "value": result} if isinstance(result, str) else {"type": "json", "value": result}


def _model_part(entry: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    kind = entry["kind"]
    if kind == "tool-call":
        return {
            "type": "tool-call",
            "toolCallId": entry["tool_call_id"],
            "toolName": entry["tool_name"],
            "input": entry["args"] or {},
        }
    if kind == "tool-result":
        return {
            "type": "tool-result",
            "toolCallId": entry["tool_call_id"],
            "toolName": entry["tool_name"],
            "output": _result_output(entry["result"]),
            "input": args.get(entry["tool_call_id"]) or {},
        }
    return {"type": "text", "text": entry["text"] or ""}


def model_messages(plain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's messages in their plain form (the runtime's transcript) as the AI SDK's
    ``ModelMessage``s Mastra sends: consecutive entries of one role are one message's parts."""
    args = {e["tool_call_id"]: e["args"] for e in plain if e["kind"] == "tool-call"}
    out: list[dict[str, Any]] = []
    for entry in plain:
        part = _model_part(entry, args)
        if out and out[-1]["role"] == entry["role"]:
            out[-1]["content"].append(part)
        else:
            out.append({"role": entry["role"], "content": [part]})
    return out


def _ui_part(part: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    if part["type"] != "tool-call":
        return {"type": "text", "text": part["text"]}
    call_id = part["toolCallId"]
    ui = {"type": f"tool-{part['toolName']}", "toolCallId": call_id, "input": part["input"]}
    if call_id in results:
        return {**ui, "output": results[call_id], "state": "output-available"}
    return {**ui, "state": "input-available"}


def ui_messages(
    plain: list[dict[str, Any]], *, message_id: str, model: dict[str, Any], memory: dict[str, str]
) -> list[dict[str, Any]]:
    """The assistant's messages as the AI SDK's ``UIMessage``s, one per model response, each tool
    call with its result: what Mastra's memory keeps of the run, and sends as ``uiMessages``."""
    results = {e["tool_call_id"]: e["result"] for e in plain if e["kind"] == "tool-result"}
    turns: list[list[dict[str, Any]]] = []
    previous = None
    for entry in plain:
        if entry["role"] == "assistant":
            # (What the model says after its tools' results is another response.)
            if previous != "assistant":
                turns.append([])
            turns[-1].append(entry)
        previous = entry["role"]
    out = []
    for n, turn in enumerate(turns):
        metadata = {**model, "createdAt": _iso_text(turn[0]["timestamp"]), **memory}
        parts = [_ui_part(_model_part(e, {}), results) for e in turn]
        last = n == len(turns) - 1
        out.append(
            {
                "id": message_id if last else str(uuid.uuid4()),
                "role": "assistant",
                "metadata": metadata,
                "parts": parts,
            }
        )
    return out


def usage_json(usage: dict[str, Any] | None) -> dict[str, Any]:
    """The runtime's usage as the AI SDK's ``LanguageModelUsage``."""
    usage = usage or {}
    tokens = {
        "inputTokens": int(usage.get("input_tokens") or 0),
        "outputTokens": int(usage.get("output_tokens") or 0),
        "totalTokens": int(usage.get("total_tokens") or 0),
    }
    return {**tokens, "raw": dict(tokens)}


class MastraEvents:
    """Turns one run's (or continuation's) chunks into Mastra's events, keeping the step state.

    ``calls`` are the run's parked calls before a decision (their arguments go into ``tool-result``
    and ``tool-output-denied``); ``declined`` maps a declined call's id to the reason the model got.
    ``thread_id`` / ``resource_id`` are the run's memory; ``prompt`` the user's message of a new
    run (a continuation takes it from the parked call's context).
    """

    def __init__(
        self,
        run_id: str,
        *,
        calls: list[AgentRunToolCall] | None = None,
        args: dict[str, Any] | None = None,
        declined: dict[str, str] | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        prompt: str | None = None,
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
        self.memory = {
            k: v for k, v in (("threadId", thread_id), ("resourceId", resource_id)) if v is not None
        }
        #: The run's messages so far, in the runtime's plain form, for each step's ``messages``. A
        #: continuation starts from the user's message its parked call kept (the turns before the
        #: parked one are in the ``finish``, from the run's transcript).
        if prompt is None:
            prompt = next((c.context.user_message for c in calls or [] if c.context is not None), None)
        self.fresh = calls is None
        self.messages: list[dict[str, Any]] = [] if prompt is None else [_plain("user", "text", text=prompt)]
        #: The ``step-finish`` the runtime reported last: the model response of the current step.
        self.step: dict[str, Any] = {}
        #: What the model responses this stream reported used in all (a parked run has no finish).
        self.used = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}

    def _event(self, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"type": type_, "runId": self.run_id, "from": "AGENT", "payload": payload}

    def start(self, agent_id: str) -> Iterator[dict[str, Any]]:
        yield self._event("start", {"id": agent_id, "messageId": self.message_id})
        yield self.step_start()

    def step_start(self) -> dict[str, Any]:
        payload = {"warnings": [], "messageId": self.message_id, "startedAt": _epoch_ms(), "request": {}}
        return {"runId": self.run_id, "from": "AGENT", "type": "step-start", "payload": payload}

    def _model(self) -> dict[str, Any]:
        return {"modelId": self.step.get("model_name") or "unknown", "provider": self.provider()}

    def provider(self) -> str:
        return str(self.step.get("provider_name") or "unknown")

    def _metadata(self) -> dict[str, Any]:
        model_id = self.step.get("model_name") or "unknown"
        return {
            "id": self.step.get("response_id") or f"resp-{self.message_id}",
            "timestamp": self.step.get("timestamp") or iso(datetime.now(UTC)),
            "modelId": model_id,
            "modelMetadata": {"modelId": model_id, "modelProvider": self.provider()},
        }

    def _messages(self, plain: list[dict[str, Any]]) -> dict[str, Any]:
        every = model_messages(plain)
        # Mastra's ``user`` is the user's messages this request brought: a new run's prompt, and a
        # continuation's only when the run has no memory (from memory they are history).
        given = self.fresh or not self.memory
        return {
            "all": every,
            "user": [m for m in every if m["role"] == "user"] if given else [],
            "nonUser": [m for m in every if m["role"] != "user"],
        }

    def _step_finish(
        self, reason: str, *, type_: str = "step-finish", finish: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        continued = reason == "tool-calls"
        step: dict[str, Any] = {"reason": reason, "isContinued": continued}
        if continued:
            step["messageId"] = self.message_id
        usage = usage_json(self.step.get("usage"))
        if finish is not None:
            # The run's total; ``raw`` stays the last response's, as Mastra's.
            usage = {**usage_json(finish.get("usage")), "raw": usage["raw"]}
        payload = {
            "messageId": self.message_id,
            "stepResult": step,
            "metadata": self._metadata(),
            "output": {"text": self.text, "toolCalls": self.step_calls, "usage": usage},
            "messages": self._messages(self.messages),
            "processorRetryCount": 0,
        }
        if type_ == "finish":
            payload["response"] = self._response()
        return self._event(type_, payload)

    def _response(self) -> dict[str, Any]:
        metadata = self._metadata()
        response: dict[str, Any] = {
            "id": metadata["id"],
            "timestamp": metadata["timestamp"],
            "modelId": metadata["modelId"],
            "modelMetadata": metadata["modelMetadata"],
            "messages": self._messages(self.messages)["nonUser"],
        }
        if self.memory:
            response["uiMessages"] = ui_messages(
                self.messages, message_id=self.message_id, model=self._model(), memory=self.memory
            )
        return response

    def _close_text(self) -> Iterator[dict[str, Any]]:
        if self.text_open:
            self.text_open = False
            self.messages.append(_plain("assistant", "text", text=self.text))
            yield self._event("text-end", {"type": "text-end", "id": "t1"})

    def events(self, chunk: Chunk) -> Iterator[dict[str, Any]]:
        p = chunk.payload
        if chunk.type == "tool-call" and p["tool_call_id"] in self.announced:
            self._remember_call(p)  # (for the step's messages: the client saw the call already)
            return
        if self.results_pending and chunk.type != "tool-result":
            # The model's next step starts once all the tool results are in.
            self.results_pending = False
            yield self._step_finish("tool-calls")
            self.step_calls = []
            self.text = ""
            yield self.step_start()
        yield from self._translated(chunk)

    def _remember_call(self, p: dict[str, Any]) -> None:
        call_id = p["tool_call_id"]
        if not any(m["kind"] == "tool-call" and m["tool_call_id"] == call_id for m in self.messages):
            entry = _plain("assistant", "tool-call", tool_name=p["tool_name"], args=p.get("args") or {})
            self.messages.append({**entry, "tool_call_id": call_id})

    def _translated(self, chunk: Chunk) -> Iterator[dict[str, Any]]:
        p = chunk.payload
        if chunk.type == "step-finish":
            self.step = p
            for key, value in (p.get("usage") or {}).items():
                self.used[key] = self.used.get(key, 0) + int(value or 0)
        elif chunk.type == "text-delta":
            if not self.text_open:
                self.text_open = True
                yield self._event("text-start", {"id": "t1"})
            self.text += str(p.get("text", ""))
            yield self._event("text-delta", {"id": "t1", "text": p.get("text", "")})
        elif chunk.type == "tool-call":
            yield from self._close_text()
            self._remember_call(p)
            call = {"toolCallId": p["tool_call_id"], "toolName": p["tool_name"], "args": p.get("args") or {}}
            self.args[p["tool_call_id"]] = call["args"]
            self.step_calls.append(call)
            yield self._event("tool-call", call)
        elif chunk.type == "tool-result":
            yield from self._tool_result(p)
        elif chunk.type in ("tool-call-approval", "tool-call-suspended"):
            yield from self._close_text()
            yield self._event(chunk.type, self._waiting(chunk.type, p))
        elif chunk.type == "error":
            yield from self._close_text()
            yield self._event("error", {"error": {"message": str(p.get("error", ""))}})
        elif chunk.type == "finish":
            yield from self._finish(p)

    def _waiting(self, type_: str, p: dict[str, Any]) -> dict[str, Any]:
        if type_ == "tool-call-approval":
            return {
                "toolCallId": p["tool_call_id"],
                "toolName": p["tool_name"],
                "args": p.get("args") or {},
                "resumeSchema": APPROVAL_RESUME_SCHEMA,
            }
        return {
            "toolCallId": p["tool_call_id"],
            "toolName": p["tool_name"],
            "suspendPayload": p.get("suspend_payload"),
            "args": self.args.get(p["tool_call_id"]) or {},
            "resumeSchema": resume_schema_text(p.get("resume_schema")),
        }

    def _tool_result(self, p: dict[str, Any]) -> Iterator[dict[str, Any]]:
        call_id = p["tool_call_id"]
        args = self.args.get(call_id) or {}
        if not any(c["toolCallId"] == call_id for c in self.step_calls):
            self.step_calls.append({"toolCallId": call_id, "toolName": p["tool_name"], "args": args})
        self.results_pending = True
        result = self.declined.get(call_id, p.get("result"))
        entry = _plain("tool", "tool-result", tool_name=p["tool_name"], result=result)
        self.messages.append({**entry, "tool_call_id": call_id})
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

    def full_output(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """The events this translator made, gathered as Mastra's ``FullOutput`` (what ``generate``
        answers): ``finishReason`` ``"suspended"`` with the waiting call's ``suspendPayload`` when
        the run parked."""

        def payloads(*types: str) -> list[dict[str, Any]]:
            return [e["payload"] for e in events if e["type"] in types]

        steps = payloads("step-finish")
        finish = next(iter(payloads("finish")), None)
        waiting = next(iter(payloads("tool-call-approval", "tool-call-suspended")), None)
        errors = payloads("error")
        last = usage_json(self.step.get("usage"))
        if waiting is not None:
            reason = "suspended"
        elif errors:
            reason = "error"
        else:
            reason = finish["stepResult"]["reason"] if finish is not None else "other"
        out: dict[str, Any] = {
            "text": "".join(p["text"] for p in payloads("text-delta")),
            "usage": steps[-1]["output"]["usage"] if steps else last,
            "steps": [_step_result(step) for step in steps],
            "finishReason": reason,
            "warnings": [],
            "request": {},
            "reasoning": [],
            "toolCalls": [e for e in events if e["type"] == "tool-call"],
            "toolResults": [e for e in events if e["type"] in ("tool-result", "tool-output-denied")],
            "sources": [],
            "files": [],
            "response": finish["response"] if finish is not None else self._response(),
            "totalUsage": finish["output"]["usage"] if finish is not None else self._total(last),
            "usedFallbackValue": False,
            "runId": self.run_id,
            "messages": db_messages(self.messages, self.memory),
            "rememberedMessages": [],
        }
        if waiting is not None:
            out["suspendPayload"] = waiting
            out["resumeSchema"] = waiting["resumeSchema"]
        if errors:
            out["error"] = errors[0]["error"]
        return out

    def _total(self, last: dict[str, Any]) -> dict[str, Any]:
        return {**usage_json(self.used), "raw": last["raw"]}

    def _finish(self, p: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield from self._close_text()
        status = p.get("status")
        if status == "suspended":
            # Mastra ends a suspended stream after the suspension event, with no finish.
            return
        if isinstance(p.get("messages"), list):
            # The run's transcript: every turn, those before a continuation's parked call included.
            self.messages = list(p["messages"])
        reason = "stop" if status == "success" else "error"
        yield self._step_finish(reason)
        yield self._step_finish(reason, type_="finish", finish=p)


def _db_part(entry: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    if entry["kind"] != "tool-call":
        return {"type": "text", "text": entry["text"] or ""}
    call_id = entry["tool_call_id"]
    invocation = {
        "state": "result" if call_id in results else "call",
        "toolCallId": call_id,
        "toolName": entry["tool_name"],
        "args": entry["args"] or {},
    }
    if call_id in results:
        invocation["result"] = results[call_id]
    return {"type": "tool-invocation", "toolInvocation": invocation}


def db_messages(plain: list[dict[str, Any]], memory: dict[str, str]) -> list[dict[str, Any]]:
    """A run's messages as Mastra's stored ``MastraDBMessage``s (format 2): a tool's result is in
    its call's part, as Mastra's memory keeps it."""
    results = {e["tool_call_id"]: e["result"] for e in plain if e["kind"] == "tool-result"}
    out: list[dict[str, Any]] = []
    previous = None
    for entry in plain:
        role, previous_role = entry["role"], previous
        previous = role
        if role == "tool":
            continue  # (its result is in its call's part; what the model says next is a new message)
        if role != previous_role or role == "user":
            message = {"id": str(uuid.uuid4()), "role": role, "createdAt": _iso_text(entry["timestamp"])}
            out.append({**message, **memory, "content": {"format": 2, "parts": []}})
        out[-1]["content"]["parts"].append(_db_part(entry, results))
    return out


def _step_result(step: dict[str, Any]) -> dict[str, Any]:
    """A ``step-finish`` payload as one of the full output's ``steps`` (the AI SDK's step result)."""
    output, metadata = step["output"], step["metadata"]
    return {
        "text": output["text"],
        "toolCalls": output["toolCalls"],
        "usage": output["usage"],
        "finishReason": step["stepResult"]["reason"],
        "warnings": [],
        "response": {k: metadata[k] for k in ("id", "timestamp", "modelId")},
    }


def _plain(role: str, kind: str, **fields: Any) -> dict[str, Any]:
    """One message in the runtime's plain form (``plain_messages``), as the run's transcript has it."""
    entry = {"role": role, "kind": kind, "text": None, "tool_name": None, "args": None, "result": None}
    return {**entry, "tool_call_id": None, "timestamp": iso(datetime.now(UTC)), **fields}


def _epoch_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)
