"""The words of a decision, spelled once: what a parked call waits for, what a reviewer decides, and
what came of it.

The runtime's records, the app's models and choices, its services, cards and templates all use these
(values and labels); nothing else spells them. The values are what is stored, exported (the audit
CSV) and put in URLs (the inbox's ``kind`` filter), so they never change; the labels are what people
read.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

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
    #: The call stopped waiting before anyone decided it (its run ended or is gone).
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
