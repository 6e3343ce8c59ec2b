"""What the API accepts: the query of the listing and the bodies of the POST routes.

Messages follow Mastra's (zod 4's wording) where Mastra has the same rule, so a client that shows
them reads the same text from either server. Unknown keys (``requestContext``, ``memory`` on a
decision, ``model``, ``format``...) are accepted and ignored, as Mastra does.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, QueryDict
from pydantic.alias_generators import to_camel

from agents_runtime.untrusted import reason_problem, text_problem
from approvals.api.errors import invalid_body, invalid_query, issue, path_not_found

Action = Literal["approve", "decline", "resume"]
MAX_BODY_BYTES = 1024 * 1024
MAX_NUMBER = 1_000_000_000
#: The longest id the run store keeps (agents, runs, calls, threads, end users, tools).
MAX_ID_LENGTH = 255
_INT = re.compile(r"^\s*[+-]?\d+\s*$")


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot name anything stored (too long, NUL, a lone surrogate), or None."""
    if len(value) > MAX_ID_LENGTH:
        return f"Too big: expected string to have <={MAX_ID_LENGTH} characters"
    return text_problem(value)


def _check_id(value: str, field: str, issues: list[dict[str, str]]) -> None:
    problem = id_problem(value)
    if problem:
        issues.append(issue(field, problem))


def path_ids(ids: dict[str, Any]) -> None:
    """404 for a path parameter that cannot name anything stored: no such agent, run or call."""
    for name, value in ids.items():
        problem = id_problem(value) if isinstance(value, str) else None
        if problem:
            raise path_not_found(to_camel(name), problem)


def utc(when: datetime) -> datetime:
    """``when`` in UTC (naive: taken as UTC), or the end (or start) of time past what a datetime holds.

    In UTC because PostgreSQL refuses offsets past 15:59, which ISO 8601 allows (up to 23:59).
    """
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC) if when.year > 1 else datetime.min.replace(tzinfo=UTC)


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
    text = raw.strip()
    if _INT.match(raw):
        # (Digits alone: past MAX_NUMBER's length is too big or too small, however many there are.)
        digits = text.lstrip("+-")
        number: float = int(text) if len(digits) <= 12 else (-1 if text.startswith("-") else MAX_NUMBER + 1)
    else:
        try:
            number = float(text) if text else 0.0
        except ValueError:
            number = float("nan")
        if number != number:
            issues.append(issue(field, "Invalid input: expected number, received NaN"))
            return None
        if math.isfinite(number) and not number.is_integer():
            issues.append(issue(field, "Invalid input: expected int, received number"))
            return None
    if number > MAX_NUMBER:
        # Past any real listing, and past what a database offset holds.
        issues.append(issue(field, f"Too big: expected number to be <={MAX_NUMBER}"))
        return None
    if number < minimum:
        bound = ">0" if minimum == 1 else ">=0"
        issues.append(issue(field, f"Too small: expected number to be {bound}"))
        return None
    return int(number)


def _date(raw: str, field: str, issues: list[dict[str, str]]) -> datetime | None:
    try:
        when = datetime.fromisoformat(raw.strip())
    except ValueError:
        issues.append(issue(field, "Invalid input: expected date, received Date"))
        return None
    return utc(when)


def list_query(query: QueryDict) -> ListQuery:
    issues: list[dict[str, str]] = []
    values: dict[str, Any] = {}
    for name, attr in (("threadId", "thread_id"), ("resourceId", "resource_id"), ("toolName", "tool_name")):
        if name in query:
            values[attr] = query[name]
            _check_id(values[attr], name, issues)
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
    too_big = invalid_body([issue("body", f"The body is over {MAX_BODY_BYTES} bytes")])
    try:
        raw = request.body
    except RequestDataTooBig:  # (past DATA_UPLOAD_MAX_MEMORY_SIZE Django does not read it at all)
        raise too_big from None
    if len(raw) > MAX_BODY_BYTES:
        raise too_big
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_body([issue("body", f"Invalid JSON: {exc}")]) from None
    except RecursionError:
        raise invalid_body([issue("body", "Invalid JSON: nested too deeply")]) from None
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


def _id(body: dict[str, Any], key: str, issues: list[dict[str, str]], *, required: bool) -> str | None:
    value = _string(body, key, issues, required=required)
    problem = id_problem(value) if value is not None else None
    if problem:
        issues.append(issue(key, problem))
        return None
    return value


#: The longest fingerprint taken (``agents_runtime.fingerprint`` gives 64 hex digits).
MAX_FINGERPRINT_LENGTH = 64


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
    #: The call's fingerprint as the decider saw it (the v1 API's ``fingerprint``; None: not checked).
    seen: str | None = None


def decision_body(body: dict[str, Any], action: Action) -> Decision:
    issues: list[dict[str, str]] = []
    run_id = _id(body, "runId", issues, required=True)
    # Over HTTP Mastra requires the call on approve and decline; resume picks the only parked one.
    tool_call_id = _id(body, "toolCallId", issues, required=action != "resume")
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
    # Beyond Mastra: the call's fingerprint as the caller saw it (the v1 API's), so an approval on a
    # call changed since is refused, whether approved outright or by ``resumeData: {"approved": true}``;
    # Mastra's own client sends none and decides unbound, as before.
    seen = body.get("fingerprint") if action in ("approve", "resume") else None
    if seen is not None and not (isinstance(seen, str) and 0 < len(seen) <= MAX_FINGERPRINT_LENGTH):
        issues.append(
            issue("fingerprint", f"Invalid input: a fingerprint is 1 to {MAX_FINGERPRINT_LENGTH} characters")
        )
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
        seen=seen,
    )


@dataclass(frozen=True)
class Start:
    prompt: str
    thread_id: str | None
    resource_id: str | None
    #: The caller's id for the run (Mastra's ``runId``); None: a new one.
    run_id: str | None = None


#: A caller's run id: what a URL path segment carries as it is (the run's pages and routes name it);
#: not "." or "..", path segments a browser resolves away (``/runs/../`` is ``/``).
RUN_ID = re.compile(rf"^(?!\.\.?$)[A-Za-z0-9._:@~-]{{1,{MAX_ID_LENGTH}}}$")
RUN_ID_RULE = f"Invalid run id: 1 to {MAX_ID_LENGTH} of letters, digits and ._:@~- (not . or ..)"


def _run_id(body: dict[str, Any], issues: list[dict[str, str]]) -> str | None:
    value = _string(body, "runId", issues, required=False)
    if value is not None and not RUN_ID.match(value):
        issues.append(issue("runId", RUN_ID_RULE))
        return None
    return value


def start_body(body: dict[str, Any]) -> Start:
    """``messages`` (a string, or messages whose last user text is the prompt), memory and ``runId``."""
    issues: list[dict[str, str]] = []
    run_id = _run_id(body, issues)
    prompt = _prompt(body.get("messages"))
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
        if isinstance(value, str):
            _check_id(value, field, issues)
        elif value is not None:
            issues.append(issue(field, f"Invalid input: expected string, received {_type_name(value)}"))
    if issues:
        raise invalid_body(issues)
    return Start(prompt=prompt, thread_id=thread or None, resource_id=resource or None, run_id=run_id)


def _prompt(messages: Any) -> str:
    """The last user text of ``messages``."""
    prompt = ""
    if isinstance(messages, str):
        prompt = messages
    elif isinstance(messages, list):
        for message in messages:
            if isinstance(message, str):
                prompt = message
            elif isinstance(message, dict) and message.get("role", "user") == "user":
                prompt = _text_of(message.get("content"))
    return prompt


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""
