"""The runtime's exceptions. Nothing runs and nothing changes when one of them is raised."""

from __future__ import annotations

from datetime import datetime
from typing import Any


class AgentsRuntimeError(Exception):
    """Base class of every error the runtime raises on purpose."""


class RunNotFound(AgentsRuntimeError):
    """Unknown run, a run that already ended, or a run owned by another agent."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"No suspended run {run_id!r} for this agent")
        self.run_id = run_id


class RunUnreadable(RunNotFound):
    """A run its store holds but can no longer read (a row changed by hand, or by another version's
    writer): it cannot be decided or continued, and it stays as stored until someone repairs it (the
    store's log says what is wrong). A ``RunNotFound`` to a caller that only asks whether the run waits.
    ``rule`` names it where a refusal's code is shown (a preview's group, the HTTP API's error)."""

    rule = "run_unreadable"

    def __init__(self, run_id: str) -> None:
        AgentsRuntimeError.__init__(
            self,
            f"Run {run_id!r} is stored in a form that can no longer be read, so it cannot be decided or "
            "continued. Nothing was changed.",
        )
        self.run_id = run_id


class ToolCallNotSuspended(AgentsRuntimeError):
    """The tool call is not parked on that run (stale, wrong, empty or ambiguous)."""

    def __init__(self, message: str, *, run_id: str, tool_call_id: str | None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.tool_call_id = tool_call_id


class RunAlreadyDecided(AgentsRuntimeError):
    """Another decision on the same call won the race."""

    def __init__(
        self,
        *,
        run_id: str,
        tool_call_id: str,
        decided_by: str | None = None,
        decided_at: datetime | None = None,
    ) -> None:
        who = f" by {decided_by}" if decided_by else ""
        when = f" at {decided_at.isoformat()}" if decided_at else ""
        super().__init__(f"Tool call {tool_call_id!r} of run {run_id!r} was already decided{who}{when}")
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.decided_by = decided_by
        self.decided_at = decided_at


class RerunNotConfirmed(AgentsRuntimeError):
    """The call's tool started in a continuation that died: it may have run, so approving or
    answering it again runs it a second time. Decide again with ``confirm_rerun=True``."""

    def __init__(self, *, run_id: str, tool_call_id: str, started_at: datetime) -> None:
        super().__init__(
            f"Tool call {tool_call_id!r} of run {run_id!r} was interrupted after its tool started "
            f"(at {started_at.isoformat()}); it may have run. Confirm to run it again."
        )
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.started_at = started_at


class InvalidResumeData(AgentsRuntimeError):
    """Resume data that breaks the tool's resume schema, or a decision of the wrong kind."""

    def __init__(self, message: str, *, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        #: One entry per problem: ``{"loc": ("field", ...), "msg": "..."}``; empty for kind errors.
        self.errors: list[dict[str, Any]] = errors or []


class InvalidToolArgs(InvalidResumeData):
    """Edited arguments of an approval that break the tool's parameters (beyond Mastra).

    A kind of invalid decision data: ``errors`` locate each problem inside the arguments object.
    """


class InvalidPagination(AgentsRuntimeError, ValueError):
    """``per_page`` must be a positive int and ``page`` a non-negative int."""


class DecisionRefused(AgentsRuntimeError):
    """A decision a rule refuses (beyond Mastra; the rules: ``agents_runtime.policy``). Nothing is
    recorded; another reviewer may still decide. ``rule`` names the rule (a stable code)."""

    rule = "refused"

    def __init__(self, message: str, *, run_id: str, tool_call_id: str, actor: str | None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.actor = actor


class SelfApprovalRefused(DecisionRefused):
    """``separate_duties=True``: whoever started the run may not approve its calls (admins neither)."""

    rule = "separation_of_duties"


class DuplicateVote(DecisionRefused):
    """``approvals=N``: this reviewer already approved the call; it needs someone else's approval."""

    rule = "second_vote"


class ApprovalsNotGiven(DecisionRefused):
    """A deadline's default approval of a call that needs several approvals (``approvals=N``, or a
    routing rule's): nobody answering is no reviewer's approval, let alone N."""

    rule = "approvals_not_given"


class NotADecider(DecisionRefused):
    """The decider may not decide this call (the host's rule: whose calls these are)."""

    rule = "not_a_decider"


class CallClaimed(DecisionRefused):
    """A colleague is on this call (the host's claims): decide it anyway only when confirmed."""

    rule = "claimed"

    def __init__(
        self, message: str, *, run_id: str, tool_call_id: str, actor: str | None, holder: str
    ) -> None:
        super().__init__(message, run_id=run_id, tool_call_id=tool_call_id, actor=actor)
        self.holder = holder


class RiskyNotConfirmed(DecisionRefused):
    """A risky call approved without "I checked this" (or by a grant not made for risky calls, or
    by a deadline's default)."""

    rule = "risky_unconfirmed"


class ArgumentsChanged(DecisionRefused):
    """The call's arguments are not the ones the decider saw."""

    rule = "arguments_changed"


class NotTheRequester(DecisionRefused):
    """A cancellation by anyone but the agent that asked, or anything else asked by that agent."""

    rule = "not_the_requester"
