"""What a decision did, as the page that took it shows it: ``DecisionOutcome`` and how it is told
from the runtime's answer (or its refusal)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from agents_runtime import (
    AgentRun,
    AgentRunToolCall,
    ApprovalTally,
    CallClaimed,
    DecisionRefused,
    InvalidResumeData,
    InvalidToolArgs,
    NotADecider,
    RerunNotConfirmed,
    RiskyNotConfirmed,
    RunAlreadyDecided,
    RunNotFound,
    RunResult,
    ToolCallNotSuspended,
)
from agents_runtime.vocabulary import (
    EFFECTIVE_OUTCOMES,
    DecisionAction,
    Outcome,
    Verdict,
    completed_detail,
    failed_detail,
    suspended_again_detail,
    waiting_detail,
)
from approvals.models.audit import AuditEntry

logger = logging.getLogger(__name__)

User = AbstractBaseUser | AnonymousUser


@dataclass(frozen=True)
class DecisionOutcome:
    """What a decision did, for the page that took it."""

    status: Outcome
    action: DecisionAction
    agent_id: str
    run_id: str
    tool_call_id: str
    #: Who took this decision (the user) and when.
    decided_by: str
    decided_at: datetime
    tool_name: str = ""
    thread_id: str | None = None
    resource_id: str | None = None
    #: One sentence for the reviewer (also the audit row's detail).
    message: str = ""
    #: The run's final answer (``completed``).
    text: str | None = None
    #: The error (``failed``).
    error: str | None = None
    #: The run as it waits now (``suspended_again``): render it as a card.
    run: AgentRun | None = None
    #: ``lost_race``: who won, and when, when known.
    winner: str | None = None
    winner_at: datetime | None = None
    #: ``invalid``: ``[{"loc": (...), "msg": ...}]`` from the runtime.
    field_errors: list[dict[str, Any]] = field(default_factory=list)
    #: ``invalid``: what the runtime refused were the edited arguments (``field_errors`` are about
    #: them, ``loc`` relative to the argument object), not the decision itself.
    refused_args: bool = False
    #: The call's arguments as the card showed them (the model's).
    args: Any = None
    #: Approved with edited arguments: what the tool runs with instead of ``args`` (None: as shown).
    edited_args: dict[str, Any] | None = None
    audit_entry_id: int | None = None
    #: ``vote_recorded``: the approvals so far ("1 of 2 approvals").
    approvals: ApprovalTally | None = None
    #: "Approve and allow": the standing grant made with the approval, in words.
    grant_note: str = ""
    #: The rule that refused the decision (``DecisionRefused.rule``: "claimed", "risky_unconfirmed",
    #: "separation_of_duties", ...; "rerun_unconfirmed"), or "".
    refusal: str = ""

    @property
    def verb(self) -> str:
        return DecisionAction(self.action).verb

    @property
    def verdict(self) -> Verdict | None:
        """What was decided (None: this decision was not taken: lost a race, refused, unconfirmed)."""
        if self.status == Outcome.NOT_FOUND:
            return Verdict.EXPIRED
        if self.status not in EFFECTIVE_OUTCOMES and self.status != Outcome.INTERRUPTED:
            return None
        if self.status == Outcome.VOTE_RECORDED:
            return None  # one approval of several: nothing is decided yet
        return Verdict.of(DecisionAction(self.action), edited=self.edited)

    @property
    def status_label(self) -> str:
        return Outcome(self.status).status_label

    @property
    def took_effect(self) -> bool:
        return self.status in EFFECTIVE_OUTCOMES

    @property
    def edited(self) -> bool:
        """Approved (and taken) with the reviewer's arguments instead of the model's."""
        return self.edited_args is not None and self.took_effect


@dataclass
class Attempt:
    """What happened in the runtime (filled in by the async part, turned into an outcome after)."""

    call: AgentRunToolCall | None = None
    run_before: AgentRun | None = None
    result: RunResult | None = None
    run_after: AgentRun | None = None
    error: Exception | None = None
    crash: str | None = None
    #: The edited arguments sent to the runtime (None: a plain approval, or the same as shown).
    edited_args: dict[str, Any] | None = None
    #: The audit row the run store wrote with the decision it took.
    record_id: int | None = None


def _at(when: datetime | None) -> str:
    if when is None:
        return ""
    return timezone.localtime(when).strftime("%Y-%m-%d %H:%M:%S %Z")


def outcome_of(attempt: Attempt, base: dict[str, Any], *, visible: list[str]) -> DecisionOutcome:
    """What the attempt came to, for the page that took it (``base``: who, which call, as shown)."""
    if attempt.error is not None:
        return _refused(attempt.error, base, visible)
    if attempt.crash is not None:
        return DecisionOutcome(
            status=Outcome.FAILED, message=f"Failed: {attempt.crash}", error=attempt.crash, **base
        )
    return _went_on(attempt, base)


#: Nothing was decided because of what the decider sent or may do: the outcome of each refusal.
_NOT_TAKEN: tuple[tuple[type[Exception], Outcome, str], ...] = (
    # A confirmation to ask for (a colleague's claim, "I checked this"): nothing was decided.
    (CallClaimed, Outcome.UNCONFIRMED, ""),
    (RiskyNotConfirmed, Outcome.UNCONFIRMED, ""),
    # Separation of duties, a second vote by the same reviewer, a stale card: nothing recorded.
    (DecisionRefused, Outcome.REFUSED, ""),
    (
        RerunNotConfirmed,
        Outcome.UNCONFIRMED,
        "Interrupted after the tool started — it may have run. Nothing was decided: tick “Run it again” "
        "to confirm.",
    ),
    (InvalidResumeData, Outcome.INVALID, ""),
)


def _refused(error: Exception, base: dict[str, Any], visible: list[str]) -> DecisionOutcome:
    if isinstance(error, NotADecider):
        # Not theirs to decide (an escalation-only reviewer's other calls): as unknown as a call that
        # never existed.
        hidden = {**base, "tool_name": "", "thread_id": None, "resource_id": None, "args": None}
        return DecisionOutcome(status=Outcome.NOT_FOUND, message=NOT_WAITING, **hidden)
    if isinstance(error, RunAlreadyDecided | RunNotFound | ToolCallNotSuspended):
        return _stale(error, base, visible)
    for kind, status, message in _NOT_TAKEN:
        if isinstance(error, kind):
            return DecisionOutcome(
                status=status,
                message=message or str(error),
                refusal=getattr(error, "rule", "") or ("rerun_unconfirmed" if message else ""),
                field_errors=list(getattr(error, "errors", [])),
                refused_args=isinstance(error, InvalidToolArgs),
                **base,
            )
    raise error


NOT_WAITING = "This run is not waiting for a decision any more (it ended, or it does not exist)."


def _stale(error: Exception, base: dict[str, Any], visible: list[str]) -> DecisionOutcome:
    """The card was stale: if someone decided this call, say who; otherwise nothing happened."""
    # Who decided a call is told only about agents the user may see: to anyone else, a call of a
    # foreign run is as unknown as one that never existed.
    decisions = (
        AuditEntry.objects.for_call(base["run_id"], base["tool_call_id"])
        .winning()
        .filter(agent_id__in=visible)
    )
    if isinstance(error, RunAlreadyDecided) and error.decided_by is not None:
        return lost_race(base, error.decided_by, error.decided_at)
    previous = decisions.chronological().first()
    if previous is not None:
        base = {
            **base,
            "agent_id": base["agent_id"] or previous.agent_id,
            "tool_name": base["tool_name"] or previous.tool_name,
            "thread_id": base["thread_id"] or previous.thread_id or None,
            "resource_id": base["resource_id"] or previous.resource_id or None,
        }
        return lost_race(base, previous.username, previous.created_at)
    if isinstance(error, RunAlreadyDecided):
        return lost_race(base, None, None)
    if not base["agent_id"]:
        logger.info(
            "%s posted a decision on %s/%s: no run of an agent they may see has it",
            base["decided_by"],
            base["run_id"],
            base["tool_call_id"],
        )
    message = str(error) if isinstance(error, ToolCallNotSuspended) else NOT_WAITING
    return DecisionOutcome(status=Outcome.NOT_FOUND, message=message, **base)


def _went_on(attempt: Attempt, base: dict[str, Any]) -> DecisionOutcome:
    """A decision the runtime took, and how far the run went on with it."""
    result = attempt.result
    assert result is not None
    if result.status == "success":
        return DecisionOutcome(
            status=Outcome.COMPLETED, message=completed_detail(result.text), text=result.text, **base
        )
    if result.status == "running":
        return DecisionOutcome(
            status=Outcome.CONTINUING,
            message="Recorded; the run continues in the background. Its page shows how it ends.",
            **base,
        )
    if result.status == "failed":
        return DecisionOutcome(
            status=Outcome.FAILED, message=failed_detail(result.error), error=result.error, **base
        )
    if result.approvals is not None:
        tally = result.approvals
        return DecisionOutcome(
            status=Outcome.VOTE_RECORDED,
            message=f"Your approval is recorded: {tally}. The call runs once "
            f"{tally.required - len(tally.approved_by)} more reviewer(s) approve it.",
            run=attempt.run_after,
            approvals=tally,
            **base,
        )
    waiting = attempt.run_after.tool_calls if attempt.run_after else result.tool_calls
    before = {c.tool_call_id for c in attempt.run_before.tool_calls} if attempt.run_before else set()
    if waiting and all(c.tool_call_id in before for c in waiting):
        message = waiting_detail(c.tool_name for c in waiting)
    else:
        message = suspended_again_detail(c.tool_name for c in waiting)
    return DecisionOutcome(status=Outcome.SUSPENDED_AGAIN, message=message, run=attempt.run_after, **base)


def same_json(left: Any, right: Any) -> bool:
    """Equal as JSON: ``1``, ``1.0`` and ``true`` differ (Python's ``==`` says they are equal)."""
    return json.dumps(left, sort_keys=True, default=str) == json.dumps(right, sort_keys=True, default=str)


def lost_race(base: dict[str, Any], winner: str | None, winner_at: datetime | None) -> DecisionOutcome:
    who = f" by {winner}" if winner else ""
    when = f" at {_at(winner_at)}" if winner_at else ""
    return DecisionOutcome(
        status=Outcome.LOST_RACE,
        message=f"This call was already decided{who}{when}. Nothing ran twice.",
        winner=winner,
        winner_at=winner_at,
        **base,
    )
