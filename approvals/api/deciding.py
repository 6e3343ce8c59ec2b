"""The decision an API request makes, the same for Mastra's routes and /api/v1/: one request to the
one door (``services.decide``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from agents_runtime import Confirmation, DecisionRequest, Origin
from agents_runtime.store import DecisionAction
from approvals.policy import AgentAccess
from approvals.services import decisions
from approvals.services.decisions import DecisionOutcome


def decision_call(
    access: AgentAccess, action: str, run_id: str, tool_call_id: str, body: Any, *, origin: Origin
) -> Callable[[], Awaitable[DecisionOutcome]]:
    """``action`` ("approve" | "decline" | "resume") on the call, with what ``body`` carries for it
    (``edited_args`` / ``reason`` / ``resume_data``, ``confirm_rerun``, ``confirm_risky``), ready to
    be awaited."""
    confirmations = {
        Confirmation.RERUN: bool(getattr(body, "confirm_rerun", False)),
        Confirmation.RISKY: bool(getattr(body, "confirm_risky", False)),
    }
    request = DecisionRequest(
        run_id,
        tool_call_id,
        DecisionAction(action),
        origin=origin,
        reason=body.reason if action == "decline" else None,
        edited_args=body.edited_args if action == "approve" else None,
        resume_data=body.resume_data if action == "resume" else None,
        confirmations=frozenset(c for c, given in confirmations.items() if given),
        seen=getattr(body, "seen", None),
    )
    return partial(decisions.adecide, access, request)
