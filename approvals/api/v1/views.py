"""The native API (``/api/v1/``): agents, one run, the audit log, and decisions answered as JSON.

Same tokens and access as the Mastra-compatible routes; requests are validated with the pydantic
models of ``schemas`` (which the OpenAPI document is generated from) and decisions go through the
same services, recorded with the channel "api". A decision's answer is its outcome, once the run has
gone as far as it goes (or is handed to a background worker: ``continuing``), not a stream.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase, JsonResponse, QueryDict
from django.urls import reverse
from pydantic import BaseModel, ValidationError

from agents_runtime import Agent, AgentRun, Origin, RunNotFound
from approvals import queries
from approvals.api import deciding, params, precheck
from approvals.api.auth import Requester, agent_access, requester, require, user_access
from approvals.api.errors import ApiError, invalid_body, invalid_query
from approvals.api.ratelimit import limit_decisions
from approvals.api.serialize import fingerprint_of
from approvals.api.streams import not_found, outcome_error
from approvals.api.v1 import schemas as s
from approvals.api.views import api_view
from approvals.models import ApprovalRequest, AuditEntry
from approvals.policy import AUDIT_PERMISSION, DECIDE_PERMISSION, Access
from approvals.services import requests, waits
from approvals.services.decisions import DecisionOutcome


def _issues(exc: ValidationError) -> list[dict[str, str]]:
    return [
        {"field": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]} for e in exc.errors()
    ]


def _query[M: BaseModel](model: type[M], query: QueryDict) -> M:
    try:
        return model.model_validate(query.dict())
    except ValidationError as exc:
        raise invalid_query(_issues(exc)) from None


def _body[M: BaseModel](model: type[M], request: HttpRequest) -> M:
    try:
        return model.model_validate(params.json_body(request))
    except ValidationError as exc:
        raise invalid_body(_issues(exc)) from None


def _json(model: BaseModel, status: int = 200) -> JsonResponse:
    return JsonResponse(s.dump(model), status=status, json_dumps_params={"separators": (",", ":")})


def _moment(value: datetime | date | None, *, end_of_day: bool) -> datetime | None:
    """A bound in UTC, as the audit page's form takes it (a date: its start, or its end)."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        return datetime.combine(value, time.max if end_of_day else time.min, tzinfo=UTC)
    return params.utc(value)


@api_view("GET")
async def agent_list(request: HttpRequest) -> HttpResponseBase:
    access = await user_access(request)
    rows = await sync_to_async(queries.overview_rows)(agent_ids=access.agent_ids)
    agents = [
        s.AgentOut(
            id=row.agent_id,
            name=row.name,
            pending=row.pending,
            oldest_suspended_at=row.oldest_suspended_at,
            links={"suspendedRuns": reverse("api:suspended_runs", args=[row.agent_id])},
        )
        for row in rows
    ]
    return _json(s.AgentList(agents=agents))


def run_out(
    agent_id: str, run: AgentRun, messages: list[dict[str, Any]], agent: Agent | None = None
) -> s.RunOut:
    return s.RunOut(
        run_id=run.run_id,
        agent_id=agent_id,
        status="suspended",
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        suspended_at=run.suspended_at,
        tool_calls=[
            s.ToolCallOut(
                tool_call_id=c.tool_call_id,
                tool_name=c.tool_name,
                kind="approval" if c.requires_approval else "input",
                args=c.args,
                suspend_payload=c.suspend_payload,
                resume_schema=c.resume_schema,
                tool_started_at=c.tool_started_at,
                approved_by=list(c.approved_by),
                preview=c.context.preview if c.context is not None else None,
                approved_preview=c.context.approved_preview if c.context is not None else None,
                recheck=c.context.recheck if c.context is not None else None,
                fingerprint=fingerprint_of(agent, c),
            )
            for c in run.tool_calls
        ],
        messages=_messages(messages),
    )


_MESSAGE_KEYS = ("role", "kind", "timestamp", "text", "tool_name", "tool_call_id", "args", "result")


def _messages(plain: list[dict[str, Any]]) -> list[s.MessageOut]:
    return [s.MessageOut.model_validate({k: m.get(k) for k in _MESSAGE_KEYS}) for m in plain]


def _run_past_waiting(agent_id: str, run_id: str, agent_ids: tuple[str, ...]) -> s.RunOut | None:
    """A run that no longer waits: being continued, or ended (its permanent record), else None.
    The link webhooks give to a run stays valid after its calls are decided."""
    continuing = queries.run_continuing(run_id, agent_ids=agent_ids)
    if continuing is not None and continuing.agent_id == agent_id:
        out = s.RunOut(
            run_id=run_id,
            agent_id=agent_id,
            status="running",
            thread_id=continuing.thread_id,
            resource_id=continuing.resource_id,
            suspended_at=continuing.suspended_at,
            tool_calls=[],
            messages=[],
        )
        return out
    record = queries.run_record(run_id, agent_ids=agent_ids)
    if record is None or record.agent_id != agent_id:
        return None
    return s.RunOut(
        run_id=run_id,
        agent_id=agent_id,
        status=record.status,  # type: ignore[arg-type]  # (ENDINGS: completed or failed)
        thread_id=record.thread_id,
        resource_id=record.resource_id,
        ended_at=record.ended_at,
        detail=record.detail,
        tool_calls=[],
        messages=_messages(record.transcript or []),
    )


@api_view("GET")
async def run_detail(request: HttpRequest, agent_id: str, run_id: str) -> HttpResponseBase:
    access = await agent_access(request, agent_id)
    try:
        run = await access.agent.get_suspended_run(run_id)
        if not access.sees(run):
            raise RunNotFound(run_id)  # (escalation only: as unknown as a run that never existed)
    except RunNotFound:
        past = await sync_to_async(_run_past_waiting)(agent_id, run_id, access.access.agent_ids)
        if past is None:
            raise not_found(run_id) from None
        return _json(past)
    return _json(run_out(agent_id, run, await _conversation(access.agent, run_id), access.agent))


async def _conversation(agent: Agent, run_id: str) -> list[dict[str, Any]]:
    """The messages that led to the run's wait; none once they cannot be read (its snapshot no longer
    reads, or it ended since it was read): the run is still shown as it was read, as its dashboard page
    shows it."""
    try:
        return await agent.run_messages(run_id)
    except RunNotFound:
        return []


def _audit_page(access: Access, query: s.AuditQuery) -> s.AuditPage:
    access.require(AUDIT_PERMISSION, to="read the audit log")
    entries = AuditEntry.objects.filter(agent_id__in=access.agent_ids).matching(
        agent_id=query.agent,
        username=query.user,
        action=query.action,
        outcome=query.outcome,
        start=_moment(query.from_, end_of_day=False),
        end=_moment(query.to, end_of_day=True),
    )
    entries = entries.order_by("-created_at", "-id")
    first = (query.page - 1) * query.per_page
    rows = entries[first : first + query.per_page]
    # Counted in the page's order up to a limit past the page's start, as the audit page counts:
    # a full COUNT of a log of millions reads every row.
    most = first + queries.AUDIT_COUNT_LIMIT
    total = entries[: most + 1].count()
    return s.AuditPage(
        entries=[
            s.AuditEntryOut.model_validate({name: getattr(e, name) for name in s.AuditEntryOut.model_fields})
            for e in rows
        ],
        total=min(total, most),
        total_capped=total > most,
        page=query.page,
        per_page=query.per_page,
    )


@api_view("GET")
async def audit_log(request: HttpRequest) -> HttpResponseBase:
    access = await user_access(request)
    query = _query(s.AuditQuery, request.GET)
    start, end = _moment(query.from_, end_of_day=False), _moment(query.to, end_of_day=True)
    if start is not None and end is not None and start > end:
        raise invalid_query([{"field": "to", "message": "“to” is before “from”."}])
    try:
        page = await sync_to_async(_audit_page)(access, query)
    except PermissionDenied as exc:
        raise ApiError(403, str(exc), "permission_denied") from None
    return _json(page)


def _decision_out(outcome: DecisionOutcome, agent_id: str, agent: Agent | None = None) -> s.DecisionOut:
    return s.DecisionOut(
        outcome=outcome.status,
        message=outcome.message,
        agent_id=agent_id,
        run_id=outcome.run_id,
        tool_call_id=outcome.tool_call_id,
        action=outcome.action,
        decided_by=outcome.decided_by,
        decided_at=outcome.decided_at,
        text=outcome.text,
        error=outcome.error,
        run=run_out(agent_id, outcome.run, [], agent) if outcome.run is not None else None,
        audit_entry_id=outcome.audit_entry_id,
        approvals=str(outcome.approvals) if outcome.approvals is not None else None,
    )


async def _decide(
    request: HttpRequest, agent_id: str, run_id: str, tool_call_id: str, action: params.Action
) -> HttpResponseBase:
    access = await agent_access(request, agent_id)
    bodies: dict[str, type[BaseModel]] = {
        "approve": s.ApproveBody,
        "decline": s.DeclineBody,
        "resume": s.ResumeBody,
    }
    model = bodies[action]
    body: Any = _body(model, request)
    await require(access, DECIDE_PERMISSION, to="decide on suspended runs")
    await limit_decisions(request, access.user)
    decision = params.Decision(
        run_id=run_id,
        tool_call_id=tool_call_id,
        reason=getattr(body, "reason", ""),
        edited_args=getattr(body, "edited_args", None),
        resume_data=getattr(body, "resume_data", None),
        confirm_rerun=getattr(body, "confirm_rerun", False),
        confirm_risky=getattr(body, "confirm", False),
        seen=getattr(body, "fingerprint", None),
    )
    try:
        run: AgentRun | None = await access.agent.get_suspended_run(run_id)
    except RunNotFound:
        run = None
    if run is not None and not access.sees(run):
        run = None  # (the door answers as for an unknown run: nothing is told of it here either)
    calls = list(run.tool_calls) if run is not None else []
    call = next((c for c in calls if c.tool_call_id == tool_call_id), None)
    precheck.check(access.agent, call, action, decision)
    decide = deciding.decision_call(access, action, run_id, tool_call_id, decision, origin=Origin.API)
    try:
        outcome = await decide()
    except PermissionDenied as exc:
        raise ApiError(403, str(exc), "permission_denied") from None
    error = outcome_error(outcome, calls)
    if error is not None:
        raise error
    return _json(_decision_out(outcome, agent_id, access.agent))


@api_view("POST")
async def approve(request: HttpRequest, agent_id: str, run_id: str, tool_call_id: str) -> HttpResponseBase:
    return await _decide(request, agent_id, run_id, tool_call_id, "approve")


@api_view("POST")
async def decline(request: HttpRequest, agent_id: str, run_id: str, tool_call_id: str) -> HttpResponseBase:
    return await _decide(request, agent_id, run_id, tool_call_id, "decline")


@api_view("POST")
async def resume(request: HttpRequest, agent_id: str, run_id: str, tool_call_id: str) -> HttpResponseBase:
    return await _decide(request, agent_id, run_id, tool_call_id, "resume")


# -- approval requests from any process (``services.requests``) ---------------------------------------

#: ``Idempotency-Key``: printable ASCII, as HTTP headers are.
_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def _refused(exc: requests.RequestRefused) -> ApiError:
    return ApiError(exc.status, exc.message, exc.code, issues=exc.issues)


def _request_out(state: requests.RequestState, request: HttpRequest) -> s.ApprovalRequestOut:
    row = state.request
    reported = row.result_reported_at
    return s.ApprovalRequestOut(
        id=row.run_id,
        status=state.status,  # type: ignore[arg-type]  # (one of the five)
        agent=row.agent_id,
        tool=row.tool_name,
        args=row.args,
        title=row.title or None,
        preview=row.preview,
        thread_id=row.thread_id,
        resource_id=row.resource_id,
        url=request.build_absolute_uri(reverse("approvals:run", args=[row.run_id])),
        created_at=row.created_at,
        deadline=None
        if row.deadline_at is None
        else s.DeadlineOut(at=row.deadline_at, default=row.deadline_default),  # type: ignore[arg-type]
        approved_args=state.approved_args,
        edited=state.edited,
        reason=state.reason,
        decided_by=state.decided_by,
        decided_at=state.decided_at,
        result=None
        if reported is None
        else s.ResultOut(ok=bool(row.result_ok), output=row.result_output, reported_at=reported),
    )


def _idempotency_key(request: HttpRequest) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not _KEY.fullmatch(key):
        raise ApiError(
            400,
            "Invalid Idempotency-Key",
            "invalid_header",
            issues=[{"field": "Idempotency-Key", "message": "1 to 255 printable ASCII characters"}],
        )
    return key


@api_view("POST")
async def approval_requests(request: HttpRequest) -> HttpResponseBase:
    who = await requester(request)
    body = _body(s.ApprovalRequestBody, request)
    key = _idempotency_key(request)
    await sync_to_async(who.may_ask_for)(body.agent)
    deadline = body.deadline
    asked = requests.Asked(
        agent_id=body.agent,
        tool_name=body.tool,
        args=body.args,
        args_schema=body.args_schema,
        title=body.title,
        preview=body.preview,
        thread_id=body.thread_id,
        resource_id=body.resource_id,
        deadline_at=None if deadline is None or deadline.at is None else params.utc(deadline.at),
        deadline_in=None if deadline is None else deadline.in_seconds,
        deadline_default="decline" if deadline is None else deadline.default,
        deadline_given=deadline is not None,
    )
    try:
        row, made = await requests.create(asked, started_by=who.username, idempotency_key=key)
    except requests.RequestRefused as exc:
        raise _refused(exc) from None
    state = await sync_to_async(requests.state_of)(row)
    return _json(_request_out(state, request), status=201 if made else 200)


def _own_request(who: Requester, request_id: str) -> ApprovalRequest:
    """The request, if this requester may ask for its agent; 404 otherwise (a request of an agent
    they may not ask for is as unknown as one that never existed)."""
    row = ApprovalRequest.objects.filter(run_id=request_id).first()
    if row is not None:
        try:
            who.may_ask_for(row.agent_id)
        except ApiError:
            row = None
    if row is None:
        raise ApiError(404, f"No approval request {request_id!r}", "not_found")
    return row


@api_view("GET")
async def approval_request(request: HttpRequest, request_id: str) -> HttpResponseBase:
    who = await requester(request)
    query = _query(s.WaitQuery, request.GET)
    row = await sync_to_async(_own_request)(who, request_id)
    # (A read that does not wait holds no open wait: ``held(None)`` counts nothing.)
    async with waits.held(who.username if query.wait else None):
        state = await requests.wait(row, query.wait)
    return _json(_request_out(state, request))


@api_view("POST")
async def approval_request_cancel(request: HttpRequest, request_id: str) -> HttpResponseBase:
    who = await requester(request)
    body = _body(s.CancelBody, request)
    row = await sync_to_async(_own_request)(who, request_id)
    # A cancellation is a decision (the one door's): it counts as the desk's decisions do.
    await limit_decisions(request, who.access.user if who.access is not None else None)
    try:
        state = await requests.cancel(row, actor=who.username, reason=body.reason)
    except requests.RequestRefused as exc:
        raise _refused(exc) from None
    return _json(_request_out(state, request))


@api_view("POST")
async def approval_request_result(request: HttpRequest, request_id: str) -> HttpResponseBase:
    who = await requester(request)
    body = _body(s.ResultBody, request)
    row = await sync_to_async(_own_request)(who, request_id)
    try:
        state = await sync_to_async(requests.report)(row, ok=body.ok, output=body.output, actor=who.username)
    except requests.RequestRefused as exc:
        raise _refused(exc) from None
    return _json(_request_out(state, request))
