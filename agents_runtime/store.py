"""The run store's data model: the protocol a store implements, the records it keeps, the values
listings return, the words of a decision and the deadlines of parked calls.

A store keeps one record per suspended run: who owns it, where it belongs (thread, resource, parent
run), its parked tool calls with their decisions, and an opaque JSON snapshot the runtime continues
from. Every method is synchronous and atomic on its own; the runtime calls them off the event loop,
in a worker thread unless the store defines ``run_sync`` to say where (``SyncRunner``, ``call_store``).

Rules every store follows (``InMemoryRunStore`` in ``memory`` is the reference, ``DjangoRunStore``
the persistent one; ``tests/agents_runtime`` runs the same suite on both):

- ``status`` is ``"suspended"`` (waiting) or ``"running"`` (claimed by a continuation). ``version``
  grows on every change of status or calls, so compare-and-swap on it detects any concurrent change.
- A decision is recorded at most once per parked call. When the last undecided call of a run is
  decided, that same atomic step may claim the run (``status="running"``, new version, lease).
- A claim waits for its continuation without a lease (a queue may be long); the continuation takes
  the lease as it starts (``start_continuation``, once per claim), or the decision takes it in its
  own step when the continuation starts at once, in the deciding task (``decide``'s ``start``: the
  decider's stream, a scheduler that runs it now). A lease lives for ``lease``;
  ``heartbeat`` renews it. A claim whose lease was not renewed in time is *reclaimed* before any
  read, decision or heartbeat (so a late heartbeat fails instead of reviving it), or by
  ``reclaim_expired``: the run is suspended again with ``interrupted=True``, its decisions move to
  ``history`` and its calls wait again. Inner runs still suspended under it get their decisions
  cleared the same way.
- Ended runs are deleted (``finish``) with their snapshot; what stays is the thread's messages and,
  in stores that keep one, a record of the run built from its ``RunEnding`` (the plain transcript).

**Records** (``StoredRun``, ``ParkedCall``, ``Decision``, ``Delegation``, ...) are what a store keeps and
hands back. ``Decision``, ``Delegation`` and ``ParkedCall`` round-trip through JSON with pydantic
(``to_json``/``from_json``). Code that has just read a record's values from its own rows builds it
with ``construct`` rather than its ``__init__`` (a frozen dataclass's ``__init__`` sets each field
through ``object.__setattr__``, several times the cost: a listing builds thousands; see
docs/scaling.md and ``bench/list_suspended_runs.py``).

**Values** (``AgentRun``, ``Chunk``, ``RunResult``, ...) are what listings and runs return.

**The words of a decision**, spelled once: what a parked call waits for (``CallKind``), what a
reviewer decides (``DecisionAction``) and what came of it. The app's models, choices, cards and
templates use these (values and labels); nothing else spells them. The values are stored, exported
(the audit CSV) and put in URLs, so they never change; the labels are what people read.

**Deadlines** of parked calls: a tool declares ``expires_after`` (and ``on_expiry``, ``escalate_to``,
``escalation_expires_after``); a run may override it for every call it parks
(``Agent.generate(..., deadline=...)``). When a call parks, its ``Deadline`` is stored with it and
its ``expires_at`` set. ``Runtime.expire_due`` (run on a timer by whoever hosts the runtime) then
decides overdue calls through the store's atomic ``decide`` step, like a reviewer would: exactly one
of the reviewer and the expiry wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol, TypedDict, runtime_checkable

from pydantic import PlainSerializer, PlainValidator, TypeAdapter

from .errors import RunAlreadyDecided, RunUnreadable, ToolCallNotSuspended

#: What the model is told when a reviewer declines a call without a reason.
DEFAULT_DECLINE_REASON = "Tool call was not approved by the user"


class CallKind(StrEnum):
    """What a parked call waits for: approve/decline (``approval``) or an answer to ``suspend()``."""

    APPROVAL = "approval"
    INPUT = "input"

    @property
    def label(self) -> str:
        return _CALL_KIND_LABELS[self]


class DecisionAction(StrEnum):
    APPROVE = "approve"
    DECLINE = "decline"
    RESUME = "resume"
    #: Nobody answered before the call's deadline (``tool(expires_after=...)``): declined, or
    #: approved when the tool says ``on_expiry="approve"``. Never a reviewer's word.
    EXPIRE = "expire"
    #: Not decisions (the call keeps waiting), recorded in the audit log beside them: the deadline
    #: passed and the call moved to another group (``on_expiry="escalate"``), or a reviewer extended it.
    ESCALATE = "escalate"
    EXTEND = "extend"
    #: Not decisions either: a standing grant made ("approve and allow") or revoked.
    ALLOW = "allow"
    REVOKE = "revoke"
    #: Not a decision either: a routing rule made, changed or deleted (``agents_runtime.routing``).
    ROUTE = "route"
    #: The agent that asked withdrew its request before anyone decided it (an approval request from
    #: another process: ``agents_runtime.external``). Decided like the others, never a reviewer's word.
    CANCEL = "cancel"
    #: Not a decision: the agent that asked reports what came of running the approved call itself.
    EXECUTE = "execute"

    @property
    def label(self) -> str:
        return _ACTION_LABELS[self][0]

    @property
    def verb(self) -> str:
        """As in "rita approved refund"."""
        return _ACTION_LABELS[self][1]


class Outcome(StrEnum):
    """What a decision did. All but ``NOT_FOUND`` and ``UNCONFIRMED`` are recorded in the audit log."""

    COMPLETED = "completed"
    SUSPENDED_AGAIN = "suspended_again"
    #: The decision is in; the run continues (in the background, or until the store settles it).
    CONTINUING = "continuing"
    FAILED = "failed"
    #: The continuation stopped before the run settled (its process died, or lost its lease): the
    #: call was offered for a decision again.
    INTERRUPTED = "interrupted"
    LOST_RACE = "lost_race"
    INVALID = "invalid"
    #: The run was not waiting (ended, or never existed): nothing to record.
    NOT_FOUND = "not_found"
    #: The call's tool may have run already (interrupted after it started) and running it again was
    #: not confirmed: nothing decided, nothing to record.
    UNCONFIRMED = "unconfirmed"
    #: Nobody answered in time: the call's deadline decided it (never ``declined``).
    EXPIRED = "expired"
    #: Not a decision: the call's deadline changed (escalated to another group, or extended).
    RESCHEDULED = "rescheduled"
    #: An approval recorded as one vote of several (``tool(approvals=N)``): the call still waits.
    VOTE_RECORDED = "vote_recorded"
    #: Refused by the tool's rule on who may approve (separation of duties, a second vote).
    REFUSED = "refused"
    #: Not a decision: the record of a standing grant made or revoked (``ALLOW``, ``REVOKE``), or of
    #: a routing rule made, changed or deleted (``ROUTE``).
    RECORDED = "recorded"
    #: Not taken yet: a host holds the decision for an undo window before it takes it (nothing is
    #: recorded while it is held; what it comes to is recorded when it is taken).
    HELD = "held"
    #: Not a decision: one held for an undo window and undone in it (nothing was decided, nothing ran).
    UNDONE = "undone"
    #: Approved, but not run: its tool's preview, run again just before the tool (``tool(recheck=True)``),
    #: said something else than the preview the approval was bound to; the call waits again.
    RECHECK_CHANGED = "recheck_changed"
    #: Approved, but not run: the preview could not be run again (it failed or took too long), so
    #: what the call would do now is unknown; the call waits again.
    RECHECK_FAILED = "recheck_failed"

    @property
    def label(self) -> str:
        """The audit log's word for it."""
        return _OUTCOME_LABELS[self][0]

    @property
    def status_label(self) -> str:
        """The word on the card of the reviewer who just decided."""
        return _OUTCOME_LABELS[self][1]


class Verdict(StrEnum):
    """What was decided on a call, apart from what the run did next (an ``Outcome``)."""

    APPROVED = "approved"
    APPROVED_WITH_EDITS = "approved_with_edits"
    DECLINED = "declined"
    ANSWERED = "answered"
    #: Nobody decided the call in time: its deadline let it expire.
    EXPIRED = "expired"
    #: The agent that asked withdrew the call.
    CANCELLED = "cancelled"

    @property
    def label(self) -> str:
        return _VERDICT_LABELS[self]

    @classmethod
    def of(cls, action: DecisionAction, *, edited: bool = False) -> Verdict:
        if action == DecisionAction.APPROVE:
            return cls.APPROVED_WITH_EDITS if edited else cls.APPROVED
        if action == DecisionAction.EXPIRE:
            return cls.EXPIRED
        if action == DecisionAction.CANCEL:
            return cls.CANCELLED
        return cls.DECLINED if action == DecisionAction.DECLINE else cls.ANSWERED


_VERDICT_LABELS = {
    Verdict.APPROVED: "Approved",
    Verdict.APPROVED_WITH_EDITS: "Approved with edits",
    Verdict.DECLINED: "Declined",
    Verdict.ANSWERED: "Answered",
    Verdict.EXPIRED: "Expired",
    Verdict.CANCELLED: "Cancelled",
}
_CALL_KIND_LABELS = {CallKind.APPROVAL: "Needs approval", CallKind.INPUT: "Waiting for input"}
_ACTION_LABELS = {
    DecisionAction.APPROVE: ("Approve", "approved"),
    DecisionAction.DECLINE: ("Decline", "declined"),
    DecisionAction.RESUME: ("Resume", "answered"),
    DecisionAction.EXPIRE: ("Expired", "let expire"),
    DecisionAction.ESCALATE: ("Escalated", "escalated"),
    DecisionAction.EXTEND: ("Deadline extended", "extended the deadline of"),
    DecisionAction.ALLOW: ("Standing grant made", "allowed from now on"),
    DecisionAction.REVOKE: ("Standing grant revoked", "revoked the standing grant of"),
    DecisionAction.ROUTE: ("Routing rule", "changed the routing of"),
    DecisionAction.CANCEL: ("Cancelled", "cancelled"),
    DecisionAction.EXECUTE: ("Executed", "reported running"),
}
_OUTCOME_LABELS = {
    Outcome.COMPLETED: ("Completed", "Completed"),
    Outcome.SUSPENDED_AGAIN: ("Suspended again", "Waiting again"),
    Outcome.CONTINUING: ("Continuing in the background", "Continuing"),
    Outcome.FAILED: ("Failed", "Failed"),
    Outcome.INTERRUPTED: ("Interrupted", "Interrupted"),
    Outcome.LOST_RACE: ("Lost a race", "Already decided"),
    Outcome.INVALID: ("Refused as invalid", "Refused"),
    Outcome.NOT_FOUND: ("Not waiting", "No longer waiting"),
    Outcome.UNCONFIRMED: ("Not confirmed", "Needs confirmation"),
    Outcome.EXPIRED: ("Expired", "Expired"),
    Outcome.RESCHEDULED: ("Deadline changed", "Still waiting"),
    Outcome.VOTE_RECORDED: ("Vote recorded", "Vote recorded"),
    Outcome.REFUSED: ("Refused by the approval rule", "Refused"),
    Outcome.RECORDED: ("Recorded", "Recorded"),
    Outcome.HELD: ("Held for undo", "Held"),
    Outcome.UNDONE: ("Undone", "Undone"),
    Outcome.RECHECK_CHANGED: ("Not run: changed since approved", "Waiting again: changed"),
    Outcome.RECHECK_FAILED: ("Not run: recheck failed", "Waiting again: recheck failed"),
}

#: Outcomes the audit log records (its column's choices).
RECORDED_OUTCOMES = tuple(
    o for o in Outcome if o not in {Outcome.NOT_FOUND, Outcome.UNCONFIRMED, Outcome.HELD}
)
#: Outcomes of a decision that took effect.
EFFECTIVE_OUTCOMES = frozenset(
    {
        Outcome.COMPLETED,
        Outcome.SUSPENDED_AGAIN,
        Outcome.CONTINUING,
        Outcome.FAILED,
        Outcome.VOTE_RECORDED,
        # (Recorded, and the run went on: it came back before the tool, which did not run.)
        Outcome.RECHECK_CHANGED,
        Outcome.RECHECK_FAILED,
    }
)
#: Recorded outcomes that mean the decision did not take effect.
NO_EFFECT_OUTCOMES = frozenset(
    {
        Outcome.LOST_RACE,
        Outcome.INVALID,
        Outcome.RESCHEDULED,
        Outcome.REFUSED,
        Outcome.RECORDED,
        Outcome.UNDONE,
    }
)
#: Recorded outcomes of rows that are not decisions at all (a deadline moved, a grant made or
#: revoked, a decision undone in its undo window).
NOT_DECISIONS = frozenset({Outcome.RESCHEDULED, Outcome.RECORDED, Outcome.UNDONE})


def choices(words: type[CallKind] | type[DecisionAction] | tuple[Outcome, ...]) -> list[tuple[str, str]]:
    """``(value, label)`` pairs, for Django model and form choices."""
    return [(word.value, word.label) for word in words]


# -- what became of a decision, in one sentence (the audit log's detail and the desk's message) ------


def _names(tool_names: Iterable[str]) -> tuple[int, str]:
    names = list(tool_names)
    return len(names), ", ".join(names) or "nothing"


def waiting_detail(tool_names: Iterable[str]) -> str:
    count, names = _names(tool_names)
    return f"Recorded; the run still waits on {count} other call(s): {names}."


def suspended_again_detail(tool_names: Iterable[str]) -> str:
    return f"The run continued and suspended again, waiting on: {_names(tool_names)[1]}."


def completed_detail(text: str | None) -> str:
    return f"Completed: {text or '(no text)'}"


def failed_detail(error: str | None) -> str:
    return f"Failed: {error or 'unknown error'}"


CONTINUING_DETAIL = "Recorded; the run continues."


def recheck_detail(error: str | None) -> str:
    """Why an approved call did not run (``Outcome.RECHECK_CHANGED`` / ``RECHECK_FAILED``)."""
    if error:
        return (
            f"Not run: its preview could not be run again before the tool ({error}). The call waits "
            "for a decision again."
        )
    return (
        "Not run: what it would do changed since it was approved (its preview, run again before the "
        "tool, differs). The call waits for a decision on what it would do now."
    )


# -- one line on a call that changed while someone looked at it (the desk's live notes) -------------

#: What a deadline does when it passes (``tool(on_expiry=...)``), in the past tense.
_EXPIRY_DONE = {"decline": "declined", "approve": "approved", "escalate": "escalated"}


def deadline_passed_line(on_expiry: str) -> str:
    """ "Deadline passed: declined": nobody answered in time, and what the deadline did instead."""
    return f"Deadline passed: {_EXPIRY_DONE.get(on_expiry, _EXPIRY_DONE['decline'])}"


def decided_by_line(verdict: str, actor: str) -> str:
    """ "Declined by alice": someone else decided the call."""
    return f"{verdict} by {actor}"


def extended_line(actor: str) -> str:
    return f"Deadline extended by {actor}"


def claimed_line(holder: str) -> str:
    """ "alice is on this call": a colleague claimed it ("I'm on it")."""
    return f"{holder} is on this call"


def released_line(holder: str) -> str:
    return f"{holder} is no longer on this call"


INTERRUPTED_DETAIL = (
    "The run's continuation stopped before the run settled (its process died or lost its lease); "
    "the call was offered for a decision again."
)
INTERRUPTED_AFTER_START_DETAIL = (
    "Interrupted after the tool started — it may have run. The run's continuation stopped before "
    "the run settled; the call was offered for a decision again, and running it again needs a "
    "confirmation."
)


# -- what a bulk approval would do to each call (a preview asks the rules: ``Agent.would_decide``) --

#: By the rule that refuses an approval (``DecisionRefused.rule``), or what the approval does.
_WOULD_APPROVE = {
    "decides": "will be approved: the tool runs",
    "vote": "will get your vote, {votes} of {required}: nothing runs yet",
    "escalated": "escalated to {group}: your approval decides them",
    "separation_of_duties": "you started: separation of duties, cannot approve",
    "second_vote": "you approved already: they wait for another reviewer",
    "claimed": "claimed by {holder}: not decided in bulk",
    "risky_unconfirmed": "marked risky: approve each on its own card (“I checked this”)",
    "rerun": "may have run already: approve each on its own card",
    "arguments_changed": "changed since you saw them: look at them again",
    "not_a_decider": "not yours to decide",
    "not_waiting": "no longer waiting: skipped",
    RunUnreadable.rule: "stored in a form that can no longer be read: skipped",
    "refused": "refused by the approval rule",
}


def would_approve_line(kind: str, **values: object) -> str:
    """ "will get your vote, 1 of 2: nothing runs yet": what approving a group of calls in bulk does."""
    return _WOULD_APPROVE.get(kind, _WOULD_APPROVE["refused"]).format(**values)


def bulk_result_line(action: str, status: str) -> str:
    """A bulk decision's result on one call, as what happened: "Approved", "Vote recorded: nothing
    runs yet"."""
    if status == Outcome.VOTE_RECORDED:
        return f"{Outcome.VOTE_RECORDED.label}: nothing runs yet"
    if status in (Outcome.RECHECK_CHANGED, Outcome.RECHECK_FAILED):
        return Outcome(status).label
    return Verdict.of(DecisionAction(action)).label


OnExpiry = Literal["decline", "approve", "escalate"]
ON_EXPIRY: tuple[OnExpiry, ...] = ("decline", "approve", "escalate")


@dataclass(frozen=True)
class Deadline:
    """How long a call may wait for a reviewer, and what happens then.

    ``on_expiry``: ``"decline"`` (the model is told nobody answered), ``"approve"`` (the tool runs)
    or ``"escalate"`` (the call moves to the reviewer group ``escalate_to``, with a new deadline of
    ``escalation_expires_after`` or none; when that one passes too, the call is declined).
    """

    expires_after: timedelta
    on_expiry: OnExpiry = "decline"
    escalate_to: str | None = None
    escalation_expires_after: timedelta | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.expires_after, timedelta) or self.expires_after <= timedelta(0):
            raise ValueError("expires_after must be a positive timedelta")
        if self.on_expiry not in ON_EXPIRY:
            raise ValueError(f"on_expiry must be one of {', '.join(map(repr, ON_EXPIRY))}")
        if (self.on_expiry == "escalate") != bool(self.escalate_to):
            raise ValueError('escalate_to (a group name) goes with on_expiry="escalate", and only with it')
        if self.escalate_to is not None and not isinstance(self.escalate_to, str):
            raise ValueError("escalate_to must be a group name")
        later = self.escalation_expires_after
        if later is not None and (self.on_expiry != "escalate" or not isinstance(later, timedelta)):
            raise ValueError('escalation_expires_after is a timedelta that goes with on_expiry="escalate"')
        if later is not None and later <= timedelta(0):
            raise ValueError("escalation_expires_after must be a positive timedelta")

    def expires_at(self, parked_at: datetime) -> datetime:
        return parked_at + self.expires_after


class DeadlineOptions(TypedDict, total=False):
    """The keyword arguments of ``tool()`` that give its calls a deadline (see ``Deadline``)."""

    expires_after: timedelta
    on_expiry: OnExpiry
    escalate_to: str
    escalation_expires_after: timedelta


def deadline_from(options: DeadlineOptions) -> Deadline | None:
    """The ``Deadline`` of ``tool(**options)``; None when it declares none (``ValueError`` if invalid)."""
    if not options:
        return None
    if "expires_after" not in options:
        raise ValueError(f"{', '.join(sorted(options))} need expires_after")
    return Deadline(**options)


def as_deadline(value: Deadline | timedelta | None) -> Deadline | None:
    """A run's override: a ``Deadline`` or just a ``timedelta`` (declined when it passes)."""
    if value is None or isinstance(value, Deadline):
        return value
    if isinstance(value, timedelta):
        return Deadline(value)
    raise TypeError("deadline must be a Deadline or a timedelta")


_DEADLINE: TypeAdapter[Deadline] = TypeAdapter(Deadline)


def deadline_to_json(deadline: Deadline | None) -> dict[str, Any] | None:
    return None if deadline is None else dict(_DEADLINE.dump_python(deadline, mode="json"))


def deadline_from_json(data: Any) -> Deadline | None:
    return None if data is None else _DEADLINE.validate_python(data)


def describe_wait(duration: timedelta) -> str:
    """``timedelta(minutes=90)`` as "1 hour 30 minutes" (for the model and the audit log)."""
    seconds = round(duration.total_seconds())
    parts = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count != 1 else ''}")
    return " ".join(parts[:2]) or "less than a second"


def expiry_reason(waited: timedelta) -> str:
    """What the model is told when nobody answered."""
    return f"No reviewer answered within {describe_wait(waited)}"


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
    #: Beyond Mastra: on a supervisor's run, the sub-agent whose call this really is (however deep).
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
    #: The sub-agent whose call it is: the one that parked it, below the inner run's own agent when
    #: that agent mirrors its own sub-agent's call (None in mirrors stored before it was kept).
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


# -- what a listing shows of a waiting run --------------------------------------------------------


def waiting_call(
    kind: CallKind,
    *,
    tool_call_id: str,
    tool_name: str,
    args: dict[str, Any] | None,
    suspend_payload: Any,
    resume_schema: dict[str, Any] | None,
    suspend_schema: dict[str, Any] | None,
    tool_started_at: datetime | None,
    context: dict[str, Any] | None,
    via_agent_id: str | None,
    expires_at: datetime | None,
    on_expiry: str | None,
    escalated_to: str | None,
    approved_by: tuple[str, ...],
) -> AgentRunToolCall:
    """An undecided call as listings show it: an approval's arguments, an input's payload, never both.

    The one place that says it, from a stored call (``listed_call``) or from a store's own row (a store
    that builds the listing itself: ``RunStore``'s ``list_waiting``). ``context`` is as stored."""
    approval = kind == CallKind.APPROVAL
    return construct(
        AgentRunToolCall,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        args=args if approval else None,
        requires_approval=approval,
        suspend_payload=None if approval else suspend_payload,
        resume_schema=resume_schema,
        suspend_schema=suspend_schema,
        tool_started_at=tool_started_at,
        context=CallContext.from_json(context),
        via_agent_id=via_agent_id,
        expires_at=expires_at,
        on_expiry=on_expiry,
        escalated_to=escalated_to,
        approved_by=approved_by,
    )


def waiting_run(
    *,
    run_id: str,
    agent_id: str,
    thread_id: str | None,
    resource_id: str | None,
    suspended_at: datetime,
    created_at: datetime,
    tool_calls: list[AgentRunToolCall],
    parent_run_id: str | None,
    started_by: str | None,
    interrupted: bool,
) -> AgentRun:
    """A suspended run as listings show it, its undecided calls already made (``waiting_call``)."""
    return construct(
        AgentRun,
        run_id=run_id,
        agent_id=agent_id,
        thread_id=thread_id,
        resource_id=resource_id,
        suspended_at=suspended_at,
        created_at=created_at,
        tool_calls=tool_calls,
        parent_run_id=parent_run_id,
        started_by=started_by,
        interrupted=interrupted,
        status="suspended",
    )


def listed_call(call: ParkedCall) -> AgentRunToolCall:
    return waiting_call(
        call.kind,
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        args=call.args,
        suspend_payload=call.suspend_payload,
        resume_schema=call.resume_schema,
        suspend_schema=call.suspend_schema,
        tool_started_at=call.tool_started_at if call.decision is None else None,
        context=call.context,
        via_agent_id=call.delegation.agent_id if call.delegation is not None else None,
        expires_at=call.expires_at,
        on_expiry=None if call.deadline is None else call.deadline.on_expiry,
        escalated_to=call.escalated_to,
        approved_by=tuple(v.actor or "" for v in call.votes),
    )


def agent_run(run: StoredRun) -> AgentRun:
    """A stored suspended run as listings show it (for a host that reads its store its own way)."""
    return waiting_run(
        run_id=run.run_id,
        agent_id=run.agent_id,
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        suspended_at=run.suspended_at,
        created_at=run.created_at,
        tool_calls=[listed_call(c) for c in run.undecided],
        parent_run_id=run.parent_run_id,
        started_by=run.started_by,
        interrupted=run.interrupted,
    )


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


@runtime_checkable
class RunStore(Protocol):
    """The storage the runtime needs. Implementations must be safe to share between threads.

    A store may also make the listing's records itself, from its own rows, and say so by a method
    ``list_waiting(query) -> tuple[list[AgentRun], int]``: what ``list_suspended`` lists, as
    ``agent_run`` shows it (its calls by ``waiting_call``), and the same total. ``list_suspended_runs``
    then takes it, one layer of records less for a listing than ``StoredRun`` and then ``AgentRun``.
    """

    lease: timedelta

    def insert_suspended(self, suspension: Suspension) -> StoredRun:
        """Store a run that suspended for the first time (``version`` 1, ``status`` suspended)."""
        ...

    def resuspend(self, suspension: Suspension, *, expected_version: int) -> StoredRun | None:
        """Replace a claimed run's calls and snapshot and suspend it again; ``None`` if the claim was lost."""
        ...

    def get_run(self, run_id: str, *, with_snapshot: bool = True) -> StoredRun | None:
        """The run with its snapshot, or ``None`` when it does not exist (any owner); ``RunUnreadable``
        when the store holds it but can no longer read what was asked for.

        ``with_snapshot=False``: without it (``snapshot`` is ``None``), for readers of the run's calls
        only; a snapshot holds the whole conversation and is most of what reading a run costs."""
        ...

    def list_suspended(self, query: RunQuery) -> tuple[list[StoredRun], int]:
        """Suspended runs matching ``query`` (without snapshots) and the count before paging."""
        ...

    def decide(
        self,
        *,
        agent_id: str,
        run_id: str,
        rule: DecisionRule,
        claim_when_complete: bool = True,
        start: bool = False,
    ) -> DecisionReceipt:
        """Record the decision ``rule`` makes on one undecided call, atomically; claim the run when
        it was the last. ``start``: the claim's continuation starts at once, in this process, so the
        claim takes its lease in the same step (``start_continuation``'s work: no queue to wait in).

        ``rule`` sees the run as stored (with its snapshot) while no one else can change it; what it
        raises propagates and nothing is recorded. Then raises ``RunNotFound`` (no such run of
        ``agent_id``), ``ToolCallNotSuspended`` (no such call on it), ``RunAlreadyDecided`` (the call
        has a decision, or the run is being continued).
        """
        ...

    def record_decision(
        self,
        *,
        agent_id: str,
        run_id: str,
        tool_call_id: str,
        decision: Decision,
        claim_when_complete: bool = True,
    ) -> DecisionReceipt:
        """``decide`` with a fixed call and decision (stores that subclass the protocol inherit it)."""
        return self.decide(
            agent_id=agent_id,
            run_id=run_id,
            rule=lambda _run: (tool_call_id, decision),
            claim_when_complete=claim_when_complete,
        )

    def change_deadline(self, *, agent_id: str, run_id: str, rule: DeadlineRule) -> StoredRun:
        """Give one undecided call of a suspended run the new deadline (and group) ``rule`` returns,
        atomically (the run's version moves); errors as for ``decide``, nothing changes on one."""
        ...

    def due_calls(self, agent_id: str, before: datetime, *, limit: int) -> list[tuple[str, str]]:
        """``(run_id, tool_call_id)`` of undecided calls of ``agent_id``'s suspended runs (not
        sub-agents' inner runs) whose deadline is at or before ``before``, earliest first."""
        ...

    def claim(
        self,
        run_id: str,
        *,
        expected_version: int | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> StoredRun | None:
        """Record ``decisions`` on undecided calls and claim a suspended run, atomically.

        ``None`` when the run is gone, not suspended, or not at ``expected_version``.
        """
        ...

    def start_continuation(self, run_id: str, *, version: int) -> bool:
        """Take the lease of the claim at ``version`` as its continuation starts: once, so a second
        continuation of the same claim (a repeated task) gets False, as does one whose claim was lost.

        A claim (``decide``'s or ``claim``'s) has no lease while its continuation waits in a queue:
        however long the queue, a claim nobody started is never reclaimed. Only a started
        continuation can lose it, by not renewing it (``heartbeat``).
        """
        ...

    def reclaim_expired(self) -> list[tuple[str, str]]:
        """Reclaim now every claim whose lease ran out (its continuation stopped: its process died)
        rather than at the next read; ``(agent_id, run_id)`` of each run parked again."""
        ...

    def mark_tool_started(self, run_id: str, tool_call_id: str, *, version: int) -> bool:
        """Record, durably, that the claimed run at ``version`` is about to run this call's tool.

        Written before the tool is called, so a continuation that dies afterwards leaves the call
        marked: it is offered again as "interrupted after the tool started". False when the claim
        was lost (then the tool must not run).
        """
        ...

    def heartbeat(self, run_id: str, *, version: int) -> bool:
        """Renew a claim; False when it was lost (a claim whose lease already ran out counts as lost)."""
        ...

    def finish(
        self,
        run_id: str,
        *,
        version: int,
        thread_messages: Sequence[Any] = (),
        ending: RunEnding | None = None,
    ) -> bool:
        """Delete an ended run that this claim holds; False when the claim was lost.

        ``thread_messages`` (the run's new JSON messages) are appended to the run's thread memory in
        the same step, so a run never ends without its exchange being remembered, nor twice.
        ``ending`` says how it ended, for stores that record their decisions' outcomes or keep a
        record of ended runs (its ``transcript``).
        """
        ...

    def append_thread_messages(self, agent_id: str, thread_id: str, messages: Sequence[Any]) -> None:
        """Append an ended run's new messages (JSON) to the agent's thread memory."""
        ...

    def count_calls(self, agent_id: str, calls: Mapping[str, int], *, at: datetime) -> None:
        """Count the tool calls (per tool) of a run that ended ``at`` without ever parking, which
        ``finish`` never sees: for stores that count the calls agents make. Stores that subclass the
        protocol inherit this, which keeps nothing."""
        return None

    def thread_messages(self, agent_id: str, thread_id: str, *, last_runs: int | None = None) -> list[Any]:
        """The agent's thread memory, oldest first (JSON messages): every ended run's messages, or
        only those of the latest ``last_runs`` runs, read without reading the older ones."""
        ...


# -- how the runtime calls a store ------------------------------------------------------------------
# Store methods are synchronous and may block (a database), so they never run on the event loop. By
# default each call runs in a worker thread (``asyncio.to_thread``). A store whose methods must run on
# a particular thread says so by defining ``run_sync`` (``SyncRunner``): the Django store runs them on
# the thread that holds the caller's database connection, so a request never needs a second one.


@runtime_checkable
class SyncRunner(Protocol):
    """Optional for a ``RunStore``: runs one of its synchronous methods for async callers."""

    async def run_sync[T](self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` run off the event loop where this store wants it; its result."""
        ...


async def call_store[**P, T](store: object, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` (a method of ``store``) run off the event loop, where ``store`` says."""
    if isinstance(store, SyncRunner):
        return await store.run_sync(fn, *args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)
