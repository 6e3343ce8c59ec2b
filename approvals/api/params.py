"""What the API accepts: the query of the listing and the bodies of the POST routes.

Messages follow Mastra's (zod 4's wording) where Mastra has the same rule, so a client that shows
them reads the same text from either server. Unknown keys (``requestContext``, ``memory`` on a
decision, ``model``, ``format``...) are accepted and ignored, as Mastra does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from django.http import HttpRequest, QueryDict

from agents_runtime.untrusted import reason_problem
from approvals.api.errors import invalid_body, invalid_query, issue

Action = Literal["approve", "decline", "resume"]
MAX_BODY_BYTES = 1024 * 1024
MAX_NUMBER = 1_000_000_000
_INT = re.compile(r"^\s*[+-]?\d+\s*$")


@dataclass(frozen=True)
class ListQuery:
    thread_id: str | None = None
    resource_id: str | None = None
    from_date: datetime | None = None
    to_date: datetime | None = None
    per_page: int | None = None
    page: int | None = None
    tool_name: str | None = None
    kind: str | None = None
    order: Literal["newest", "oldest"] = "newest"


def _number(raw: str, field: str, *, minimum: int, issues: list[dict[str, str]]) -> int | None:
    # z.coerce.number().int() then .positive() / .nonnegative(), with zod's messages.
    try:
        value = float(raw) if raw.strip() else 0.0
    except ValueError:
        value = float("nan")
    if value != value:
        issues.append(issue(field, "Invalid input: expected number, received NaN"))
        return None
    if not _INT.match(raw) and not value.is_integer():
        issues.append(issue(field, "Invalid input: expected int, received number"))
        return None
    number = int(value)
    if number > MAX_NUMBER:
        # Past any real listing, and past what a database offset holds.
        issues.append(issue(field, f"Too big: expected number to be <={MAX_NUMBER}"))
        return None
    if number < minimum:
        bound = ">0" if minimum == 1 else ">=0"
        issues.append(issue(field, f"Too small: expected number to be {bound}"))
        return None
    return number


def _date(raw: str, field: str, issues: list[dict[str, str]]) -> datetime | None:
    try:
        when = datetime.fromisoformat(raw.strip())
    except ValueError:
        issues.append(issue(field, "Invalid input: expected date, received Date"))
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def list_query(query: QueryDict) -> ListQuery:
    issues: list[dict[str, str]] = []
    values: dict[str, Any] = {}
    for name, attr in (("threadId", "thread_id"), ("resourceId", "resource_id"), ("toolName", "tool_name")):
        if name in query:
            values[attr] = query[name]
    for name, attr in (("fromDate", "from_date"), ("toDate", "to_date")):
        if name in query:
            values[attr] = _date(str(query[name]), name, issues)
    if "perPage" in query:
        values["per_page"] = _number(str(query["perPage"]), "perPage", minimum=1, issues=issues)
    if "page" in query:
        values["page"] = _number(str(query["page"]), "page", minimum=0, issues=issues)
    for name, options in (("kind", ("approval", "input")), ("order", ("newest", "oldest"))):
        if name in query:
            if query[name] not in options:
                expected = "|".join(f'"{o}"' for o in options)
                issues.append(issue(name, f"Invalid option: expected one of {expected}"))
            values[name] = query[name]
    start, end = values.get("from_date"), values.get("to_date")
    if start is not None and end is not None and start > end:
        issues.append(issue("fromDate", "fromDate must be less than or equal to toDate"))
    if issues:
        raise invalid_query(issues)
    return ListQuery(**values)


def json_body(request: HttpRequest) -> dict[str, Any]:
    if len(request.body) > MAX_BODY_BYTES:
        raise invalid_body([issue("body", f"The body is over {MAX_BODY_BYTES} bytes")])
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_body([issue("body", f"Invalid JSON: {exc}")]) from None
    if not isinstance(body, dict):
        raise invalid_body([issue("body", "Invalid input: expected object")])
    return body


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string" if isinstance(value, str) else type(value).__name__


def _string(body: dict[str, Any], key: str, issues: list[dict[str, str]], *, required: bool) -> str | None:
    if key not in body:
        if required:
            issues.append(issue(key, "Invalid input: expected string, received undefined"))
        return None
    value = body[key]
    if not isinstance(value, str):
        issues.append(issue(key, f"Invalid input: expected string, received {_type_name(value)}"))
        return None
    return value


@dataclass(frozen=True)
class Decision:
    run_id: str
    tool_call_id: str | None
    reason: str = ""
    edited_args: dict[str, Any] | None = None
    resume_data: Any = None
    confirm_rerun: bool = False
    #: "I checked this" (the v1 API's ``confirm``; Mastra's routes carry none).
    confirm_risky: bool = False


def decision_body(body: dict[str, Any], action: Action) -> Decision:
    issues: list[dict[str, str]] = []
    run_id = _string(body, "runId", issues, required=True)
    # Over HTTP Mastra requires the call on approve and decline; resume picks the only parked one.
    tool_call_id = _string(body, "toolCallId", issues, required=action != "resume")
    reason = _string(body, "reason", issues, required=False) if action == "decline" else None
    problem = reason_problem(reason) if reason is not None else None
    if problem:
        issues.append(issue("reason", problem))
    edited = body.get("editedArgs") if action == "approve" else None
    if edited is not None and not isinstance(edited, dict):
        issues.append(issue("editedArgs", f"Invalid input: expected object, received {_type_name(edited)}"))
    confirm = body.get("confirmRerun", False)
    if not isinstance(confirm, bool):
        issues.append(
            issue("confirmRerun", f"Invalid input: expected boolean, received {_type_name(confirm)}")
        )
    if action == "resume" and body.get("resumeData") is None:
        issues.append(issue("resumeData", "resumeData is required"))
    if issues:
        raise invalid_body(issues)
    assert run_id is not None
    return Decision(
        run_id=run_id,
        tool_call_id=tool_call_id,
        reason=reason or "",
        edited_args=edited,
        resume_data=body.get("resumeData"),
        confirm_rerun=confirm,
    )


@dataclass(frozen=True)
class Start:
    prompt: str
    thread_id: str | None
    resource_id: str | None


def start_body(body: dict[str, Any]) -> Start:
    """``messages`` (a string, or messages whose last user text is the prompt) and memory."""
    issues: list[dict[str, str]] = []
    messages = body.get("messages")
    prompt = ""
    if isinstance(messages, str):
        prompt = messages
    elif isinstance(messages, list):
        for message in messages:
            if isinstance(message, str):
                prompt = message
            elif isinstance(message, dict) and message.get("role", "user") == "user":
                prompt = _text_of(message.get("content"))
    if not prompt.strip():
        issues.append(issue("messages", "messages must be a non-empty string or hold a user message"))
    memory = body.get("memory")
    thread: Any = body.get("threadId")
    resource: Any = body.get("resourceId")
    if isinstance(memory, dict):
        thread = memory.get("thread", thread)
        resource = memory.get("resource", resource)
        if isinstance(thread, dict):
            thread = thread.get("id")
    for field, value in (("memory.thread", thread), ("memory.resource", resource)):
        if value is not None and not isinstance(value, str):
            issues.append(issue(field, f"Invalid input: expected string, received {_type_name(value)}"))
    if issues:
        raise invalid_body(issues)
    return Start(prompt=prompt, thread_id=thread or None, resource_id=resource or None)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""
