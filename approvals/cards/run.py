"""What a run card shows, prepared for the template (which decides nothing).

A card is built from a waiting run (``AgentRun``), from a decision's outcome, or from both (the run
suspended again). The same template (``approvals/partials/run_card.html``) renders all of them, on the
inbox, the run page and in answer to an htmx decision.

Each waiting call is a ``call_views.CallView`` (its title, arguments by type, why it waits and its
forms, shown as plain markup from ``field_views.FieldView``s); stored values become JSON text in
``json_text``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agents_runtime import Agent, AgentRun
from agents_runtime.store import DecisionAction, Outcome, StoredRun
from agents_runtime.untrusted import clean_text, reveal_invisible
from approvals import ids
from approvals.cards.call import (
    RESUME_PREFIX,
    CallView,
    call_view,
    guarded_call_view,
    resume_form_for,
)
from approvals.cards.text import compact_json, is_long, pretty_json
from approvals.forms.decisions import DeclineForm, EditedArgsForm, GrantForm
from approvals.forms.schema import ResumeForm
from approvals.models import AuditEntry, HeldDecision
from approvals.policy import Access, may_grant
from approvals.services.decisions import DecisionOutcome, held_outcome

__all__ = [
    "RESUME_PREFIX",
    "CallView",
    "DecidedCallView",
    "DecisionRow",
    "MessageView",
    "RunCard",
    "call_view",
    "compact_json",
    "conversation",
    "decided_calls",
    "decision_rows",
    "outcome_card",
    "pretty_json",
    "resume_form_for",
    "run_card",
    "seen_card",
]


@dataclass
class RunCard:
    run_id: str
    agent_id: str
    agent_name: str
    dom_id: str
    thread_id: str | None = None
    resource_id: str | None = None
    suspended_at: datetime | None = None
    created_at: datetime | None = None
    interrupted: bool = False
    parent_run_id: str | None = None
    #: The undecided calls (empty when the run is not waiting).
    calls: list[CallView] = field(default_factory=list)
    outcome: DecisionOutcome | None = None
    #: The page the forms return to without JavaScript.
    next_url: str = ""
    #: The outcome as one line (the queue): what was decided and by whom, the run a link away.
    folded: bool = False

    @property
    def waiting(self) -> bool:
        return bool(self.calls)

    @property
    def folded_rows_only(self) -> bool:
        """A waiting card of folded rows and nothing else: no outcome, not a supervisor's inner run
        (what most of a list's cards are; written by ``{% waiting_card %}``)."""
        return (
            not self.folded
            and self.outcome is None
            and self.parent_run_id is None
            and bool(self.calls)
            and all(cv.lazy for cv in self.calls)
        )

    @functools.cached_property
    def outcome_args_json(self) -> str:
        """The decided call's arguments as the card showed them (the model's), pretty JSON."""
        return reveal_invisible(pretty_json(self.outcome.args)) if self.outcome is not None else ""

    @functools.cached_property
    def outcome_edited_json(self) -> str:
        """The arguments the reviewer approved instead (empty: none), pretty JSON."""
        if self.outcome is None or self.outcome.edited_args is None:
            return ""
        return reveal_invisible(pretty_json(self.outcome.edited_args))

    @property
    def decided_through_parent(self) -> bool:
        """A sub-agent's inner run is decided on its supervisor's run, not here."""
        return self.parent_run_id is not None

    @functools.cached_property
    def run_url(self) -> str:
        return ids.id_url("approvals:run", self.run_id)


def run_card(
    run: AgentRun,
    *,
    agent: Agent | None = None,
    agent_name: str = "",
    next_url: str = "",
    outcome: DecisionOutcome | None = None,
    resume_forms: Mapping[str, ResumeForm] | None = None,
    decline_forms: Mapping[str, DeclineForm] | None = None,
    edited_args_forms: Mapping[str, EditedArgsForm] | None = None,
    args_forms: Mapping[str, ResumeForm] | None = None,
    grant_forms: Mapping[str, GrantForm] | None = None,
    notices: Mapping[str, str] | None = None,
    expanded: bool = False,
    claims: Mapping[tuple[str, str], Any] | None = None,
    held: Mapping[tuple[str, str], str] | None = None,
    access: Access | None = None,
) -> RunCard:
    """``agent``: the run's agent, whose tools say how their calls read (titles, money, risky
    values); ``expanded``: every call starts open (the run page), not as a one-line row; ``claims``:
    who is on which call (``queries.call_claims``, loaded once for the page); ``held``: who holds a
    decision on which call for its undo window (someone else: the viewer's own show as outcomes);
    ``access``: the viewer's rights, which say whether the card offers a standing grant (none without)."""
    grants = access is not None and may_grant(access, run.agent_id)
    args_forms = args_forms or {}
    resume_forms = resume_forms or {}
    decline_forms = decline_forms or {}
    edited_args_forms = edited_args_forms or {}
    notices = notices or {}
    card = RunCard(
        run_id=run.run_id,
        agent_id=run.agent_id,
        agent_name=agent_name or run.agent_id,
        dom_id=ids.run_card_id(run.run_id),
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        suspended_at=run.suspended_at,
        created_at=run.created_at,
        interrupted=run.interrupted,
        parent_run_id=run.parent_run_id,
        calls=[
            guarded_call_view(
                run,
                call,
                agent=agent,
                resume_form=resume_forms.get(call.tool_call_id),
                decline_form=decline_forms.get(call.tool_call_id),
                edited_args_form=edited_args_forms.get(call.tool_call_id),
                args_form=args_forms.get(call.tool_call_id),
                grant_form=(grant_forms or {}).get(call.tool_call_id),
                notice=notices.get(call.tool_call_id, ""),
                # An inbox row starts folded, its body fetched when opened; an outcome shows it all.
                folded=not expanded and outcome is None,
                claim=(claims or {}).get((run.run_id, call.tool_call_id)),
                held_by=(held or {}).get((run.run_id, call.tool_call_id), ""),
                may_grant=grants,
            )
            for call in run.tool_calls
        ],
        outcome=outcome,
        next_url=next_url,
    )
    for cv in card.calls:
        # The run page, and a run that waits again right after a decision, show the calls open.
        cv.open = cv.open or expanded or outcome is not None
    return card


def seen_card(
    run: AgentRun,
    *,
    held: Mapping[tuple[str, str], HeldDecision],
    viewer: str,
    folded: bool = False,
    **shown: Any,
) -> RunCard:
    """A waiting run's card as ``viewer`` sees it (``shown``: ``run_card``'s arguments): the receipt of
    their own decision held on one of its calls, with its Undo, as the page that took it showed it
    (``folded``: the queue's one line); otherwise the run, the calls others hold marked as taken."""
    # (Only a hold on a call that still waits: one another door decided between its check and its
    # row is a lost race, taken as such when its window ends, and the run shows as it waits now.)
    waiting = {c.tool_call_id for c in run.tool_calls}
    mine = next(
        (
            h
            for h in held.values()
            if h.run_id == run.run_id and h.username == viewer and h.tool_call_id in waiting
        ),
        None,
    )
    if mine is not None:
        return outcome_card(
            held_outcome(mine, run),
            agent=shown.get("agent"),
            agent_name=shown.get("agent_name", ""),
            next_url=shown.get("next_url", ""),
            folded=folded,
            access=shown.get("access"),
        )
    others = {key: h.username for key, h in held.items() if h.username != viewer}
    return run_card(run, held=others, **shown)


def outcome_card(
    outcome: DecisionOutcome,
    *,
    agent: Agent | None = None,
    agent_name: str = "",
    next_url: str = "",
    folded: bool = False,
    access: Access | None = None,
) -> RunCard:
    """The card that replaces a decided one: the outcome, and the run again if it still waits.
    ``folded``: a run that waits no more shows its outcome as one line (the queue, where the next
    call matters more than what the run did); ``access``: the viewer's, as for ``run_card``."""
    if outcome.run is not None:
        return run_card(
            outcome.run, agent=agent, agent_name=agent_name, next_url=next_url, outcome=outcome, access=access
        )
    return RunCard(
        run_id=outcome.run_id,
        agent_id=outcome.agent_id,
        agent_name=agent_name or outcome.agent_id,
        dom_id=ids.run_card_id(outcome.run_id),
        thread_id=outcome.thread_id,
        resource_id=outcome.resource_id,
        outcome=outcome,
        next_url=next_url,
        folded=folded,
    )


@dataclass(frozen=True)
class DecidedCallView:
    """A decision already taken on a run that is continuing now (read from the run, not the audit)."""

    tool_name: str
    verb: str
    actor: str | None
    decided_at: datetime
    #: Approved with the reviewer's arguments instead of the model's.
    edited: bool = False


def decided_calls(run: StoredRun) -> list[DecidedCallView]:
    return [
        DecidedCallView(
            tool_name=call.tool_name,
            verb=DecisionAction(call.decision.action).verb,
            actor=call.decision.actor,
            decided_at=call.decision.decided_at,
            edited=call.decision.edited_args is not None,
        )
        for call in run.calls
        if call.decision is not None
    ]


@dataclass(frozen=True)
class MessageView:
    role: str
    kind: str
    text: str | None
    tool_name: str | None
    tool_call_id: str | None
    #: Pretty JSON of the call's args or of the tool's result.
    json: str
    json_is_long: bool
    timestamp: datetime | None


def conversation(messages: list[dict[str, Any]]) -> list[MessageView]:
    """The run's messages ready to show (JSON pretty-printed here, escaped by the template)."""
    views = []
    for message in messages:
        kind = str(message.get("kind") or "text")
        shown: Any = message.get("args") if kind == "tool-call" else message.get("result")
        text = "" if kind == "text" else pretty_json(shown)
        stamp = message.get("timestamp")
        try:
            when = datetime.fromisoformat(stamp) if isinstance(stamp, str) else stamp
        except ValueError:
            when = None
        text_value = message.get("text")
        views.append(
            MessageView(
                role=clean_text(str(message.get("role") or "")),
                kind=kind,
                # Normalised when stored; a snapshot stored before that may hold lone surrogates.
                text=reveal_invisible(clean_text(text_value)) if isinstance(text_value, str) else text_value,
                tool_name=_text_or_none(message.get("tool_name")),
                tool_call_id=_text_or_none(message.get("tool_call_id")),
                json=reveal_invisible(text),
                json_is_long=is_long(text),
                timestamp=when if isinstance(when, datetime) else None,
            )
        )
    return views


def _text_or_none(value: Any) -> str | None:
    return None if value is None else clean_text(str(value))


# -- a decision's chain: shown, decided, executed (the run page's decisions) -----------------------

#: What came of an approval, by its row's outcome: whether the tool ran, in a few words.
_EXECUTED = {
    Outcome.COMPLETED: "ran; the run completed",
    Outcome.SUSPENDED_AGAIN: "ran; the run waits again",
    Outcome.FAILED: "the run failed",
    Outcome.CONTINUING: "running",
    Outcome.INTERRUPTED: "interrupted: offered again",
    Outcome.VOTE_RECORDED: "not yet: waits for more approvals",
}


@dataclass(frozen=True)
class DecisionRow:
    """One decision on the run page (an audit row), with its chain: shown (when the call was
    offered, and the digest of what was shown), decided (by whom, on that digest), executed (what
    came of it, or why it did not run). "Shown" is to the decider, when their card was rendered (a
    dashboard decision posts it back, signed), else since when the call waited for its reviewers."""

    entry: AuditEntry

    @property
    def fingerprint(self) -> str:
        """The digest the decision was bound to, short ("" on rows from before it was kept)."""
        return self.entry.fingerprint[:12]

    @property
    def executed(self) -> str:
        entry = self.entry
        if entry.outcome in (Outcome.RECHECK_CHANGED, Outcome.RECHECK_FAILED):
            return Outcome(entry.outcome).label
        if entry.action == DecisionAction.DECLINE:
            return "not run: declined"
        if entry.action == DecisionAction.APPROVE and entry.outcome in _EXECUTED:
            return _EXECUTED[Outcome(entry.outcome)]
        return Outcome(entry.outcome).label if entry.outcome in Outcome else entry.outcome


def decision_rows(entries: list[AuditEntry]) -> list[DecisionRow]:
    return [DecisionRow(entry) for entry in entries]
