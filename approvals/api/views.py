"""The Mastra-compatible routes (``/api/agents/<agent_id>/...``): thin async views.

Authentication is the Bearer token (``auth``), validation ``params``, the wire format ``serialize``
and ``streams``; decisions go through the same services as the dashboard's, recorded with the
channel "api".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from agents_runtime import AgentRun, InvalidPagination, Origin, RunNotFound
from agents_runtime.store import DEFAULT_DECLINE_REASON
from approvals import agents as served
from approvals.api import deciding, params, precheck, streams
from approvals.api.auth import agent_access, require, user_access
from approvals.api.errors import ApiError, issue, try_later
from approvals.api.ratelimit import limit_decisions
from approvals.api.serialize import MastraEvents, agent_json, run_json
from approvals.policy import DECIDE_PERMISSION, agent_denied
from approvals.services import runs, waits

View = Callable[..., Awaitable[HttpResponseBase]]


def api_view(*methods: str) -> Callable[[View], Any]:
    """Exempt from the CSRF middleware (``auth`` checks a session's requests itself), one method
    list; ``ApiError`` becomes its JSON answer, and so does a caller's answer too many waiting (429)."""

    # Typed ``Any`` outward: Django's ``path`` stubs know only synchronous views.
    def decorator(view: View) -> Any:
        @wraps(view)
        async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.method not in methods:
                error = ApiError(405, f"Method {request.method} not allowed", "method_not_allowed")
                response = error.response()
                response["Allow"] = ", ".join(methods)
                return response
            try:
                params.path_ids(kwargs)
                return await view(request, *args, **kwargs)
            except ApiError as error:
                return error.response()
            except waits.TooManyWaits as refused:
                return try_later(429, str(refused), "too_many_waits", refused.retry_after).response()

        return csrf_exempt(wrapped)

    return decorator


@api_view("GET")
async def suspended_runs(request: HttpRequest, agent_id: str) -> HttpResponseBase:
    access = await agent_access(request, agent_id)
    query = params.list_query(request.GET)
    try:
        result = await access.agent.list_suspended_runs(
            thread_id=query.thread_id,
            resource_id=query.resource_id,
            from_date=query.from_date,
            to_date=query.to_date,
            per_page=query.per_page,
            page=query.page,
            tool_name=query.tool_name,
            kind=query.kind,
            order=query.order,
            escalated_to=access.escalation_scope,
        )
    except InvalidPagination as exc:
        raise ApiError(
            400,
            "Invalid query parameters",
            "invalid_query",
            issues=[{"field": "perPage", "message": str(exc)}],
        ) from None
    body = {"runs": [run_json(r, access.agent) for r in result.runs], "total": result.total}
    return JsonResponse(body, json_dumps_params={"separators": (",", ":")})


@api_view("GET")
async def agents(request: HttpRequest) -> HttpResponseBase:
    """Mastra's ``listAgents``: the agents the token's user may see, by id."""
    access = await user_access(request)
    body = {agent_id: agent_json(served.get(agent_id)) for agent_id in access.agent_ids}
    return JsonResponse(body, json_dumps_params={"separators": (",", ":")})


@api_view("GET")
async def agent_detail(request: HttpRequest, agent_id: str) -> HttpResponseBase:
    """Mastra's ``details``: of an agent the user sees, as ``agents`` lists them (one seen only for
    the calls escalated to them is refused as any agent they do not see: its instructions, tools and
    sub-agents are not those calls')."""
    access = await agent_access(request, agent_id)
    if access.escalated_only:
        raise ApiError(403, str(agent_denied(agent_id)), "forbidden")
    return JsonResponse(agent_json(access.agent), json_dumps_params={"separators": (",", ":")})


async def _start(request: HttpRequest, agent_id: str, *, stream: bool) -> HttpResponseBase:
    access = await agent_access(request, agent_id)
    start = params.start_body(params.json_body(request))
    await require(access, DECIDE_PERMISSION, to="start runs")
    try:
        run = await runs.run_stream(
            access,
            prompt=start.prompt,
            thread_id=start.thread_id,
            resource_id=start.resource_id,
            run_id=start.run_id,
        )
    except PermissionDenied as exc:
        raise ApiError(403, str(exc), "permission_denied") from None
    except runs.RunIdInUse as exc:
        raise ApiError(400, str(exc), "run_id_in_use", issues=[issue("runId", str(exc))]) from None
    events = MastraEvents(
        run.run_id, thread_id=start.thread_id, resource_id=start.resource_id, prompt=start.prompt
    )
    return await streams.answer(streams.run_events(run, agent_id, events), events, stream=stream)


@api_view("POST")
async def stream(request: HttpRequest, agent_id: str) -> HttpResponseBase:
    return await _start(request, agent_id, stream=True)


@api_view("POST")
async def generate(request: HttpRequest, agent_id: str) -> HttpResponseBase:
    """Mastra's ``generate``: the run's full output once it has ended or parked (``finishReason``
    ``"suspended"``)."""
    return await _start(request, agent_id, stream=False)


async def _parked(access: Any, run_id: str) -> tuple[AgentRun | None, dict[str, Any]]:
    """The run, and the arguments of each call in its conversation (a ``suspend()``-ed call's are only
    there), for the stream that answers the decision."""
    try:
        run = await access.agent.get_suspended_run(run_id)
        if not access.sees(run):
            raise RunNotFound(run_id)  # (escalation only: as unknown as a run that never existed)
        # (An approval's call carries its arguments: the conversation is read only for the others.)
        needs_conversation = any(call.args is None for call in run.tool_calls)
        messages = await access.agent.run_messages(run_id) if needs_conversation else []
    except RunNotFound:
        return None, {}
    args = {
        m["tool_call_id"]: m["args"] for m in messages if m["kind"] == "tool-call" and m["args"] is not None
    }
    return run, args


async def _decision(
    request: HttpRequest, agent_id: str, action: params.Action, *, stream: bool = True
) -> HttpResponseBase:
    access = await agent_access(request, agent_id)
    body = params.decision_body(params.json_body(request), action)
    await require(access, DECIDE_PERMISSION, to="decide on suspended runs")
    await limit_decisions(request, access.user)
    run, args = await _parked(access, body.run_id)
    calls = list(run.tool_calls) if run is not None else []
    tool_call_id = body.tool_call_id
    if tool_call_id is None:
        # Mastra's resume picks the run's only parked call; several need a toolCallId.
        if len(calls) != 1:
            if not calls:
                raise streams.not_found(body.run_id)
            raise ApiError(
                400,
                "Invalid request body",
                "invalid_body",
                issues=[
                    {"field": "toolCallId", "message": f"The run waits on {len(calls)} calls: say which"}
                ],
            )
        tool_call_id = calls[0].tool_call_id
    # Refused data is a 400 that leaves no trace: checked here, before the service records attempts.
    precheck.check(
        access.agent, next((c for c in calls if c.tool_call_id == tool_call_id), None), action, body
    )
    decide = deciding.decision_call(access, action, body.run_id, tool_call_id, body, origin=Origin.MASTRA)
    declined: dict[str, str] = {}
    data = body.resume_data
    if action == "decline":
        declined[tool_call_id] = body.reason.strip() or DEFAULT_DECLINE_REASON
    elif action == "resume" and isinstance(data, dict) and data.get("approved") is False:
        # An approval answered through resume-stream with {"approved": false}: a decline.
        declined[tool_call_id] = str(data.get("reason") or DEFAULT_DECLINE_REASON)
    events = MastraEvents(
        body.run_id,
        calls=calls,
        args=args,
        declined=declined,
        thread_id=run.thread_id if run is not None else None,
        resource_id=run.resource_id if run is not None else None,
    )
    continued = await streams.decision_events(decide, body.run_id, calls=calls, events=events)
    return await streams.answer(continued, events, stream=stream)


@api_view("POST")
async def approve_tool_call(request: HttpRequest, agent_id: str) -> HttpResponseBase:
    return await _decision(request, agent_id, "approve")


@api_view("POST")
async def decline_tool_call(request: HttpRequest, agent_id: str) -> HttpResponseBase:
    return await _decision(request, agent_id, "decline")


@api_view("POST")
async def approve_tool_call_generate(request: HttpRequest, agent_id: str) -> HttpResponseBase:
    return await _decision(request, agent_id, "approve", stream=False)


@api_view("POST")
async def decline_tool_call_generate(request: HttpRequest, agent_id: str) -> HttpResponseBase:
    return await _decision(request, agent_id, "decline", stream=False)


@api_view("POST")
async def resume_stream(request: HttpRequest, agent_id: str) -> HttpResponseBase:
    return await _decision(request, agent_id, "resume")
