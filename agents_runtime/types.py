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
    "step-finish",
    "finish",
    "error",
]


@dataclass(frozen=True)
class KeyResult:
    """The fields a tool marks as key (``tool(key_results=...)``) of one earlier result in the run."""

    tool_name: str
    values: dict[str, Any]
    #: A negative result: it found nothing (empty, None, False, none of its key fields)...
    nothing: bool = False
    #: ...or it failed (``ModelRetry``, arguments the model got wrong): why, as the model was told.
    error: str | None = None


@dataclass(frozen=True)
class PreviousAnswer:
    """An answer a human gave earlier in the run (a follow-up question shows it)."""

    tool_name: str
    answer: Any
    question: str | None = None


@dataclass(frozen=True)
class GrantFailure:
    """A standing grant that could have let the call through but whose condition could not be
    evaluated on its arguments (it raised, or was over its evaluation budget): it did not apply."""

    grant_id: int
    #: "grant #3 of rita".
    grant: str
    #: Why, in a sentence ("no argument 'meta'").
    error: str


def _mapping(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class CallContext:
    """Why a call waits, as it stood when it parked (beyond Mastra). Texts are model output."""

    #: The last message of the user before the call.
    user_message: str | None = None
    #: What the agent said in the turn that made the call.
    agent_said: str | None = None
    key_results: tuple[KeyResult, ...] = ()
    #: The approval rule's explanation ("Refunds over $50 need approval"); None when it gave none.
    approval_reason: str | None = None
    previous_answers: tuple[PreviousAnswer, ...] = ()
    #: Grants whose conditions failed on this call when it parked (so it waits for a person).
    grant_failures: tuple[GrantFailure, ...] = ()
    #: Routing rules whose conditions failed on this call when it parked (``grant``: "rule #3 of
    #: rita"): no rule applied and the call waits for a person.
    rule_failures: tuple[GrantFailure, ...] = ()
    #: The routing rule that sent this call to a person or two ("rule #3 of rita"), if one did.
    routed_by: str | None = None
    #: Approvals this call needs when a routing rule raised its tool's count.
    required_approvals: int | None = None
    #: An external agent's request (``agents_runtime.external``): the title it gave, and the JSON
    #: Schema its arguments (and a reviewer's edits) are checked and shown by.
    title: str | None = None
    args_schema: dict[str, Any] | None = None
    #: What the call would do, as its tool (or the agent that asked) told when it parked
    #: (``previews``); its JSON form, as stored and fingerprinted.
    preview: dict[str, Any] | None = None
    #: An approved call sent back before its tool ran (``tool(recheck=True)``): the preview the
    #: approval was bound to (``preview`` is what it would do now), and the recheck itself
    #: (``{"at", "by", "error"}``: when, whose approval, why it could not tell if it failed).
    approved_preview: dict[str, Any] | None = None
    recheck: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, data: Any) -> CallContext | None:
        """Tolerant of odd stored shapes: what cannot be read is left out."""
        if not isinstance(data, dict):
            return None

        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) and value else None

        results = data.get("key_results")
        answers = data.get("previous_answers")
        failures = data.get("grant_failures")
        rule_failures = data.get("rule_failures")
        required = data.get("required_approvals")
        schema = data.get("args_schema")
        return cls(
            user_message=text("user_message"),
            agent_said=text("agent_said"),
            key_results=tuple(
                KeyResult(
                    str(r.get("tool_name") or ""),
                    dict(r["values"]),
                    nothing=r.get("nothing") is True,
                    error=r["error"] if isinstance(r.get("error"), str) else None,
                )
                for r in (results if isinstance(results, list) else [])
                if isinstance(r, dict) and isinstance(r.get("values"), dict)
            ),
            approval_reason=text("approval_reason"),
            previous_answers=tuple(
                PreviousAnswer(
                    str(a.get("tool_name") or ""),
                    a.get("answer"),
                    a["question"] if isinstance(a.get("question"), str) else None,
                )
                for a in (answers if isinstance(answers, list) else [])
                if isinstance(a, dict)
            ),
            grant_failures=tuple(
                GrantFailure(f["grant_id"], str(f.get("grant") or ""), str(f.get("error") or ""))
                for f in (failures if isinstance(failures, list) else [])
                if isinstance(f, dict) and type(f.get("grant_id")) is int
            ),
            rule_failures=tuple(
                GrantFailure(f["rule_id"], str(f.get("rule") or ""), str(f.get("error") or ""))
                for f in (rule_failures if isinstance(rule_failures, list) else [])
                if isinstance(f, dict) and type(f.get("rule_id")) is int
            ),
            routed_by=text("routed_by"),
            required_approvals=required if type(required) is int else None,
            title=text("title"),
            args_schema=schema if isinstance(schema, dict) else None,
            preview=data["preview"] if isinstance(data.get("preview"), dict) else None,
            approved_preview=_mapping(data.get("approved_preview")),
            recheck=_mapping(data.get("recheck")),
        )


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
    #: Beyond Mastra: why the call waits (None for calls parked before it was kept).
    context: CallContext | None = None
    #: Beyond Mastra: on a supervisor's run, the sub-agent whose call this really is.
    via_agent_id: str | None = None
    #: Beyond Mastra: when nobody answering decides the call (``tool(expires_after=...)``), and
    #: what happens then (``"decline"``, ``"approve"``, ``"escalate"``); None: it waits forever.
    expires_at: datetime | None = None
    on_expiry: str | None = None
    #: Set once its deadline passed and it moved to this reviewer group (``on_expiry="escalate"``).
    escalated_to: str | None = None
    #: Beyond Mastra: on a call whose tool needs several approvals, who approved it so far.
    approved_by: tuple[str, ...] = ()

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
    #: Beyond Mastra: who started the run, when the starter said (``stream(started_by=...)``).
    started_by: str | None = None


@dataclass(frozen=True)
class ListSuspendedRunsResult:
    runs: list[AgentRun]
    #: Every match before pagination.
    total: int


@dataclass(frozen=True)
class ApprovalTally:
    """Beyond Mastra: an approval recorded as one vote of several (``tool(approvals=N)``)."""

    tool_call_id: str
    #: Who approved so far, oldest first (this approval last).
    approved_by: tuple[str, ...]
    required: int

    def __str__(self) -> str:
        return f"{len(self.approved_by)} of {self.required} approvals"


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
    #: Set when an approval was recorded as a vote: the call still waits (``status == "suspended"``).
    approvals: ApprovalTally | None = None


@dataclass(frozen=True)
class Chunk:
    """One streamed event of a run. ``payload`` keys are snake_case."""

    type: ChunkType
    run_id: str
    payload: dict[str, Any] = field(default_factory=dict)
