"""Extending a waiting call's deadline: a reviewer's act, with a reason, in the audit log.

The run store writes the audit row (action ``extend``, outcome ``rescheduled``) in the step that
moves the deadline (``approvals.store.Deadlines``); this refuses a user who may not decide and
turns the runtime's refusals into a message. Nothing changes when it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from asgiref.sync import async_to_sync

from agents_runtime import RunAlreadyDecided, RunNotFound, ToolCallNotSuspended
from approvals.policy import DECIDE_PERMISSION, AgentAccess


@dataclass(frozen=True)
class Extension:
    #: The new deadline, or None when it was refused (``message`` says why).
    expires_at: datetime | None
    message: str


def deadline_extend(
    target: AgentAccess, *, run_id: str, tool_call_id: str, by: timedelta, reason: str
) -> Extension:
    target.access.require(DECIDE_PERMISSION, to="extend deadlines")
    if not target.may_decide_call(run_id, tool_call_id):
        return Extension(None, "This call is not waiting any more: its deadline cannot change.")
    try:
        new = async_to_sync(target.agent.extend_deadline)(
            run_id=run_id, tool_call_id=tool_call_id, by=by, reason=reason, actor=target.access.username
        )
    except (RunAlreadyDecided, RunNotFound, ToolCallNotSuspended):
        return Extension(None, "This call is not waiting any more: its deadline cannot change.")
    except ValueError as exc:
        return Extension(None, str(exc))
    return Extension(new, "Deadline extended.")
