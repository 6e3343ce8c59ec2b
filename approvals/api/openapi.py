"""The native API's OpenAPI 3.1 document, built from the pydantic models its views validate with.

No library: the maintained generators (django-ninja, drf-spectacular) bring their own routing and
view layer, and the views here are plain async Django views (the Mastra routes stream). pydantic
already writes JSON Schema 2020-12, which OpenAPI 3.1 takes as it is; this module only adds the
operations around it. ``OPERATIONS`` is the one list of what each route takes and answers; a test
checks it against the URL configuration so a route cannot go undocumented.

The Mastra-compatible routes (``/api/agents/...``) are in the document too, with schemas written by
hand (``mastra_doc``): their requests follow zod's rules and messages, not these models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from approvals.api import mastra_doc
from approvals.api.params import MAX_ID_LENGTH
from approvals.api.v1 import schemas as s

REF = "#/components/schemas/{model}"


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str
    summary: str
    ok: type[BaseModel]
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    errors: tuple[int, ...] = (401, 403, 404)
    tags: tuple[str, ...] = field(default=("v1",))
    #: The success statuses, each answering ``ok`` (a new request is 201; its retry 200).
    ok_statuses: tuple[int, ...] = (200,)
    #: Header parameters (OpenAPI parameter objects).
    headers: tuple[dict[str, Any], ...] = ()


_RUN = "/api/v1/agents/{agentId}/runs/{runId}"
_REQUESTS = "/api/v1/approval-requests"
_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "A retry with the same key and body answers the same request (200); another body "
    "under the key is a 422.",
    "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,255}$"},
}
_DECISION_ERRORS = (400, 401, 403, 404, 409, 429)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "get",
        "/api/v1/agents",
        "listAgents",
        "The agents the token's user may see, with pending counts",
        s.AgentList,
        errors=(401,),
    ),
    Operation("get", _RUN, "getRun", "One suspended run: its parked calls and conversation", s.RunOut),
    Operation(
        "post",
        _RUN + "/calls/{toolCallId}/approve",
        "approveCall",
        "Approve a parked call (optionally with edited arguments)",
        s.DecisionOut,
        body=s.ApproveBody,
        errors=_DECISION_ERRORS,
    ),
    Operation(
        "post",
        _RUN + "/calls/{toolCallId}/decline",
        "declineCall",
        "Decline a parked call; the model receives the reason",
        s.DecisionOut,
        body=s.DeclineBody,
        errors=_DECISION_ERRORS,
    ),
    Operation(
        "post",
        _RUN + "/calls/{toolCallId}/resume",
        "resumeCall",
        "Answer a suspend()-ed call with data valid against its resume schema",
        s.DecisionOut,
        body=s.ResumeBody,
        errors=_DECISION_ERRORS,
    ),
    Operation(
        "get",
        "/api/v1/audit",
        "listAuditEntries",
        "The audit log of the user's agents, filtered as on the audit page, newest first",
        s.AuditPage,
        query=s.AuditQuery,
        errors=(400, 401, 403),
    ),
    Operation(
        "post",
        _REQUESTS,
        "createApprovalRequest",
        "Ask for a person's decision on a call an external agent would make (its own token, or a reviewer's)",
        s.ApprovalRequestOut,
        body=s.ApprovalRequestBody,
        errors=(400, 401, 403, 404, 422),
        ok_statuses=(201, 200),
        headers=(_IDEMPOTENCY_KEY,),
        tags=("approval-requests",),
    ),
    Operation(
        "get",
        _REQUESTS + "/{requestId}",
        "getApprovalRequest",
        "An approval request and where it stands; with wait, once decided or after that many seconds",
        s.ApprovalRequestOut,
        query=s.WaitQuery,
        errors=(400, 401, 403, 404),
        tags=("approval-requests",),
    ),
    Operation(
        "post",
        _REQUESTS + "/{requestId}/cancel",
        "cancelApprovalRequest",
        "Withdraw a pending approval request (only whoever asked; 409 once decided)",
        s.ApprovalRequestOut,
        body=s.CancelBody,
        errors=(400, 401, 403, 404, 409),
        tags=("approval-requests",),
    ),
    Operation(
        "post",
        _REQUESTS + "/{requestId}/result",
        "reportApprovalRequestResult",
        "Report what running the approved call did (only whoever asked, once; 409 unless approved and not "
        "reported)",
        s.ApprovalRequestOut,
        body=s.ResultBody,
        errors=(400, 401, 403, 404, 409),
        tags=("approval-requests",),
    ),
)

_REASONS = {
    400: "Invalid query or body: `issues` names each field",
    401: "No valid Bearer token",
    403: "The user may not see this agent, lacks the permission, or may not approve this call (they"
    " started its run and the tool separates duties, or they already approved it); an approval request"
    " is withdrawn or reported on only by whoever asked",
    404: "Unknown agent, or no such suspended run / parked call",
    409: "Already decided (by whom, when), or a rerun not confirmed; a request decided already, or not "
    "approved, or its result reported already",
    422: "The request cannot be taken as it is (its arguments against its schema, a deadline in the "
    "past, an Idempotency-Key used for another request): `issues` says why",
    429: "Too many decisions with this token: see Retry-After",
}


def _path_parameters(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    return [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH},
        }
        for name in names
    ]


def _query_parameters(model: type[BaseModel], schema: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    required = set(schema.get("required", []))
    for name, prop in schema["properties"].items():
        out.append({"name": name, "in": "query", "required": name in required, "schema": prop})
    return out


@cache
def document() -> dict[str, Any]:
    models: set[type[BaseModel]] = {s.ErrorOut}
    for op in OPERATIONS:
        models.update(m for m in (op.ok, op.body) if m is not None)
    keys: list[tuple[type[BaseModel], Any]] = [(m, "serialization") for m in models]
    keys += [(op.body, "validation") for op in OPERATIONS if op.body is not None]
    refs, defs = models_json_schema(keys, ref_template=REF, by_alias=True)
    components = defs.get("$defs", {})
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        entry: dict[str, Any] = {
            "operationId": op.operation_id,
            "summary": op.summary,
            "tags": list(op.tags),
            "parameters": _path_parameters(op.path) + list(op.headers),
            "responses": {
                **{
                    str(status): {
                        "description": "Created" if status == 201 else "OK",
                        "content": {"application/json": {"schema": refs[(op.ok, "serialization")]}},
                    }
                    for status in op.ok_statuses
                },
                **{
                    str(code): {
                        "description": _REASONS[code],
                        "content": {"application/json": {"schema": refs[(s.ErrorOut, "serialization")]}},
                        **(
                            {"headers": {"Retry-After": {"schema": {"type": "integer"}}}}
                            if code == 429
                            else {}
                        ),
                    }
                    for code in op.errors
                },
            },
        }
        if op.query is not None:
            query_schema = op.query.model_json_schema(by_alias=True, ref_template=REF)
            entry["parameters"] += _query_parameters(op.query, query_schema)
        if op.body is not None:
            entry["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": refs[(op.body, "validation")]}},
            }
        paths.setdefault(op.path, {})[op.method] = entry
    error = refs[(s.ErrorOut, "serialization")]
    for method, path, operation_id, summary, body, ok, errors in mastra_doc.ROUTES:
        entry = {
            "operationId": operation_id,
            "summary": summary,
            "tags": ["mastra"],
            "parameters": _path_parameters(path) + mastra_doc.QUERIES.get(operation_id, []),
            "responses": {
                "200": ok,
                **{
                    str(code): {
                        "description": _REASONS[code],
                        "content": {"application/json": {"schema": error}},
                        **(
                            {"headers": {"Retry-After": {"schema": {"type": "integer"}}}}
                            if code == 429
                            else {}
                        ),
                    }
                    for code in errors
                },
            },
        }
        if body is not None:
            entry["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": REF.format(model=body)}}},
            }
        paths.setdefault(path, {})[method] = entry
    paths[_AG_UI_PATH] = {"post": _ag_ui_operation(error)}
    components["AgUiRunAgentInput"] = _AG_UI_INPUT
    components.update(mastra_doc.SCHEMAS)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Countersign API",
            "version": "1",
            "description": "The native API of Countersign's approval desk (`/api/v1/`) and the routes "
            "Mastra's client speaks (`/api/agents/...`). Every route takes "
            "`Authorization: Bearer <token>` (tokens: the dashboard's API tokens page); a same-origin "
            "script in a signed-in browser may use its session instead, with the `X-CSRFToken` "
            "header on POSTs.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}, {"session": [], "csrf": []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": settings.SESSION_COOKIE_NAME},
                "csrf": {"type": "apiKey", "in": "header", "name": "X-CSRFToken"},
            },
        },
    }


_AG_UI_PATH = "/api/ag-ui/agents/{agentId}"

#: AG-UI's ``RunAgentInput`` as the endpoint reads it (``ag_ui.core`` validates the whole of it).
_AG_UI_INPUT: dict[str, Any] = {
    "type": "object",
    "description": "AG-UI's RunAgentInput: the prompt is the last message (the user's); `resume` answers "
    "the interrupts the thread's run waits on (`metadata.countersign.wait: true`: only wait for the desk)",
    "required": ["threadId", "runId", "messages"],
    "properties": {
        "threadId": {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH},
        "runId": {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH},
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "role"],
                "properties": {
                    "id": {"type": "string"},
                    "role": {
                        "enum": ["user", "assistant", "system", "developer", "tool", "activity", "reasoning"]
                    },
                    "content": {},
                },
            },
        },
        "resume": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["interruptId", "status"],
                "properties": {
                    "interruptId": {"type": "string"},
                    "status": {"enum": ["resolved", "cancelled"]},
                    "payload": {},
                    "metadata": {"type": "object"},
                },
            },
        },
    },
}


#: Each server-sent event (as OpenAPI 3.2 describes a stream: ``data`` is the event's text): one
#: AG-UI event as JSON, named by its ``type``.
_AG_UI_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"type": "string"}},
            },
        },
    },
}


def _ag_ui_operation(error: dict[str, Any]) -> dict[str, Any]:
    return {
        "operationId": "agUiRunAgent",
        "summary": "Run the agent as an AG-UI agent, or resume its interrupts: AG-UI events as they "
        "happen (a run that waits for a human ends with the interrupt outcome)",
        "tags": ["ag-ui"],
        "parameters": _path_parameters(_AG_UI_PATH),
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": REF.format(model="AgUiRunAgentInput")}}},
        },
        "responses": {
            "200": {
                "description": "Server-sent AG-UI events, RUN_STARTED to RUN_FINISHED or RUN_ERROR",
                "content": {"text/event-stream": {"schema": _AG_UI_EVENT}},
            },
            **{
                str(code): {"description": _REASONS[code], "content": {"application/json": {"schema": error}}}
                for code in (400, 401, 403, 404)
            },
        },
    }


@require_GET
def document_view(request: HttpRequest) -> JsonResponse:
    return JsonResponse(document(), json_dumps_params={"indent": 1})


@require_GET
def docs_page(request: HttpRequest) -> HttpResponse:
    """The operations as a plain page (no script): each with its parameters, body and answers."""
    doc = document()
    operations = []
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            operations.append(
                {
                    "method": method.upper(),
                    "path": path,
                    "id": op["operationId"],
                    "summary": op["summary"],
                    "parameters": op["parameters"],
                    "body": body["$ref"].rsplit("/", 1)[-1] if body else None,
                    "responses": [
                        (code, r["description"], _answer(r)) for code, r in op["responses"].items()
                    ],
                }
            )
    schemas = sorted(doc["components"]["schemas"].items())
    return render(
        request,
        "approvals/api_docs.html",
        {"operations": operations, "schemas": [(name, _pretty(schema)) for name, schema in schemas]},
    )


def _answer(response: dict[str, Any]) -> str:
    """What a response holds, as the page names it: a schema's name, or the stream's media type."""
    media, content = next(iter(response["content"].items()))
    ref = content["schema"].get("$ref")
    return str(ref.rsplit("/", 1)[-1]) if ref else media


def _pretty(schema: dict[str, Any]) -> str:
    import json

    return json.dumps(schema, indent=2, ensure_ascii=False)
