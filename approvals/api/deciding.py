"""The decision service call an API request makes, the same for Mastra's routes and /api/v1/."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from agents_runtime import AgentRun
from approvals.access import AgentAccess
from approvals.services import decisions
from approvals.services.outcomes import DecisionOutcome


def decision_call(
    access: AgentAccess, action: str, run_id: str, tool_call_id: str, body: Any, shown: AgentRun | None
) -> Callable[[], DecisionOutcome]:
    """``action`` ("approve" | "decline" | "resume") on the call, with what ``body`` carries for it
    (``edited_args`` / ``reason`` / ``resume_data``, and ``confirm_rerun``), ready to run in a thread;
    ``shown``: the run as the request read it to check the data (None: it was not waiting)."""
    if action == "approve":
        return partial(
            decisions.decision_approve,
            access,
            run_id=run_id,
            tool_call_id=tool_call_id,
            edited_args=body.edited_args,
            confirm_rerun=body.confirm_rerun,
            shown=shown,
        )
    if action == "decline":
        return partial(
            decisions.decision_decline,
            access,
            run_id=run_id,
            tool_call_id=tool_call_id,
            reason=body.reason,
            shown=shown,
        )
    return partial(
        decisions.decision_resume,
        access,
        run_id=run_id,
        tool_call_id=tool_call_id,
        resume_data=body.resume_data,
        confirm_rerun=body.confirm_rerun,
        shown=shown,
    )
