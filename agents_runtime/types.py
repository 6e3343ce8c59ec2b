"""Public value types: what listings and runs return."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

#: ``"running"`` (beyond Mastra): the continuation was handed to a background worker.
RunStatus = Literal["success", "suspended", "failed", "running"]
ChunkType = Literal[
    "text-delta",
    "tool-call",
    "tool-result",
    "tool-call-approval",
    "tool-call-suspended",
    "finish",
    "error",
]


@dataclass(frozen=True)
class AgentRunToolCall:
    """One parked tool call of a suspended run."""

    tool_call_id: str
    tool_name: str
    #: The arguments the model supplied (approval suspensions only).
    args: dict[str, Any] | None
    #: True: waits on approve/decline. False: the tool called ``suspend()`` and waits for resume data.
    requires_approval: bool
    #: What the tool passed to ``suspend()`` (``suspend()`` suspensions only).
    suspend_payload: Any = None
    resume_schema: dict[str, Any] | None = None
    suspend_schema: dict[str, Any] | None = None
    #: Beyond Mastra: set when a continuation started this call's tool and then died (a crash or a
    #: lost lease) before the run ended, so the call is offered again although the tool may have
    #: run. Approving or answering it again needs ``confirm_rerun=True``; the tool gets the same
    #: ``tool_call_id`` (its idempotency key) both times.
    tool_started_at: datetime | None = None

    @property
    def interrupted_after_start(self) -> bool:
        return self.tool_started_at is not None


@dataclass(frozen=True)
class AgentRun:
    """A suspended run as listed by ``Agent.list_suspended_runs``."""

    run_id: str
    thread_id: str | None
    resource_id: str | None
    #: When the run last suspended (aware, UTC).
    suspended_at: datetime
    tool_calls: list[AgentRunToolCall]
    created_at: datetime
    #: Set on a sub-agent's inner run: the supervisor's run id.
    parent_run_id: str | None = None
    #: True when an earlier continuation died and the calls were parked again.
    interrupted: bool = False
    agent_id: str = ""
    status: Literal["suspended"] = "suspended"


@dataclass(frozen=True)
class ListSuspendedRunsResult:
    runs: list[AgentRun]
    #: Every match before pagination.
    total: int


@dataclass(frozen=True)
class RunResult:
    """The outcome of a run or of a continuation."""

    run_id: str
    status: RunStatus
    text: str | None = None
    #: The parked calls when ``status == "suspended"``.
    tool_calls: list[AgentRunToolCall] = field(default_factory=list)
    #: The error message when ``status == "failed"``.
    error: str | None = None


@dataclass(frozen=True)
class Chunk:
    """One streamed event of a run. ``payload`` keys are snake_case."""

    type: ChunkType
    run_id: str
    payload: dict[str, Any] = field(default_factory=dict)
