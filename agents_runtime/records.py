"""The run store's records: the values a store keeps and hands back, and the rules every store shares.

``Decision``, ``Delegation`` and ``ParkedCall`` round-trip through JSON with pydantic
(``to_json``/``from_json``); the shape is the one stored runs and their history already hold.

Code that has just read a record's values from its own rows or records builds it with ``construct``
rather than its ``__init__`` (a frozen dataclass's ``__init__`` sets each field through
``object.__setattr__``, several times the cost: a listing builds thousands; the figures are in
docs/scaling.md, from ``bench/list_suspended_runs.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import PlainSerializer, PlainValidator, TypeAdapter

from .deadlines import Deadline
from .errors import RunAlreadyDecided, ToolCallNotSuspended
from .vocabulary import CallKind, DecisionAction

_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(field.name for field in fields(cls))
    return names


def construct[T](cls: type[T], /, **values: Any) -> T:
    """An instance of the frozen dataclass ``cls`` holding ``values``, one for each of its fields.

    What pydantic's ``model_construct`` is to a model: every field given, each already of its type.
    Nothing is converted (no ``__post_init__``) and no default is filled in; a missing or unknown
    field is refused, so a field added to a record later fails loudly here rather than being absent
    from the instance.
    """
    expected = _field_names(cls)
    if values.keys() != expected:
        given = set(values)
        missing, unknown = sorted(expected - given), sorted(given - expected)
        raise TypeError(f"{cls.__name__} needs every field: missing {missing}, unknown {unknown}")
    record = object.__new__(cls)
    record.__dict__.update(values)
    return record


RunState = Literal["suspended", "running"]
DEFAULT_LEASE = timedelta(minutes=5)


def _iso(value: datetime) -> str:
    return value.isoformat()


def _from_iso(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


#: A datetime stored as ``datetime.isoformat()`` (``+00:00``, not pydantic's ``Z``) and read back with
#: ``datetime.fromisoformat``, as it always was.
IsoDatetime = Annotated[datetime, PlainValidator(_from_iso), PlainSerializer(_iso, when_used="json")]


@dataclass(frozen=True)
class Decision:
    action: DecisionAction
    decided_at: IsoDatetime
    actor: str | None = None
    reason: str | None = None
    #: Validated resume data in JSON form (``action == "resume"``).
    resume_data: Any = None
    #: An approval with edited arguments: the validated arguments the tool runs with instead.
    edited_args: dict[str, Any] | None = None
    #: An approval given by a standing grant (``grants``): the store takes one of its uses in the
    #: step that records the decision. ``actor`` is then who made the grant.
    grant_id: int | None = None
    #: A decision a routing rule took as the call parked (``routing``): for the record written in the
    #: same step (its audit row); stores need not keep it on the call. ``actor`` is "rule #N of <user>".
    rule_id: int | None = None
    #: What the decider was shown of the call (``policy.shown``: arguments, preview, tool version)
    #: when the decision was taken: the audit row keeps it, so the record says what was decided on.
    fingerprint: str | None = None
    #: When the decider was shown the call (``DecisionRequest.shown_at``), if known.
    shown_at: datetime | None = None

    def __post_init__(self) -> None:
        # Callers may spell the action as its string ("approve"); the record holds the word.
        if type(self.action) is not DecisionAction:
            object.__setattr__(self, "action", DecisionAction(self.action))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = _DECISION.dump_python(self, mode="json")
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        return _DECISION.validate_python(data)


@dataclass(frozen=True)
class Delegation:
    """Where a supervisor's parked call really lives: a call of a sub-agent's inner run."""

    #: The supervisor's own tool call (``agent_<id>``) that the inner run hangs under.
    tool_call_id: str
    inner_run_id: str
    inner_tool_call_id: str
    #: The sub-agent whose run it is (None in mirrors stored before it was kept).
    agent_id: str | None = None


@dataclass(frozen=True)
class ParkedCall:
    """One tool call a run waits on, as listed and decided on that run."""

    tool_call_id: str
    tool_name: str
    kind: CallKind
    args: dict[str, Any] | None = None
    suspend_payload: Any = None
    suspend_schema: dict[str, Any] | None = None
    resume_schema: dict[str, Any] | None = None
    #: Set on a supervisor's mirror of a sub-agent's call.
    delegation: Delegation | None = None
    decision: Decision | None = None
    #: When a continuation began running this call's tool (written before the tool is called). Kept
    #: when the continuation dies and the call is parked again: the tool may have run.
    tool_started_at: IsoDatetime | None = None
    #: Why the call waits, gathered when it parked (``types.CallContext``'s JSON form): the last user
    #: message, what the agent said, key results of earlier calls, the approval rule's reason.
    context: dict[str, Any] | None = None
    #: When nobody answering decides the call (``deadline`` says how); None: it waits forever.
    expires_at: IsoDatetime | None = None
    deadline: Deadline | None = None
    #: Set once the deadline passed and the call moved to this reviewer group (``on_expiry="escalate"``).
    escalated_to: str | None = None
    #: Approvals recorded so far on a call its tool says needs several (``tool(approvals=N)``),
    #: oldest first; the approval that completes them is the call's ``decision``.
    votes: tuple[Decision, ...] = ()

    def __post_init__(self) -> None:
        if type(self.kind) is not CallKind:
            object.__setattr__(self, "kind", CallKind(self.kind))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = _PARKED_CALL.dump_python(self, mode="json")
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ParkedCall:
        return _PARKED_CALL.validate_python(data)


_DECISION: TypeAdapter[Decision] = TypeAdapter(Decision)
_PARKED_CALL: TypeAdapter[ParkedCall] = TypeAdapter(ParkedCall)


@dataclass(frozen=True)
class Suspension:
    """What the runtime writes when a run (first or again) waits for a human."""

    run_id: str
    agent_id: str
    thread_id: str | None
    resource_id: str | None
    parent_run_id: str | None
    created_at: datetime
    suspended_at: datetime
    calls: tuple[ParkedCall, ...]
    #: Opaque, JSON-compatible: the runtime's continuation state.
    snapshot: dict[str, Any]
    #: Who started the run (``Agent.stream(started_by=...)``); kept by ``insert_suspended`` only.
    started_by: str | None = None


@dataclass(frozen=True)
class StoredRun:
    run_id: str
    agent_id: str
    thread_id: str | None
    resource_id: str | None
    parent_run_id: str | None
    created_at: datetime
    suspended_at: datetime
    status: RunState
    version: int
    interrupted: bool
    calls: tuple[ParkedCall, ...]
    #: None in listings (never loaded for them).
    snapshot: dict[str, Any] | None = None
    #: Decisions overturned by an interrupted continuation, kept for the record (JSON dicts).
    history: tuple[dict[str, Any], ...] = ()
    #: Who started the run, when known: ``tool(separate_duties=True)`` refuses their approvals.
    started_by: str | None = None

    @property
    def undecided(self) -> tuple[ParkedCall, ...]:
        return tuple(c for c in self.calls if c.decision is None)


@dataclass(frozen=True)
class RunQuery:
    """A listing: filters, order and page, all evaluated inside the store."""

    agent_id: str
    thread_id: str | None = None
    resource_id: str | None = None
    #: Inclusive bounds on ``created_at`` (aware datetimes).
    created_from: datetime | None = None
    created_to: datetime | None = None
    #: Only runs with an undecided call of this tool name.
    tool_name: str | None = None
    #: Only runs with an undecided call of this kind.
    kind: CallKind | None = None
    #: True: only sub-agents' inner runs (decided through their supervisor's run); False: only the
    #: others; None: both.
    delegated: bool | None = None
    #: Only runs with an undecided call whose deadline is before this (aware datetime).
    expiring_before: datetime | None = None
    #: Only runs with an undecided call escalated to one of these reviewer groups.
    escalated_to: frozenset[str] | None = None
    #: Default: most recently suspended first, ties by ``run_id`` ascending.
    oldest_first: bool = False
    #: Instead: the run whose undecided call is due soonest first (runs without a deadline last,
    #: oldest suspension first among them).
    by_deadline: bool = False
    limit: int | None = None
    offset: int = 0


@dataclass(frozen=True)
class RunEnding:
    """How a claimed run ended, handed to ``finish`` so a store that keeps a record of its
    decisions (the Django store's audit log) settles them in the same step as the run ends."""

    status: Literal["completed", "failed"]
    #: The final answer (``completed``) or the error (``failed``).
    detail: str = ""
    #: The run's own messages (not its thread's earlier ones) in the plain form of
    #: ``Agent.run_messages``, already in the untrusted normal form: what a store that keeps a record
    #: of ended runs keeps instead of the snapshot. Empty when the continuation broke before it had any.
    transcript: tuple[dict[str, Any], ...] = ()


def tool_calls(transcript: Any) -> dict[str, int]:
    """The tool calls a run's ``transcript`` holds, per tool (the calls it made, whether they ran
    at once, waited for a person or were let through by a grant); a transcript that is not a list
    (a pruned record) holds none."""
    counts: dict[str, int] = {}
    for entry in transcript if isinstance(transcript, list | tuple) else ():
        if isinstance(entry, dict) and entry.get("kind") == "tool-call" and entry.get("tool_name"):
            name = str(entry["tool_name"])
            counts[name] = counts.get(name, 0) + 1
    return counts


@dataclass(frozen=True)
class Vote:
    """An approval that is not yet the call's decision: its tool needs more (``tool(approvals=N)``)."""

    #: The approval as cast (who, when, the arguments it approves).
    approval: Decision
    #: The call's votes once this one is recorded: the store writes them as they are (votes for
    #: other arguments than this one's were dropped by the rule).
    votes: tuple[Decision, ...]
    #: How many distinct approvals the call needs.
    required: int


@dataclass(frozen=True)
class DecisionReceipt:
    #: The run after the decision, with its snapshot.
    run: StoredRun
    #: The call that was decided, with its decision.
    call: ParkedCall
    #: Set when this decision was the last one and claimed the run: the version to continue with.
    claimed_version: int | None
    #: Set when the rule recorded a vote instead of a decision (``call.decision`` is None then).
    vote: Vote | None = None
    #: The id of the record the store wrote with the decision (its audit row), if it keeps one.
    record_id: int | None = None


#: Picks the call to decide on a run and builds its decision (or, on a call that needs several
#: approvals, a ``Vote``), or raises to refuse (nothing changes). Stores call it with the run locked,
#: so what it checks still holds when the decision or vote is written.
DecisionRule = Callable[[StoredRun], tuple[str, "Decision | Vote"]]


@dataclass(frozen=True)
class DeadlineChange:
    """A new deadline for a call that keeps waiting: a reviewer extended it, or it was escalated."""

    tool_call_id: str
    action: Literal[DecisionAction.EXTEND, DecisionAction.ESCALATE]
    expires_at: datetime | None
    changed_at: datetime
    #: The reviewer group now deciding the call (unchanged by an extension).
    escalated_to: str | None = None
    actor: str | None = None
    reason: str = ""


#: Picks the call whose deadline changes on a run, or raises to refuse; called with the run locked.
DeadlineRule = Callable[[StoredRun], DeadlineChange]


def decision_conflict(run: StoredRun, call: ParkedCall | None, tool_call_id: str) -> Exception:
    """The error for a decision that cannot be recorded on ``run`` (shared by every store)."""
    if call is None:
        return ToolCallNotSuspended(
            f"Tool call {tool_call_id!r} is not suspended on run {run.run_id!r}",
            run_id=run.run_id,
            tool_call_id=tool_call_id,
        )
    if call.decision is not None:
        return RunAlreadyDecided(
            run_id=run.run_id,
            tool_call_id=tool_call_id,
            decided_by=call.decision.actor,
            decided_at=call.decision.decided_at,
        )
    return RunAlreadyDecided(run_id=run.run_id, tool_call_id=tool_call_id)


def reclaimed_calls(
    calls: Sequence[ParkedCall], history: Sequence[dict[str, Any]]
) -> tuple[tuple[ParkedCall, ...], tuple[dict[str, Any], ...]]:
    """Calls parked again with their decisions moved to the history (interrupted continuation)."""
    overturned = [
        {"tool_call_id": c.tool_call_id, "tool_name": c.tool_name, **c.decision.to_json()}
        for c in calls
        if c.decision is not None
    ]
    # Votes go too: the call waits for all its approvals again, as for a first decision.
    return tuple(replace(c, decision=None, votes=()) for c in calls), (*history, *overturned)
