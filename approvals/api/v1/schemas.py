"""The native API's shapes: one pydantic definition per body, query and answer.

The views validate requests with these models and build their answers with them; the OpenAPI
document (``approvals.api.openapi``) is generated from the same models' JSON Schema, so the
document cannot drift from what the routes accept and send. Field names are camelCase on the wire.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    SkipValidation,
    StrictBool,
)
from pydantic.alias_generators import to_camel

from agents_runtime.store import DecisionAction, Outcome
from agents_runtime.untrusted import MAX_REASON_LENGTH, text_problem
from approvals.services.requests import MAX_OUTPUT_CHARS

#: Beyond any real audit log; keeps the offset a database integer.
MAX_PAGE = 1_000_000
#: A request's deadline: at most a year away.
MAX_DEADLINE_SECONDS = 366 * 24 * 3600


def _storable(value: str) -> str:
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


#: Text a database can hold (no NUL, no lone surrogate): what a filter compares with stored text.
StoredText = Annotated[str, AfterValidator(_storable)]


#: JSON a request body brings: as ``JsonValue`` in the document, unchecked by pydantic. The body was
#: read by ``json.loads`` (``approvals.api.params.json_body``), so it holds JSON values only, and
#: pydantic's walk of each one ran on the event loop, through every value of a body of any size
#: within the API's limit, on routes any token reaches (refused or not after). What such data may
#: hold is the runtime's to check (``agents_runtime.untrusted.problems``: within its size limit, and
#: no further than it).
JsonIn = SkipValidation[JsonValue]


#: What pydantic would read as Unix seconds: "2026" (a year) as 1970-01-01T00:33:46Z.
_BARE_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _date_as_date(value: Any) -> Any:
    # pydantic would read "2026-06-01" as that day's first moment, and the bound would not be the day.
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        return date.fromisoformat(value)
    if isinstance(value, str) and _BARE_NUMBER.fullmatch(value):
        raise ValueError("expected an ISO 8601 date (YYYY-MM-DD) or date-time, not a number")
    return value


#: A bound of a time filter: a date (a whole day, UTC) or a moment.
DayOrMoment = Annotated[datetime | date, BeforeValidator(_date_as_date)]


class Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# -- requests ------------------------------------------------------------------------------------


class AuditQuery(Wire):
    """The audit log's filters, as on the dashboard's audit page (``AuditFilterForm``)."""

    agent: StoredText | None = Field(None, max_length=255, description="Only this agent's entries.")
    user: StoredText | None = Field(None, max_length=150, description="Only decisions by this user.")
    action: DecisionAction | None = None
    outcome: Outcome | None = None
    from_: DayOrMoment | None = Field(
        None, alias="from", description="From this moment (a date: its start, UTC)."
    )
    to: DayOrMoment | None = Field(
        None, description="Up to this moment (a date: its end, UTC); before `from` is a 400."
    )
    page: int = Field(1, ge=1, le=MAX_PAGE, description="1-based.")
    per_page: int = Field(50, ge=1, le=200)


class ApproveBody(Wire):
    edited_args: dict[str, JsonIn] | None = Field(
        None, description="Run the tool with these arguments (the whole object) instead of the model's."
    )
    confirm_rerun: StrictBool = Field(
        False, description="Needed when the call's tool started in a continuation that died."
    )
    fingerprint: str | None = Field(
        None,
        max_length=64,
        description="The call's fingerprint as you saw it (from GET): the approval is refused with 403 "
        "and nothing is decided if the call changed since (its arguments, preview or tool version).",
    )
    confirm: StrictBool = Field(
        False,
        description="“I checked this”: needed to approve a call marked risky (its tool asks for a "
        "confirmation, or an argument holds a value the tool marks risky); without it such an approval "
        "is refused with 409 risky_unconfirmed and nothing is decided.",
    )


class DeclineBody(Wire):
    reason: str = Field(
        "", max_length=MAX_REASON_LENGTH, description="What the model receives as the tool's result."
    )


class ResumeBody(Wire):
    resume_data: JsonIn = Field(description="The answer, valid against the call's resume schema.")
    confirm_rerun: StrictBool = False


class DeadlineIn(Wire):
    """When nobody answered by then, the deadline decides: give ``at`` or ``inSeconds`` (one of them:
    both, or neither, is a 422)."""

    at: AwareDatetime | None = Field(None, description="The moment (with its offset).")
    in_seconds: int | None = Field(None, ge=1, le=MAX_DEADLINE_SECONDS, description="Seconds from now.")
    default: Literal["decline", "approve"] = Field(
        "decline", description="What the deadline decides: approve lets the agent run the call."
    )


class ApprovalRequestBody(Wire):
    """A call an agent running elsewhere would make, for a person to decide."""

    agent: StoredText = Field(
        min_length=1, max_length=64, description="The external agent's id (as registered)."
    )
    tool: StoredText = Field(min_length=1, max_length=128, description="The tool it would call.")
    args: dict[str, JsonIn] = Field(description="The arguments it would call it with.")
    args_schema: dict[str, JsonIn] | None = Field(
        None,
        description="A JSON Schema of the arguments: they must be valid against it, a reviewer's edits "
        "are checked against it, and the card shows them by it.",
    )
    title: StoredText | None = Field(None, max_length=200, description="What the card calls it.")
    preview: dict[str, JsonIn] | None = Field(
        None,
        description="What the call would do, shown on the card: any of sentence (text), changes (a "
        "list of {label, before, after}), diff (a text diff), items (a list of texts).",
    )
    thread_id: StoredText | None = Field(None, max_length=255)
    resource_id: StoredText | None = Field(None, max_length=255)
    deadline: DeadlineIn | None = None


class CancelBody(Wire):
    reason: StoredText = Field("", max_length=MAX_REASON_LENGTH)


class ResultBody(Wire):
    ok: StrictBool = Field(description="Whether running the call went without error.")
    output: StoredText = Field("", max_length=MAX_OUTPUT_CHARS, description="A short output or error.")


class WaitQuery(Wire):
    wait: float = Field(
        0, ge=0, le=60, description="Seconds to wait for a decision (long poll) before answering."
    )


# -- answers -------------------------------------------------------------------------------------


class AgentOut(Wire):
    id: str
    name: str
    pending: int = Field(description="Suspended runs waiting for a decision.")
    oldest_suspended_at: datetime | None = None
    links: dict[str, str]


class AgentList(Wire):
    agents: list[AgentOut]


class ToolCallOut(Wire):
    tool_call_id: str
    tool_name: str
    kind: Literal["approval", "input"]
    args: dict[str, JsonValue] | None = None
    suspend_payload: JsonValue = None
    resume_schema: dict[str, JsonValue] | None = None
    tool_started_at: datetime | None = None
    approved_by: list[str] = Field(
        default_factory=list, description="A call that needs several approvals: who approved so far."
    )
    preview: dict[str, JsonValue] | None = Field(
        None, description="What the call would do, as its tool told."
    )
    approved_preview: dict[str, JsonValue] | None = Field(
        None,
        description="A call an approval was given on but whose recheck sent it back before its tool "
        "ran: what was approved (``preview`` is what it would do now). None otherwise.",
    )
    recheck: dict[str, JsonValue] | None = Field(
        None,
        description="That recheck: when (``at``), after whose approval (``by``) and, if the preview "
        "could not be taken again, why (``error``).",
    )
    fingerprint: str | None = Field(
        None,
        description="What a decider is shown of an approval call (its arguments, preview, tool version): "
        "send it with approve, and the approval is refused (403) if the call changed since.",
    )


class MessageOut(Wire):
    role: Literal["user", "assistant", "tool"]
    kind: Literal["text", "tool-call", "tool-result"]
    timestamp: datetime | None = None
    text: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    args: JsonValue = None
    result: JsonValue = None


class RunOut(Wire):
    run_id: str
    agent_id: str
    status: Literal["suspended", "running", "completed", "failed"] = Field(
        description="suspended: waits on its calls; running: a continuation works on it; completed / "
        "failed: ended, from its permanent record (its messages are gone once the record is pruned)"
    )
    thread_id: str | None
    resource_id: str | None
    suspended_at: datetime | None = None
    ended_at: datetime | None = None
    #: The final answer (completed) or the error (failed).
    detail: str | None = None
    tool_calls: list[ToolCallOut]
    messages: list[MessageOut]


class AuditEntryOut(Wire):
    id: int
    created_at: datetime
    username: str
    channel: str
    agent_id: str
    run_id: str
    thread_id: str
    resource_id: str
    tool_call_id: str
    tool_name: str
    action: str
    reason: str
    outcome: str
    outcome_detail: str
    args: JsonValue = None
    suspend_payload: JsonValue = None
    resume_data: JsonValue = None
    edited_args: JsonValue = None


class AuditPage(Wire):
    entries: list[AuditEntryOut]
    total: int = Field(
        description="The matching entries, counted up to 1,000 past this page's first one (see total_capped)."
    )
    total_capped: bool = Field(
        description="The count stopped there: more entries match (the audit page's CSV export has them all)."
    )
    page: int
    per_page: int


class DecisionOut(Wire):
    """What a decision did (the run went as far as it goes: completed, suspended again, failed, or
    continuing in a background worker)."""

    outcome: Outcome = Field(
        description="completed, suspended_again, continuing, failed, interrupted, or vote_recorded (an "
        "approval of a call that needs several: it still waits; see approvals)."
    )
    message: str
    agent_id: str
    run_id: str
    tool_call_id: str
    action: DecisionAction
    decided_by: str
    decided_at: datetime
    text: str | None = None
    error: str | None = None
    run: RunOut | None = Field(None, description="The run as it waits now (suspended_again, vote_recorded).")
    audit_entry_id: int | None = None
    approvals: str | None = Field(None, description='vote_recorded: e.g. "1 of 2 approvals".')


class DeadlineOut(Wire):
    at: datetime
    default: Literal["decline", "approve"]


class ResultOut(Wire):
    ok: bool
    output: str
    reported_at: datetime


class ApprovalRequestOut(Wire):
    """An approval request and where it stands."""

    id: str
    status: Literal["pending", "approved", "declined", "expired", "cancelled"] = Field(
        description="approved: run the call with approvedArgs (a deadline whose default is approve "
        "approves too, decidedBy null); declined, expired, cancelled: do not run it."
    )
    agent: str
    tool: str
    args: dict[str, JsonValue]
    title: str | None
    preview: dict[str, JsonValue] | None = Field(description="What the call would do, as sent.")
    thread_id: str | None
    resource_id: str | None
    url: str = Field(description="The request's page at the desk.")
    created_at: datetime
    deadline: DeadlineOut | None
    approved_args: dict[str, JsonValue] | None = Field(
        description="The arguments to run the call with (a reviewer may have edited them); null "
        "unless approved."
    )
    edited: bool
    reason: str | None
    decided_by: str | None
    decided_at: datetime | None
    result: ResultOut | None = Field(description="What the agent reported running the call did.")


class Issue(BaseModel):
    field: str
    message: str


class ErrorOut(BaseModel):
    """Every refusal: a message, a stable code, and for a 400 the fields at fault."""

    model_config = ConfigDict(extra="allow")

    error: str
    code: str
    issues: list[Issue] | None = None


def dump(model: BaseModel) -> dict[str, Any]:
    out: dict[str, Any] = model.model_dump(mode="json", by_alias=True)
    return out
