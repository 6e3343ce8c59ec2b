"""Run events: what a ``Runtime`` tells its listeners after each stored change."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .store import StoredRun

#: ``call-voted``: an approval recorded as one vote of several (the call still waits).
RunEventType = Literal[
    "run-suspended",
    "call-decided",
    "call-voted",
    "run-resumed",
    "run-completed",
    "run-failed",
    # A parked call's deadline passed and it moved to another group, or a reviewer extended it.
    "call-escalated",
    "deadline-extended",
]


@dataclass(frozen=True)
class RunEvent:
    """Small and id-only: listeners refetch what they show."""

    type: RunEventType
    agent_id: str
    run_id: str
    tool_call_id: str | None = None
    action: str | None = None
    actor: str | None = None
    #: ``call-decided`` on an approval with edited arguments.
    edited: bool = False
    #: The groups the calls it is about were escalated to (``tool(on_expiry="escalate")``), sorted:
    #: members of those groups may see those calls, and not the agent's others, so a host tells them
    #: of this event apart. Set on a call's events, and on ``run-suspended`` when a call parked
    #: again (sent back by its recheck) was escalated.
    escalated_to: tuple[str, ...] = ()


@dataclass(frozen=True)
class Continuation:
    """A run whose decisions are all in, claimed at ``version``, for a worker to continue.

    ``claimed`` is the run as the decision claimed it, with its snapshot: a scheduler that continues
    it in this process hands it to ``Agent.continue_run`` rather than have it read back. It never
    leaves the process (a worker elsewhere gets the ids and reads the run). ``started``: the decision
    took the claim's lease already, the scheduler having said it runs this continuation at once
    (``Scheduler.runs_at_once``); never true of one that waits in a queue.
    """

    agent_id: str
    run_id: str
    version: int
    claimed: StoredRun | None = field(default=None, compare=False, repr=False)
    started: bool = field(default=False, compare=False)
