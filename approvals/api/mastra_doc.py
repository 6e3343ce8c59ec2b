"""The Mastra-compatible routes (``/api/agents/...``) in the OpenAPI document.

Their requests are checked by ``params`` with zod's rules and messages (what ``@mastra/client-js``
and Mastra's server agree on), not by pydantic models, so their schemas are written here by hand.
The fuzz test holds the two together: it sends what these schemas call valid and fails on a 400.
Streams answer ``text/event-stream``: ``data: {...}`` events ending with ``data: [DONE]``.
"""

from __future__ import annotations

from typing import Any

from agents_runtime.untrusted import MAX_REASON_LENGTH
from approvals.api.params import MAX_FINGERPRINT_LENGTH, MAX_ID_LENGTH, MAX_NUMBER, RUN_ID

_AGENT = "/api/agents/{agentId}"
_STRING = {"type": "string"}
#: An id a request names (the store keeps at most this many characters).
_ID = {"type": "string", "maxLength": MAX_ID_LENGTH}
#: Each event (as OpenAPI 3.2 describes a stream: ``data`` is the event's text): a chunk of Mastra's
#: as JSON (its type, the run, what it carries), then ``[DONE]``.
_CHUNK = {
    "type": "object",
    "required": ["type", "payload"],
    "properties": {
        "type": {"type": "string"},
        "runId": {"type": "string"},
        "from": {"type": "string"},
        "payload": {"type": "object"},
    },
}
_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "anyOf": [
                {"const": "[DONE]"},
                {"contentMediaType": "application/json", "contentSchema": _CHUNK},
            ],
        },
    },
}
_STREAM = {
    "description": "A stream of Mastra's chunk events (`data: {...}`), ending with `data: [DONE]`",
    "content": {"text/event-stream": {"schema": _EVENT}},
}
#: What the caller saw of a call (the v1 API's ``fingerprint``), on an approval however it is sent.
_FINGERPRINT = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_FINGERPRINT_LENGTH,
    "description": "Beyond Mastra: the call's fingerprint as you saw it (the v1 API's): "
    "refused with 403 and nothing decided if the call changed since",
}

_TOOL_CALL = {
    "type": "object",
    "required": ["toolCallId", "toolName", "requiresApproval"],
    "properties": {
        "toolCallId": _STRING,
        "toolName": _STRING,
        "requiresApproval": {"type": "boolean"},
        "args": {"type": "object"},
        "suspendPayload": {},
        "toolStartedAt": {"type": "string", "format": "date-time"},
        "preview": {
            "type": "object",
            "description": "Beyond Mastra: what the call would do, as its tool (or agent) told: "
            "sentence, changes (label, before, after), diff, items, error",
        },
        "fingerprint": {
            "type": "string",
            "description": "Beyond Mastra, with a preview: send it with approve-tool-call; the "
            "approval is refused if the call changed since",
        },
    },
}
_RUN = {
    "type": "object",
    "required": ["runId", "status", "suspendedAt", "toolCalls"],
    "properties": {
        "runId": _STRING,
        "status": {"const": "suspended"},
        "threadId": _STRING,
        "resourceId": _STRING,
        "suspendedAt": {"type": "string", "format": "date-time"},
        "toolCalls": {"type": "array", "items": _TOOL_CALL},
    },
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "MastraSuspendedRuns": {
        "type": "object",
        "required": ["runs", "total"],
        "properties": {"runs": {"type": "array", "items": _RUN}, "total": {"type": "integer", "minimum": 0}},
    },
    "MastraStartBody": {
        "type": "object",
        "required": ["messages"],
        "properties": {
            "messages": {
                "description": "The prompt, or messages whose last user message holds it",
                "anyOf": [
                    {"type": "string", "pattern": r"\S"},
                    {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": r"\S"}},
                ],
            },
            "memory": {
                "type": "object",
                "properties": {"thread": _ID, "resource": _ID},
            },
            "threadId": _ID,
            "resourceId": _ID,
            "runId": {
                "type": "string",
                "pattern": RUN_ID.pattern,
                "description": "The run's id, of the caller's choosing; it must name no other run "
                "(a 400 run_id_in_use). Left out: a new one",
            },
        },
    },
    "MastraApproveBody": {
        "type": "object",
        "required": ["runId", "toolCallId"],
        "properties": {
            "runId": _ID,
            "toolCallId": _ID,
            "editedArgs": {
                "type": "object",
                "description": "Beyond Mastra: run the tool with these arguments",
            },
            "confirmRerun": {
                "type": "boolean",
                "description": "Beyond Mastra: the tool may have run already",
            },
            "fingerprint": _FINGERPRINT,
        },
    },
    "MastraDeclineBody": {
        "type": "object",
        "required": ["runId", "toolCallId"],
        "properties": {
            "runId": _ID,
            "toolCallId": _ID,
            "reason": {"type": "string", "maxLength": MAX_REASON_LENGTH},
        },
    },
    "MastraResumeBody": {
        "type": "object",
        "required": ["runId", "resumeData"],
        "properties": {
            "runId": _ID,
            "toolCallId": {**_ID, "description": "Optional when the run waits on one call"},
            "resumeData": {"not": {"type": "null"}},
            "confirmRerun": {"type": "boolean"},
            "fingerprint": _FINGERPRINT,
        },
    },
}

_NUMBER = {"type": "integer", "maximum": MAX_NUMBER}
LIST_QUERY: list[dict[str, Any]] = [
    {"name": "threadId", "in": "query", "required": False, "schema": _ID},
    {"name": "resourceId", "in": "query", "required": False, "schema": _ID},
    {
        "name": "fromDate",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "format": "date-time"},
    },
    {"name": "toDate", "in": "query", "required": False, "schema": {"type": "string", "format": "date-time"}},
    {"name": "perPage", "in": "query", "required": False, "schema": {**_NUMBER, "minimum": 1}},
    {"name": "page", "in": "query", "required": False, "schema": {**_NUMBER, "minimum": 0}},
    {"name": "toolName", "in": "query", "required": False, "schema": _ID},
    {"name": "kind", "in": "query", "required": False, "schema": {"enum": ["approval", "input"]}},
    {"name": "order", "in": "query", "required": False, "schema": {"enum": ["newest", "oldest"]}},
]


#: The query parameters of the operations that take any.
QUERIES: dict[str, list[dict[str, Any]]] = {"mastraListSuspendedRuns": LIST_QUERY}

#: What ``generate`` answers: Mastra's full output (the fields a client reads most; more are sent).
_FULL_OUTPUT = {
    "type": "object",
    "required": ["text", "usage", "totalUsage", "finishReason", "runId", "response", "messages"],
    "properties": {
        "text": _STRING,
        "finishReason": {"type": "string", "description": '"suspended" when the run waits on a call'},
        "usage": {"type": "object", "description": "The last step's tokens"},
        "totalUsage": {"type": "object", "description": "The run's tokens in all"},
        "runId": _STRING,
        "suspendPayload": {"type": "object", "description": "The waiting call, when suspended"},
        "response": {"type": "object"},
        "messages": {"type": "array"},
    },
}
_OUTPUT = {"description": "OK", "content": {"application/json": {"schema": _FULL_OUTPUT}}}
#: An agent as Mastra's server describes it.
_AGENT_OUT = {
    "type": "object",
    "required": ["id", "name", "tools", "agents", "workflows"],
    "properties": {
        "id": _STRING,
        "name": _STRING,
        "description": _STRING,
        "instructions": _STRING,
        "tools": {"type": "object"},
        "agents": {"type": "object"},
        "workflows": {"type": "object"},
        "modelId": _STRING,
        "provider": _STRING,
    },
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


#: (method, path, operationId, summary, body schema name or None, 200 answer, error statuses)
ROUTES: tuple[tuple[str, str, str, str, str | None, dict[str, Any], tuple[int, ...]], ...] = (
    (
        "get",
        "/api/agents",
        "mastraListAgents",
        "Mastra's listAgents: the agents the token's user may see, by id",
        None,
        {
            "description": "OK",
            "content": {
                "application/json": {"schema": {"type": "object", "additionalProperties": _AGENT_OUT}}
            },
        },
        (401,),
    ),
    (
        "get",
        _AGENT,
        "mastraAgentDetails",
        "Mastra's details: the agent, its tools (their input schemas) and model",
        None,
        {"description": "OK", "content": {"application/json": {"schema": _AGENT_OUT}}},
        (401, 403, 404),
    ),
    (
        "post",
        f"{_AGENT}/generate",
        "mastraGenerate",
        'Mastra\'s generate: run until the run ends or waits (finishReason "suspended"), then its '
        "full output",
        "MastraStartBody",
        _OUTPUT,
        (400, 401, 403, 404),
    ),
    (
        "post",
        f"{_AGENT}/approve-tool-call-generate",
        "mastraApproveToolCallGenerate",
        "Mastra's approveToolCallGenerate: the continuation's full output",
        "MastraApproveBody",
        _OUTPUT,
        (400, 401, 403, 404, 409, 429),
    ),
    (
        "post",
        f"{_AGENT}/decline-tool-call-generate",
        "mastraDeclineToolCallGenerate",
        "Mastra's declineToolCallGenerate: the continuation's full output",
        "MastraDeclineBody",
        _OUTPUT,
        (400, 401, 403, 404, 409, 429),
    ),
    (
        "get",
        f"{_AGENT}/suspended-runs",
        "mastraListSuspendedRuns",
        "Mastra's listSuspendedRuns: the agent's suspended runs, newest first (`perPage` and `page` "
        "go together; `fromDate` is not after `toDate`)",
        None,
        {"description": "OK", "content": {"application/json": {"schema": _ref("MastraSuspendedRuns")}}},
        (400, 401, 403, 404),
    ),
    (
        "post",
        f"{_AGENT}/stream",
        "mastraStream",
        "Start a run; its events as they happen",
        "MastraStartBody",
        _STREAM,
        (400, 401, 403, 404),
    ),
    (
        "post",
        f"{_AGENT}/approve-tool-call",
        "mastraApproveToolCall",
        "Mastra's approveToolCall: the continuation as a stream",
        "MastraApproveBody",
        _STREAM,
        (400, 401, 403, 404, 409, 429),
    ),
    (
        "post",
        f"{_AGENT}/decline-tool-call",
        "mastraDeclineToolCall",
        "Mastra's declineToolCall: the continuation as a stream",
        "MastraDeclineBody",
        _STREAM,
        (400, 401, 403, 404, 409, 429),
    ),
    (
        "post",
        f"{_AGENT}/resume-stream",
        "mastraResumeStream",
        "Mastra's resumeStream: answer a suspend()-ed call (or an approval with {approved})",
        "MastraResumeBody",
        _STREAM,
        (400, 401, 403, 404, 409, 429),
    ),
)
