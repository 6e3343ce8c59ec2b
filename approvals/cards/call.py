"""One parked call as its card shows it: a readable title, the arguments by type, why it waits, and
its forms (approve, edit the arguments, decline, answer).

The tool's metadata (``agents_runtime.presentation``) says how its calls read; the call's
``CallContext`` (gathered when the run parked) says why it waits. Nothing here reads a run's
snapshot: an inbox page shows fifty of these.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agents_runtime import (
    Agent,
    AgentRun,
    AgentRunToolCall,
    GrantScope,
    Preview,
    Tool,
    needs_confirmation,
    required_approvals,
    shown,
)
from agents_runtime.presentation import with_money
from agents_runtime.store import CallKind
from agents_runtime.untrusted import clean_text, reveal_invisible
from approvals import ids
from approvals.cards.args import ArgView, arg_views, values_view
from approvals.cards.fields import FieldView, bound_fields, unbound_fields
from approvals.cards.text import (
    NOT_JSON_NOTE,
    SHORT_REPR,
    compact_json,
    is_long,
    pretty_json,
)
from approvals.forms.decisions import DeclineForm, EditedArgsForm, GrantForm, shown_token
from approvals.forms.schema import ResumeForm, resume_form_class
from approvals.models import ParkedCallRecord

logger = logging.getLogger(__name__)

#: The resume form's prefix: its fields post as ``resume-<property>``.
RESUME_PREFIX = "resume"
#: The edit form's prefix (fields ``args-<parameter>``); ``ARGS_FORM_MARK`` says it was this form.
ARGS_PREFIX = "args"
ARGS_FORM_MARK = "args_form"


# -- why it waits -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResultView:
    """One earlier result: what it found (its key fields), or in words that it did not."""

    tool_name: str
    values: tuple[ArgView, ...] = ()
    #: A negative result in words ("found nothing", "failed: Order A-9 does not exist"); "" when it
    #: found something.
    negative: str = ""


def result_view(result: Any, tool: Tool | None) -> ResultView:
    """An earlier result (a ``CallContext``'s ``KeyResult``) as the "why" shows it."""
    if result.error is not None:
        return ResultView(result.tool_name, negative=f"failed: {reveal_invisible(clean_text(result.error))}")
    if result.nothing or not result.values:
        return ResultView(result.tool_name, negative="found nothing")
    return ResultView(result.tool_name, tuple(values_view(result.values, tool, json_text=compact_json)))


@dataclass(frozen=True)
class WhyView:
    """Why the call waits: what the user asked, what the agent said, what earlier calls found."""

    user_message: str = ""
    agent_said: str = ""
    #: Earlier results in the run: their key fields, or that they found nothing or failed.
    key_results: tuple[ResultView, ...] = ()
    description: str = ""
    approval_reason: str = ""
    #: ``(question, the answer's fields)`` given earlier in the run (a follow-up question).
    previous_answers: tuple[tuple[str, tuple[ArgView, ...]], ...] = ()
    #: ``(grant, why its condition failed)``: grants that did not apply, so the call waits.
    grant_failures: tuple[tuple[str, str], ...] = ()
    #: ``(rule, why its condition failed)``: routing rules that could not be evaluated on the call.
    rule_failures: tuple[tuple[str, str], ...] = ()
    #: The routing rule that sent the call to a person or two ("rule #3 of rita").
    routed_by: str = ""

    def __bool__(self) -> bool:
        return any(
            (
                self.user_message,
                self.agent_said,
                self.key_results,
                self.description,
                self.approval_reason,
                self.previous_answers,
                self.grant_failures,
                self.rule_failures,
                self.routed_by,
            )
        )


def find_tool(
    agent: Agent | None,
    tool_name: str,
    call: AgentRunToolCall | ParkedCallRecord | None = None,
    *,
    via: str | None = None,
) -> Tool | None:
    """The tool a call names; given the call (the runtime's, or the store's row), as it applies to
    it (an external agent's request brings its own argument schema and title: ``Tool.for_call``).
    ``via``: the sub-agent that parked it, where only that is known of the call (a batch's item, an
    audit row, an earlier result of its run)."""
    # (A supervisor's mirror of a sub-agent's call: that sub-agent's tool, as the runtime judges it,
    # never a namesake of the supervisor's.)
    if call is not None:
        via = call.via_agent_id
    tool = agent.find_tool(tool_name, via) if agent is not None else None
    context = call.context if call is not None else None
    if tool is None or context is None:
        return tool
    if isinstance(context, Mapping):  # (the store's row keeps the context as JSON)
        return tool.for_call(context.get("args_schema"), context.get("title"))
    return tool.for_call(context.args_schema, context.title)


def _first_paragraph(text: str | None) -> str:
    return (text or "").strip().split("\n\n", 1)[0].strip()


def why_view(call: AgentRunToolCall, tool: Tool | None, agent: Agent | None) -> WhyView:
    context = call.context
    description = _first_paragraph(tool.description if tool is not None else None)
    if context is None:
        return WhyView(description=description)
    # Earlier results and answers of the run that parked the call: a mirrored call's are its
    # sub-agent's, read by that sub-agent's tools (as the runtime gathered them), not a namesake's.
    via = call.via_agent_id
    return WhyView(
        user_message=reveal_invisible(context.user_message or ""),
        agent_said=reveal_invisible(context.agent_said or ""),
        key_results=tuple(
            result_view(r, find_tool(agent, r.tool_name, via=via)) for r in context.key_results
        ),
        description=description,
        approval_reason=reveal_invisible(context.approval_reason or ""),
        previous_answers=tuple(
            (
                reveal_invisible(a.question or a.tool_name),
                tuple(
                    values_view(a.answer, find_tool(agent, a.tool_name, via=via), json_text=compact_json)
                    if isinstance(a.answer, Mapping)
                    else values_view({"answer": a.answer}, None, json_text=compact_json)
                ),
            )
            for a in context.previous_answers
        ),
        grant_failures=tuple(
            (reveal_invisible(f.grant), reveal_invisible(f.error)) for f in context.grant_failures
        ),
        rule_failures=tuple(
            (reveal_invisible(f.grant), reveal_invisible(f.error)) for f in context.rule_failures
        ),
        routed_by=reveal_invisible(context.routed_by or ""),
    )


# -- its deadline --------------------------------------------------------------------------------

#: A call due within this many seconds stands out (the card and the inbox row).
DUE_SOON_SECONDS = 300

_THEN = {"decline": "it is declined", "approve": "it is approved", "escalate": "it is escalated"}


@dataclass(frozen=True)
class DeadlineView:
    #: None on a call escalated without a second deadline (it waits for its new group).
    expires_at: datetime | None
    #: As the server counts it when the page is rendered: the page counts down from this, so the
    #: browser's clock never matters.
    remaining_seconds: int
    on_expiry: str
    escalated_to: str
    extend_url: str

    @property
    def due_soon(self) -> bool:
        return self.expires_at is not None and self.remaining_seconds < DUE_SOON_SECONDS

    @property
    def remaining_text(self) -> str:
        """The same words as the countdown in time.js."""
        return remaining_text(self.remaining_seconds)

    @property
    def then_text(self) -> str:
        if self.escalated_to or self.on_expiry not in _THEN:
            # An escalated call's second deadline declines it.
            return _THEN["decline"]
        return _THEN[self.on_expiry]


def remaining_text(seconds: int) -> str:
    if seconds <= 0:
        return "due now"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min left"
    if minutes:
        return f"{minutes} min {secs} s left"
    return f"{secs} s left"


def deadline_view(
    call: AgentRunToolCall, run_id: str, now: datetime | None = None, *, approves: bool = True
) -> DeadlineView | None:
    """``approves``: whether the rules let the deadline's "approve" approve it (``expiry_approves``)."""
    if call.expires_at is None and not call.escalated_to:
        return None
    left = 0.0 if call.expires_at is None else (call.expires_at - (now or datetime.now(UTC))).total_seconds()
    on_expiry = call.on_expiry or "decline"
    return DeadlineView(
        expires_at=call.expires_at,
        remaining_seconds=max(0, int(left)),
        on_expiry="decline" if on_expiry == "approve" and not approves else on_expiry,
        escalated_to=call.escalated_to or "",
        extend_url=ids.id_url("approvals:extend_deadline", run_id, call.tool_call_id),
    )


def expiry_approves(call: AgentRunToolCall, tool: Tool | None) -> bool:
    """Whether nobody answering would approve ``call`` as its deadline says: the runtime's rules
    decline instead a call that is not an approval, whose tool may have run, that is risky, that
    needs several approvals or another reviewer than its starter (``agents_runtime.policy``,
    ``_loop.expire_call``)."""
    return (
        call.on_expiry == "approve"
        and call.requires_approval
        and call.tool_started_at is None
        and not needs_confirmation(tool, call.args)
        and required_approvals(call, tool) == 1
        and not (tool is not None and tool.separate_duties)
    )


# -- the call ------------------------------------------------------------------------------------


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
    #: The decline form's reason field (None while the body is folded away: ``lazy``).
    reason: FieldView | None
    #: Approval calls: the "approve with these arguments" form's field (pre-filled with ``json``),
    #: and whether its ``<details>`` is open (it has errors to show).
    edited_args: FieldView | None = None
    edit_open: bool = False
    #: The resume form's fields (input calls), and its errors about the answer as a whole.
    resume_fields: list[FieldView] = field(default_factory=list)
    resume_errors: tuple[str, ...] = ()
    #: A message about this call only (e.g. the runtime refused the answer).
    notice: str = ""
    #: The readable title ("Refund $890.00 · A-1044"): model output, escaped by the template.
    title: str = ""
    #: The arguments by type (approval calls) and the request's fields (input calls).
    args: list[ArgView] = field(default_factory=list)
    why: WhyView = field(default_factory=WhyView)
    #: The question a ``suspend()``-ed call asks (its payload's ``question`` or ``title``).
    question: str = ""
    #: The edit form built from the tool's parameters (empty: only the JSON textarea).
    args_fields: list[FieldView] = field(default_factory=list)
    args_errors: tuple[str, ...] = ()
    #: Approving needs "I checked this" ticked (the tool asks, or a risky value is present).
    needs_confirmation: bool = False
    #: On a supervisor's run: the sub-agent whose call it is.
    via_agent: str = ""
    #: The row starts expanded (errors or a notice to show, or the only call on its page).
    open: bool = False
    #: A folded inbox row: only its summary is built (of the arguments, the risky ones; no preview);
    #: the body (why, arguments, forms) is fetched from ``body_url`` when the reviewer opens it (an
    #: inbox page shows fifty rows, most unread).
    lazy: bool = False
    #: ``tool(approvals=N, separate_duties=...)``: approvals the call needs, and whether the run's
    #: starter is refused (``call.approved_by``: who approved so far).
    approvals_required: int = 1
    separate_duties: bool = False
    started_by: str | None = None
    #: Who is on this call right now (a live ``CallClaim``), if anyone.
    claim: Any = None
    #: Someone else's decision held on this call for its undo window ("" : none): the call is taken.
    held_by: str = ""
    #: "Approve and allow": the standing grant's terms (empty: the tool takes no grants), and
    #: whether its ``<details>`` is open (it has errors to show).
    grant_fields: list[FieldView] = field(default_factory=list)
    grant_errors: tuple[str, ...] = ()
    grant_open: bool = False
    #: What the call would do (its tool's preview), if it told; and the tool's version, which a
    #: decision is bound to with the arguments and the preview.
    preview: Preview | None = None
    tool_version: str = ""
    #: An approval its recheck sent back before the tool ran (``tool(recheck=True)``): the preview
    #: that was approved (``preview`` is what it would do now), whose approval, and why the recheck
    #: could not tell ("": it could, and what the call would do changed).
    approved_preview: Preview | None = None
    rechecked_by: str = ""
    recheck_error: str = ""
    #: A deadline's "approve" would approve it (``expiry_approves``); False: it would decline it.
    expiry_approves: bool = False

    @property
    def sent_back(self) -> bool:
        """Whether an approval of this call was sent back by its recheck before the tool ran."""
        return self.approved_preview is not None or bool(self.recheck_error)

    @functools.cached_property
    def seen(self) -> str:
        """The fingerprint of what this card shows (an approval's arguments, preview and tool
        version): a decision posts it back, and the door refuses it if the call is no longer this
        (``agents_runtime.policy``)."""
        if not self.call.requires_approval:
            return ""
        return shown(self.call, self.tool_version)

    @functools.cached_property
    def shown_stamp(self) -> str:
        """The card's ``shown`` field: when it was rendered, signed, so the decision's record says
        when its decider was shown the call (``forms.decisions.posted_shown_at``). Stamped once: every
        form of the card carries the same moment, however long the page takes to render."""
        return shown_token(self.seen)

    @property
    def is_approval(self) -> bool:
        return self.call.requires_approval

    def approval_block(self, username: str) -> str:
        """Why ``username`` is not offered Approve ("" when they are). Only what the card shows: the
        store's decide step refuses these approvals whatever the page offered."""
        if username in self.call.approved_by:
            missing = self.approvals_required - len(self.call.approved_by)
            return f"You approved this call. It runs once {missing} more reviewer(s) approve it."
        if self.separate_duties and self.started_by is not None and self.started_by == username:
            return (
                "You started this run, so another reviewer must approve this call (separation of "
                "duties). You may still decline it."
            )
        return ""

    @property
    def kind(self) -> CallKind:
        return CallKind.APPROVAL if self.call.requires_approval else CallKind.INPUT

    @property
    def kind_label(self) -> str:
        return self.kind.label

    @functools.cached_property
    def deadline(self) -> DeadlineView | None:
        return deadline_view(self.call, self.run_id, approves=self.expiry_approves)

    @property
    def risky_args(self) -> list[ArgView]:
        return [a for a in self.args if a.risky]

    # Reversed when the card shows them, once each (an inbox page has 50 cards).
    @functools.cached_property
    def body_url(self) -> str:
        return ids.id_url("approvals:call", self.run_id, self.call.tool_call_id)

    @property
    def body_key(self) -> str:
        """What the body shows that can change while the call waits (the tool may have started, in a
        continuation that died): a body fetched earlier is reused only while this is the same."""
        started = self.call.tool_started_at
        return f"started-{started.timestamp()}" if started is not None else "waiting"

    @functools.cached_property
    def approve_url(self) -> str:
        return ids.id_url("approvals:approve", self.run_id, self.call.tool_call_id)

    @functools.cached_property
    def claim_url(self) -> str:
        return ids.id_url("approvals:claim", self.run_id, self.call.tool_call_id)

    @functools.cached_property
    def decline_url(self) -> str:
        return ids.id_url("approvals:decline", self.run_id, self.call.tool_call_id)

    @functools.cached_property
    def resume_url(self) -> str:
        return ids.id_url("approvals:resume", self.run_id, self.call.tool_call_id)


def _question(payload: Any) -> str:
    if isinstance(payload, Mapping):
        for key in ("question", "title"):
            value = payload.get(key)
            if isinstance(value, str) and value.strip():
                return reveal_invisible(clean_text(value.strip()))
    return ""


def _without_question(payload: Any, question: str) -> Any:
    """A suspend payload without the question its card already shows as its heading."""
    if not question or not isinstance(payload, Mapping):
        return payload
    return {k: v for k, v in payload.items() if k not in ("question", "title") or not isinstance(v, str)}


#: Each tool's edit form class, once per tool (a page shows fifty calls of a handful of tools). Keyed
#: by ``id``, the tool kept alongside so the id stays its own (tools live as long as their runtime).
_ARGS_FORMS: dict[int, tuple[Tool, type[ResumeForm] | None]] = {}


def args_form_class(tool: Tool | None) -> type[ResumeForm] | None:
    """The edit form of a tool's arguments, from its parameters schema with its money fields marked
    (``x-money``: shown and typed in major units); None: JSON only."""
    if tool is None:
        return None
    known = _ARGS_FORMS.get(id(tool))
    if known is not None and known[0] is tool:
        return known[1]
    schema = with_money(tool.parameters_json_schema, tool.money)
    form_class: type[ResumeForm] | None = resume_form_class(schema)
    if form_class is not None and (form_class.broken or form_class.whole_json):
        form_class = None
    _ARGS_FORMS[id(tool)] = (tool, form_class)
    return form_class


def args_form_for(
    tool: Tool | None, *, run_id: str, tool_call_id: str, data: Mapping[str, Any] | None = None
) -> ResumeForm | None:
    form_class = args_form_class(tool)
    auto_id = f"{ids.call_block_id(run_id, tool_call_id)}-%s"
    return None if form_class is None else form_class(data=data, prefix=ARGS_PREFIX, auto_id=auto_id)


#: Marks a post of the card's "approve and allow" form (its scope field).
GRANT_MARK = "grant-scope"


def offers_grants(run: AgentRun, call: AgentRunToolCall, tool: Tool | None) -> bool:
    """Whether the card offers "approve and allow" for this call: an approval of a tool that takes
    grants, that one approval decides (no rule routed it to several), on the run's own card (not a
    sub-agent's call), not interrupted after its tool started."""
    return (
        call.requires_approval
        and tool is not None
        and tool.takes_grants
        and required_approvals(call, tool) == 1
        and run.parent_run_id is None
        and not call.via_agent_id
        and call.tool_started_at is None
    )


def grant_scopes(run: AgentRun) -> list[tuple[str, str]]:
    """The scopes a grant made from this run's card may take, narrowest first."""
    scopes = []
    if run.thread_id:
        scopes.append((GrantScope.THREAD.value, "this thread"))
    if run.resource_id:
        scopes.append((GrantScope.RESOURCE.value, "this end user"))
    return [*scopes, (GrantScope.EVERYONE.value, "everyone")]


def call_view(
    run: AgentRun,
    call: AgentRunToolCall,
    *,
    agent: Agent | None = None,
    resume_form: ResumeForm | None = None,
    decline_form: DeclineForm | None = None,
    edited_args_form: EditedArgsForm | None = None,
    args_form: ResumeForm | None = None,
    notice: str = "",
    folded: bool = False,
    claim: Any = None,
    grant_form: GrantForm | None = None,
    held_by: str = "",
    may_grant: bool = False,
) -> CallView:
    """A parked call; the forms given are shown with their data and errors, the others empty.
    ``may_grant``: the viewer may make a standing grant here (``policy.may_grant``), so the card offers
    "approve and allow" where the call takes one.

    ``folded`` (an inbox row) builds only the row's summary unless something must be shown at once (a
    form's errors, a notice): the body comes from ``body_url`` when the reviewer opens the row."""
    call_dom = ids.call_block_id(run.run_id, call.tool_call_id)
    tool = find_tool(agent, call.tool_name, call)
    forms_given = notice or any(
        f is not None for f in (resume_form, decline_form, edited_args_form, args_form, grant_form)
    )
    lazy = folded and not forms_given and (call.requires_approval or not _broken_notice(call))
    summary = _summary(call, tool, agent, row_only=lazy)
    if lazy:
        view = CallView(
            call, run.run_id, run.agent_id, call_dom, "", False, 0, None, lazy=True, claim=claim, **summary
        )
        view.held_by = held_by
        return view
    # The forms' field ids: unique on a page with many cards.
    auto_id = f"{call_dom}-%s"
    shown_args = call.args if call.requires_approval else call.suspend_payload
    text = pretty_json(shown_args if shown_args is not None else {})
    if decline_form is not None:
        (reason,) = bound_fields(decline_form)
    else:
        (reason,) = unbound_fields(DeclineForm, auto_id=auto_id)
    edits = _edit_fields(call, tool, auto_id, text, edited_args_form, args_form)
    resume_fields, resume_errors, broken = _resume_fields(call, auto_id, resume_form)
    notice = notice or broken
    grant_fields, grant_errors = _grant_fields(run, call, tool, auto_id, grant_form, may_grant=may_grant)
    grant_open = bool(grant_errors or any(f.errors for f in grant_fields))
    return CallView(
        call=call,
        run_id=run.run_id,
        agent_id=run.agent_id,
        dom_id=call_dom,
        json=reveal_invisible(text),
        json_is_long=is_long(text),
        json_lines=text.count("\n") + 1,
        reason=reason,
        **edits,
        resume_fields=resume_fields,
        resume_errors=resume_errors,
        notice=notice,
        why=why_view(call, tool, agent),
        needs_confirmation=call.requires_approval and needs_confirmation(tool, call.args),
        approvals_required=required_approvals(call, tool),
        separate_duties=tool is not None and tool.separate_duties,
        started_by=run.started_by,
        claim=claim,
        held_by=held_by,
        grant_fields=grant_fields,
        grant_errors=grant_errors,
        grant_open=grant_open,
        **summary,
        # Errors and notices are shown at once: the row opens on them.
        open=bool(
            grant_open
            or edits["edit_open"]
            or notice
            or resume_errors
            or reason.errors
            or any(f.errors for f in resume_fields)
        ),
    )


def call_title(
    tool: Tool | None, tool_name: str, *, args: Any, suspend_payload: Any = None, approval: bool
) -> str:
    """A call's readable title ("Refund $890.00 · A-1044"), the card's and its audit rows': the tool's
    title of the arguments, an input call's question, else the tool's name. Model output: escaped by
    the template."""
    question = "" if approval else _question(suspend_payload)
    title = tool.title_for(args) if tool is not None and approval else ""
    if not title:
        title = question or (tool.title_for(args) if tool is not None else tool_name)
    return reveal_invisible(clean_text(title))


def preview_of(call: AgentRunToolCall) -> Preview | None:
    """The call's preview as shown (texts are the tool's or an external agent's: escaped, and their
    invisible characters revealed, by whoever shows them)."""
    return Preview.from_json(call.context.preview if call.context is not None else None)


def via_name(agent: Agent | None, via_agent_id: str) -> str:
    """The name of the sub-agent, however deep, whose call a supervisor's card (or bulk preview)
    shows (its id when the supervisor has none of that id)."""
    sub = agent.find_sub_agent(via_agent_id) if agent is not None else None
    return sub.name if sub is not None else via_agent_id


def _summary(
    call: AgentRunToolCall, tool: Tool | None, agent: Agent | None, *, row_only: bool = False
) -> dict[str, Any]:
    """What a folded row shows: the title, the arguments' chips, the question, the sub-agent; with
    what its body shows besides (every argument, the preview, a recheck) unless ``row_only``."""
    shown_args = call.args if call.requires_approval else call.suspend_payload
    question = "" if call.requires_approval else _question(call.suspend_payload)
    return {
        "title": call_title(
            tool,
            call.tool_name,
            args=call.args,
            suspend_payload=call.suspend_payload,
            approval=call.requires_approval,
        ),
        # (The row's chips are the risky ones among them: all a folded row builds.)
        "args": arg_views(
            _without_question(shown_args, question),
            tool if call.requires_approval else None,
            json_text=compact_json,
            risky_only=row_only,
        ),
        "question": question,
        "via_agent": via_name(agent, call.via_agent_id) if call.via_agent_id else "",
        "preview": preview_of(call) if call.requires_approval and not row_only else None,
        "tool_version": tool.version if tool is not None else "",
        "expiry_approves": expiry_approves(call, tool),
        **({} if row_only else _recheck(call)),
    }


def _recheck(call: AgentRunToolCall) -> dict[str, Any]:
    """An approval sent back by its recheck: what was approved, by whom, why it could not tell."""
    context = call.context
    recheck = context.recheck if context is not None and call.requires_approval else None
    if recheck is None or context is None:
        return {}
    by, error = recheck.get("by"), recheck.get("error")
    return {
        "approved_preview": Preview.from_json(context.approved_preview) or Preview(),
        "rechecked_by": reveal_invisible(clean_text(by)) if isinstance(by, str) else "",
        "recheck_error": reveal_invisible(clean_text(error)) if isinstance(error, str) else "",
    }


def _edit_fields(
    call: AgentRunToolCall,
    tool: Tool | None,
    auto_id: str,
    text: str,
    edited_args_form: EditedArgsForm | None,
    args_form: ResumeForm | None,
) -> dict[str, Any]:
    """The "edit arguments" forms: the JSON editor's field and the one built from the parameters."""
    edited_args: FieldView | None = None
    args_fields: list[FieldView] = []
    args_errors: tuple[str, ...] = ()
    if edited_args_form is not None:
        # What the reviewer posted, with its errors.
        (edited_args,) = bound_fields(edited_args_form)
    elif call.requires_approval:
        (edited_args,) = unbound_fields(EditedArgsForm, auto_id=auto_id, initial={"edited_args": text})
    if args_form is not None:
        args_fields = bound_fields(args_form)
        args_errors = tuple(str(e) for e in args_form.non_field_errors())
    elif call.requires_approval and isinstance(call.args, Mapping):
        form_class = args_form_class(tool)
        if form_class is not None:
            args_fields = unbound_fields(form_class, auto_id=auto_id, prefix=ARGS_PREFIX, initial=call.args)
    edit_open = bool(
        (edited_args is not None and edited_args.errors) or args_errors or any(f.errors for f in args_fields)
    )
    return {
        "edited_args": edited_args,
        "args_fields": args_fields,
        "args_errors": args_errors,
        "edit_open": edit_open,
    }


def _resume_fields(
    call: AgentRunToolCall, auto_id: str, resume_form: ResumeForm | None
) -> tuple[list[FieldView], tuple[str, ...], str]:
    """The answer's fields and errors (input calls), and what the form says of a schema it cannot show."""
    if resume_form is not None:
        return bound_fields(resume_form), tuple(str(e) for e in resume_form.non_field_errors()), ""
    if call.requires_approval:
        return [], (), ""
    form_class = resume_form_class(call.resume_schema)
    return unbound_fields(form_class, auto_id=auto_id, prefix=RESUME_PREFIX), (), form_class.broken_notice()


def _grant_fields(
    run: AgentRun,
    call: AgentRunToolCall,
    tool: Tool | None,
    auto_id: str,
    grant_form: GrantForm | None,
    *,
    may_grant: bool,
) -> tuple[list[FieldView], tuple[str, ...]]:
    if grant_form is not None:
        return bound_fields(grant_form), tuple(str(e) for e in grant_form.non_field_errors())
    if may_grant and offers_grants(run, call, tool):
        return bound_fields(GrantForm(scopes=grant_scopes(run), auto_id=auto_id)), ()
    return [], ()


def _broken_notice(call: AgentRunToolCall) -> str:
    return resume_form_class(call.resume_schema).broken_notice()


def guarded_call_view(run: AgentRun, call: AgentRunToolCall, **forms: Any) -> CallView:
    """``call_view``, or the call shown escaped without its forms (it can still be declined): one odd
    call never fails the page, nor hides the other runs of an inbox."""
    try:
        return call_view(run, call, **forms)
    except Exception:
        logger.exception("Run %s: call %r cannot be shown", run.run_id, call.tool_call_id)
    call_dom = ids.call_block_id(run.run_id, call.tool_call_id)
    text = f"{NOT_JSON_NOTE} {clean_text(SHORT_REPR.repr(call.args or call.suspend_payload))}"
    (reason,) = unbound_fields(DeclineForm, auto_id=f"{call_dom}-%s")
    notice = "This call cannot be shown properly; it can still be declined."
    return CallView(
        call, run.run_id, run.agent_id, call_dom, text, is_long(text), 1, reason, notice=notice,
        title=clean_text(call.tool_name), open=True,
    )  # fmt: skip


def resume_form_for(
    call: AgentRunToolCall, *, run_id: str, data: Mapping[str, Any] | None = None
) -> ResumeForm:
    """The resume form of one call; field ids are unique on a page with many cards."""
    call_dom = ids.call_block_id(run_id, call.tool_call_id)
    form_class = resume_form_class(call.resume_schema)
    return form_class(data=data, prefix=RESUME_PREFIX, auto_id=f"{call_dom}-%s")
