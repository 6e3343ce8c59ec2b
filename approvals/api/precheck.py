"""A decision's data checked against the parked call's tool before the decision service sees it.

The decision service records every attempt that reaches the runtime, refused data included (the
dashboard keeps those on the audit log). An API request that is refused must change nothing, the
audit log included, so the API checks the data first with the runtime's own checks (the storable-data
check and the tool's validators) and answers 400 without calling the service. The runtime checks
again when the decision lands (the call may have changed in between: then the service's row stands).
"""

from __future__ import annotations

from typing import Any

from agents_runtime import Agent, AgentRunToolCall, InvalidResumeData
from agents_runtime.store import DecisionAction
from agents_runtime.untrusted import check_decision, reason_problem
from approvals.api.errors import ApiError
from approvals.api.params import Action, Decision


def _refusal(exc: InvalidResumeData, root: str) -> ApiError:
    """``root``: the body's field the errors' locations are in ("": the body itself)."""
    issues = [
        {
            "field": ".".join([p for p in [root, *(str(p) for p in e.get("loc", ()))] if p]) or "body",
            "message": str(e.get("msg", "")),
        }
        for e in exc.errors
    ] or [{"field": root or "body", "message": str(exc)}]
    return ApiError(400, "Invalid request body", "invalid_decision", issues=issues, detail=str(exc))


def _approval_answer(data: Any) -> bool:
    """``{"approved": bool, "reason"?: str}``: the only resume data an approval takes."""
    return (
        isinstance(data, dict)
        and set(data) in ({"approved"}, {"approved", "reason"})
        and isinstance(data["approved"], bool)
        and isinstance(data.get("reason", ""), str)
    )


def _root(action: Action, body: Decision) -> str:
    """Where in the body the data ``check_decision`` refuses is."""
    if action == "decline":
        return ""  # (the reason: its errors name it)
    return "editedArgs" if body.edited_args is not None and action == "approve" else "resumeData"


def check(agent: Agent, call: AgentRunToolCall | None, action: Action, body: Decision) -> None:
    """Raise the 400 the runtime would refuse this decision with; ``None`` when it would take it.

    ``call`` is the parked call the decision names (``None``: unknown, left to the service's 404).
    """
    verb = DecisionAction(action)
    try:
        check_decision(
            verb,
            reason=body.reason if action == "decline" else None,
            resume_data=body.resume_data,
            edited_args=body.edited_args,
        )
    except InvalidResumeData as exc:
        raise _refusal(exc, _root(action, body)) from None
    if call is None or action == "decline":
        return
    tool = agent.find_tool(call.tool_name, call.via_agent_id)
    if tool is not None and call.context is not None:
        tool = tool.for_call(call.context.args_schema, call.context.title)
    if call.requires_approval:
        if action == "resume" and not _approval_answer(body.resume_data):
            raise ApiError(
                400,
                "Invalid request body",
                "invalid_decision",
                issues=[
                    {
                        "field": "resumeData",
                        "message": 'expected {"approved": bool} or {"approved": bool, "reason": str}',
                    }
                ],
                detail=f"Tool call {call.tool_call_id!r} waits for approval",
            )
        why = body.resume_data.get("reason") if action == "resume" else None
        problem = reason_problem(why) if isinstance(why, str) else None
        if problem:
            raise ApiError(
                400,
                "Invalid request body",
                "invalid_decision",
                issues=[{"field": "resumeData.reason", "message": problem}],
            )
        if action == "approve" and body.edited_args is not None and tool is not None:
            try:
                tool.validate_args(body.edited_args)
            except InvalidResumeData as exc:
                raise _refusal(exc, "editedArgs") from None
        return
    if action == "approve":
        raise ApiError(
            400,
            "Invalid request body",
            "invalid_decision",
            issues=[
                {"field": "toolCallId", "message": "The call called suspend(): answer it with resume-stream"}
            ],
        )
    if tool is not None:
        try:
            tool.validate_resume_data(body.resume_data)
        except InvalidResumeData as exc:
            raise _refusal(exc, "resumeData") from None
