"""The decision service call an API request makes, the same for Mastra's routes and /api/v1/."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from agents_runtime import AgentRun
from agents_runtime.vocabulary import DecisionAction
from approvals.access import AgentAccess
from approvals.services import decisions
from approvals.services.outcomes import DecisionOutcome


def decision_call(
    access: AgentAccess, action: str, run_id: str, tool_call_id: str, body: Any, shown: AgentRun | None
) -> Callable[[], Awaitable[DecisionOutcome]]:
    """``action`` ("approve" | "decline" | "resume") on the call, with what ``body`` carries for it
    (``edited_args`` / ``reason`` / ``resume_data``, and ``confirm_rerun``), ready to be awaited;
    ``shown``: the run as the request read it to check the data (None: it was not waiting)."""
    carried: dict[str, Any] = {
        "approve": {"edited_args": body.edited_args, "confirm_rerun": body.confirm_rerun},
        "decline": {"reason": body.reason.strip()},
        "resume": {"resume_data": body.resume_data, "confirm_rerun": body.confirm_rerun},
    }[action]
    return partial(
        decisions.adecide,
        access,
        run_id=run_id,
        tool_call_id=tool_call_id,
        action=DecisionAction(action),
        shown=shown,
        **carried,
    )
