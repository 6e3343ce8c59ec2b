"""What a run card shows, prepared for the template (which decides nothing).

A card is built from a waiting run (``AgentRun``), from a decision's outcome, or from both (the run
suspended again). The same template (``approvals/partials/run_card.html``) renders all of them, on the
inbox, the run page and in answer to an htmx decision.

Its forms (decline reason, edited arguments, resume answer) are shown as plain markup from
``field_views.FieldView``s.
"""

from __future__ import annotations

import functools
import json
import logging
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.urls import reverse

from agents_runtime import AgentRun, AgentRunToolCall
from agents_runtime.store import StoredRun
from agents_runtime.untrusted import clean_text
from agents_runtime.vocabulary import CallKind, DecisionAction
from approvals import dom_ids
from approvals.display import reveal_invisible
from approvals.field_views import FieldView, bound_fields, unbound_fields
from approvals.forms import DeclineForm, EditedArgsForm
from approvals.schema_forms import ResumeForm, resume_form_class
from approvals.services import DecisionOutcome

#: JSON longer than this (lines or characters) is folded into a <details>.
LONG_JSON_LINES = 12
LONG_JSON_CHARS = 600
#: The resume form's prefix: its fields post as ``resume-<property>``.
RESUME_PREFIX = "resume"


logger = logging.getLogger(__name__)
#: What a value that is not JSON (or too deep for it) is shown as: its escaped, shortened repr.
_SHORT_REPR = reprlib.Repr(maxlevel=8, maxlist=20, maxdict=20, maxstring=200, maxother=200)
NOT_JSON_NOTE = "[cannot be shown as JSON, shown escaped]"


def _json_text(value: Any, **options: Any) -> str:
    """JSON text that can always be sent as UTF-8; a value stored before values were normalised
    (lone surrogates, NaN, deep nesting) is shown escaped with a note instead of failing the page."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str, **options)
        if clean_text(text) is not text:
            # Lone surrogates: written as JSON escapes (\ud800) they are shown as they are.
            text = json.dumps(value, ensure_ascii=True, default=str, **options)
        return text
    except (ValueError, TypeError, RecursionError) as exc:
        logger.warning("A stored value cannot be shown as JSON: %s", type(exc).__name__)
        return f"{NOT_JSON_NOTE} {clean_text(_SHORT_REPR.repr(value))}"


def pretty_json(value: Any) -> str:
    """Indented JSON text; the template escapes it (it is untrusted model output)."""
    return _json_text(value, indent=2)


def compact_json(value: Any) -> str:
    """One-line JSON for CSV cells; empty for None."""
    return "" if value is None else _json_text(value)


def is_long(text: str) -> bool:
    return text.count("\n") + 1 > LONG_JSON_LINES or len(text) > LONG_JSON_CHARS


@dataclass
class CallView:
    call: AgentRunToolCall
    run_id: str
    agent_id: str
    dom_id: str
    #: Pretty JSON of the args (approval calls) or of the suspend payload (input calls).
    json: str
    json_is_long: bool
    json_lines: int
    #: The decline form's reason field.
    reason: FieldView
    #: Approval calls: the "approve with these arguments" form's field (pre-filled with ``json``),
    #: and whether its ``<details>`` is open (it has errors to show).
    edited_args: FieldView | None = None
    edit_open: bool = False
    #: The resume form's fields (input calls), and its errors about the answer as a whole.
    resume_fields: list[FieldView] = field(default_factory=list)
    resume_errors: tuple[str, ...] = ()
    #: A message about this call only (e.g. the runtime refused the answer).
    notice: str = ""

    @property
    def is_approval(self) -> bool:
        return self.call.requires_approval

    @property
    def kind(self) -> CallKind:
        return CallKind.APPROVAL if self.call.requires_approval else CallKind.INPUT

    @property
    def kind_label(self) -> str:
        return self.kind.label

    # Reversed when the card shows them, once each (an inbox page has 50 cards).
    @functools.cached_property
    def approve_url(self) -> str:
        return reverse("approvals:approve", args=[self.run_id, self.call.tool_call_id])

    @functools.cached_property
    def decline_url(self) -> str:
        return reverse("approvals:decline", args=[self.run_id, self.call.tool_call_id])

    @functools.cached_property
    def resume_url(self) -> str:
        return reverse("approvals:resume", args=[self.run_id, self.call.tool_call_id])


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

    @property
    def waiting(self) -> bool:
        return bool(self.calls)

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
        return reverse("approvals:run", args=[self.run_id])


def call_view(
    run: AgentRun,
    call: AgentRunToolCall,
    *,
    resume_form: ResumeForm | None = None,
    decline_form: DeclineForm | None = None,
    edited_args_form: EditedArgsForm | None = None,
    notice: str = "",
) -> CallView:
    """A parked call; the forms given are shown with their data and errors, the others empty."""
    call_dom = dom_ids.call_block_id(run.run_id, call.tool_call_id)
    # The forms' field ids: unique on a page with many cards.
    auto_id = f"{call_dom}-%s"
    shown = call.args if call.requires_approval else call.suspend_payload
    text = pretty_json(shown if shown is not None else {})
    if decline_form is not None:
        (reason,) = bound_fields(decline_form)
    else:
        (reason,) = unbound_fields(DeclineForm, auto_id=auto_id)
    edited_args: FieldView | None = None
    if edited_args_form is not None:
        # What the reviewer posted, with its errors.
        (edited_args,) = bound_fields(edited_args_form)
    elif call.requires_approval:
        (edited_args,) = unbound_fields(EditedArgsForm, auto_id=auto_id, initial={"edited_args": text})
    resume_fields: list[FieldView] = []
    resume_errors: tuple[str, ...] = ()
    if resume_form is not None:
        resume_fields = bound_fields(resume_form)
        resume_errors = tuple(str(e) for e in resume_form.non_field_errors())
    elif not call.requires_approval:
        form_class = resume_form_class(call.resume_schema)
        resume_fields = unbound_fields(form_class, auto_id=auto_id, prefix=RESUME_PREFIX)
        notice = notice or form_class.broken_notice()
    return CallView(
        call=call,
        run_id=run.run_id,
        agent_id=run.agent_id,
        dom_id=call_dom,
        json=reveal_invisible(text),
        json_is_long=is_long(text),
        json_lines=text.count("\n") + 1,
        reason=reason,
        edited_args=edited_args,
        edit_open=bool(edited_args is not None and edited_args.errors),
        resume_fields=resume_fields,
        resume_errors=resume_errors,
        notice=notice,
    )


def _guarded_call_view(run: AgentRun, call: AgentRunToolCall, **forms: Any) -> CallView:
    """``call_view``, or the call shown escaped without its forms (it can still be declined): one odd
    call never fails the page, nor hides the other runs of an inbox."""
    try:
        return call_view(run, call, **forms)
    except Exception:
        logger.exception("Run %s: call %r cannot be shown", run.run_id, call.tool_call_id)
    call_dom = dom_ids.call_block_id(run.run_id, call.tool_call_id)
    text = f"{NOT_JSON_NOTE} {clean_text(_SHORT_REPR.repr(call.args or call.suspend_payload))}"
    (reason,) = unbound_fields(DeclineForm, auto_id=f"{call_dom}-%s")
    notice = "This call cannot be shown properly; it can still be declined."
    return CallView(call, run.run_id, run.agent_id, call_dom, text, is_long(text), 1, reason, notice=notice)


def resume_form_for(
    call: AgentRunToolCall, *, run_id: str, data: Mapping[str, Any] | None = None
) -> ResumeForm:
    """The resume form of one call; field ids are unique on a page with many cards."""
    call_dom = dom_ids.call_block_id(run_id, call.tool_call_id)
    form_class = resume_form_class(call.resume_schema)
    return form_class(data=data, prefix=RESUME_PREFIX, auto_id=f"{call_dom}-%s")


def run_card(
    run: AgentRun,
    *,
    agent_name: str = "",
    next_url: str = "",
    outcome: DecisionOutcome | None = None,
    resume_forms: Mapping[str, ResumeForm] | None = None,
    decline_forms: Mapping[str, DeclineForm] | None = None,
    edited_args_forms: Mapping[str, EditedArgsForm] | None = None,
    notices: Mapping[str, str] | None = None,
) -> RunCard:
    resume_forms = resume_forms or {}
    decline_forms = decline_forms or {}
    edited_args_forms = edited_args_forms or {}
    notices = notices or {}
    return RunCard(
        run_id=run.run_id,
        agent_id=run.agent_id,
        agent_name=agent_name or run.agent_id,
        dom_id=dom_ids.run_card_id(run.run_id),
        thread_id=run.thread_id,
        resource_id=run.resource_id,
        suspended_at=run.suspended_at,
        created_at=run.created_at,
        interrupted=run.interrupted,
        parent_run_id=run.parent_run_id,
        calls=[
            _guarded_call_view(
                run,
                call,
                resume_form=resume_forms.get(call.tool_call_id),
                decline_form=decline_forms.get(call.tool_call_id),
                edited_args_form=edited_args_forms.get(call.tool_call_id),
                notice=notices.get(call.tool_call_id, ""),
            )
            for call in run.tool_calls
        ],
        outcome=outcome,
        next_url=next_url,
    )


def outcome_card(outcome: DecisionOutcome, *, agent_name: str = "", next_url: str = "") -> RunCard:
    """The card that replaces a decided one: the outcome, and the run again if it still waits."""
    if outcome.run is not None:
        return run_card(outcome.run, agent_name=agent_name, next_url=next_url, outcome=outcome)
    return RunCard(
        run_id=outcome.run_id,
        agent_id=outcome.agent_id,
        agent_name=agent_name or outcome.agent_id,
        dom_id=dom_ids.run_card_id(outcome.run_id),
        thread_id=outcome.thread_id,
        resource_id=outcome.resource_id,
        outcome=outcome,
        next_url=next_url,
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
