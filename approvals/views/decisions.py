"""Decision endpoints: approve (optionally with edited arguments, or "and allow"), decline with a
reason, answer a ``suspend()``-ed call. Each binds what was posted, hands one ``DecisionRequest`` to
the one door (``services.decide``) and shows the receipt in place of the card (htmx) or redirects
back with a message (no JavaScript). No rule is checked here: the door does, whatever the entry."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.cache import patch_vary_headers

from agents_runtime import Agent, DecisionRequest, GrantScope, InvalidGrant, Origin
from agents_runtime.store import DecisionAction, Outcome
from approvals import agents, queries, services
from approvals.cards import call as call_views
from approvals.cards import run as cards
from approvals.forms.decisions import (
    DeclineForm,
    EditedArgsForm,
    GrantForm,
    posted_confirmations,
    posted_fingerprint,
    posted_shown_at,
)
from approvals.forms.schema import ResumeForm
from approvals.policy import Access, AgentAccess
from approvals.services import DecisionOutcome
from approvals.views.base import (
    RUN_CARD,
    CallCard,
    HtmxHttpRequest,
    access_of,
    deciding,
    is_partial,
    next_url,
    visible_agent,
)


@deciding(to="approve tool calls")
def call_approve(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    target = _agent_for_post(request, run_id)
    card = CallCard(request, run_id, tool_call_id, _agent_id(target))
    edits = _bound_edits(request, card, target)
    if edits is not None and not edits.is_valid():
        _record_invalid(target, card, DecisionAction.APPROVE, edits)
        return card.again(edits)
    edited = _edited_args(edits)
    if call_views.GRANT_MARK in request.POST and isinstance(target, AgentAccess):
        return _approve_and_allow(request, target, card, edited_args=edited)
    outcome = services.decide(target, _request(request, card, DecisionAction.APPROVE, edited_args=edited))
    return _answer(request, card, outcome, edits)


@deciding(to="decline tool calls")
def call_decline(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    target = _agent_for_post(request, run_id)
    card = CallCard(request, run_id, tool_call_id, _agent_id(target))
    form = DeclineForm(request.POST, auto_id=card.auto_id)
    if not form.is_valid():
        _record_invalid(target, card, DecisionAction.DECLINE, form)
        return card.again(form)
    decision = _request(request, card, DecisionAction.DECLINE, reason=form.cleaned_data["reason"])
    return _answer(request, card, services.decide(target, decision), form)


@deciding(to="answer suspended tool calls")
def call_resume(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    target = _agent_for_post(request, run_id)
    card = CallCard(request, run_id, tool_call_id, _agent_id(target))
    waiting = card.waiting()
    if waiting is None:
        # Stale card: the door says who decided it (or that it is gone).
        return _decided(request, services.decide(target, _request(request, card, DecisionAction.RESUME)))
    form = cards.resume_form_for(waiting.call, run_id=run_id, data=request.POST)
    if not form.is_valid():
        _record_invalid(target, card, DecisionAction.RESUME, form)
        return card.again(form)
    decision = _request(request, card, DecisionAction.RESUME, resume_data=form.resume_data)
    return _answer(request, card, services.decide(target, decision), form)


@deciding(to="undo decisions")
def call_undo(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    """Undo one's decision held for its undo window: the card back as the call waits (nothing was
    decided), or, too late, what was taken."""
    target = visible_agent(request, request.POST.get("agent", ""))
    undo = services.hold_undo(target, run_id=run_id, tool_call_id=tool_call_id)
    card = CallCard(request, run_id, tool_call_id, target.agent.id)
    if not is_partial(request):
        messages.add_message(request, messages.SUCCESS if undo.undone else messages.ERROR, undo.message)
        return HttpResponseRedirect(next_url(request, request.POST.get("next", ""), run_id))
    if undo.undone or card.waiting() is not None:
        return card.again(notice="" if undo.undone else undo.message, expanded=True)
    visible = list(access_of(request).agent_ids)
    taken = services.recorded_outcome(run_id, tool_call_id, visible=visible, notice=undo.message)
    if taken is None:
        return card.again(notice=undo.message)
    return _decided(request, taken)


# -- what a post carries ---------------------------------------------------------------------------


def _bound_edits(request: HttpRequest, card: CallCard, target: Access | AgentAccess) -> Any:
    """The arguments the reviewer approves instead of the model's, as posted: the form built from the
    tool's parameters, or the JSON editor's text; None for a plain approval."""
    if call_views.ARGS_FORM_MARK in request.POST:
        waiting = card.waiting()
        tool = (
            call_views.find_tool(waiting.agent, waiting.call.tool_name, waiting.call)
            if waiting is not None
            else None
        )
        return call_views.args_form_for(
            tool, run_id=card.run_id, tool_call_id=card.tool_call_id, data=request.POST
        )
    if "edited_args" in request.POST:
        return EditedArgsForm(request.POST, auto_id=card.auto_id)
    return None


def _edited_args(form: Any) -> dict[str, Any] | None:
    if isinstance(form, ResumeForm):
        return dict(form.resume_data)
    if isinstance(form, EditedArgsForm):
        edited: dict[str, Any] = form.cleaned_data["edited_args"]
        return edited
    return None


def _request(request: HttpRequest, card: CallCard, action: DecisionAction, **carried: Any) -> DecisionRequest:
    """The decision as posted: what it carries, what the card showed, what the reviewer confirmed."""
    return DecisionRequest(
        card.run_id,
        card.tool_call_id,
        action,
        origin=Origin.DASHBOARD,
        seen=posted_fingerprint(request.POST),
        shown_at=posted_shown_at(request.POST),
        confirmations=posted_confirmations(request.POST),
        **carried,
    )


# -- what the receipt says -------------------------------------------------------------------------


def _answer(request: HtmxHttpRequest, card: CallCard, outcome: DecisionOutcome, form: Any) -> HttpResponse:
    """The receipt shown: a refusal on the card as it was (with what was typed), else the outcome."""
    if outcome.status == Outcome.UNCONFIRMED:
        return card.again(form, notice=outcome.message)
    if outcome.status == Outcome.REFUSED:
        # This reviewer may not take this decision (separation of duties, a second vote, a stale card).
        return card.again(notice=outcome.message, status=403)
    if outcome.status == Outcome.INVALID and _about(form, outcome):
        # Nothing was decided: the runtime's reasons next to what was typed.
        if isinstance(form, EditedArgsForm):
            form.add_argument_errors(outcome.field_errors)
            if not form.errors:
                form.add_error("edited_args", outcome.message)
        else:
            form.add_field_errors(outcome.field_errors)
            if not form.errors:
                form.add_error(None, outcome.message)
        return card.again(form)
    return _decided(request, outcome)


def _about(form: Any, outcome: DecisionOutcome) -> bool:
    """Whether the runtime's refusal of the data is about what ``form`` holds (edited arguments are
    refused as such; an answer's form holds the answer)."""
    if isinstance(form, EditedArgsForm) or (
        isinstance(form, ResumeForm) and form.prefix == call_views.ARGS_PREFIX
    ):
        return outcome.refused_args
    return isinstance(form, ResumeForm)


def _decided(request: HtmxHttpRequest, outcome: DecisionOutcome) -> HttpResponse:
    """The outcome in place of the card (htmx), or back to the page with a message (no JavaScript)."""
    back = next_url(request, request.POST.get("next", ""), outcome.run_id)
    access = access_of(request)
    if outcome.status in {Outcome.LOST_RACE, Outcome.NOT_FOUND} and outcome.run is None:
        # Show the run as it waits now, if it does (another call, or parked again).
        found = queries.run_locate(outcome.run_id, agent_ids=access.agent_ids)
        if found is not None:
            outcome = replace(outcome, run=found[1])
    if is_partial(request):
        agent = _agent(outcome.agent_id)
        agent_name = (agent.name or agent.id) if agent is not None else outcome.agent_id
        # The queue's list asks for the outcome folded (hx-headers: every form in it sends this).
        folded = request.headers.get("CS-List") == "queue"
        card = cards.outcome_card(
            outcome, agent=agent, agent_name=agent_name, next_url=back, folded=folded, access=access
        )
        response = render(request, RUN_CARD, {"card": card, "can_decide": access.can_decide})
        patch_vary_headers(response, ["HX-Request"])
        return response
    level = messages.SUCCESS if outcome.took_effect and outcome.status != Outcome.FAILED else messages.ERROR
    if outcome.status in {Outcome.SUSPENDED_AGAIN, Outcome.HELD}:
        level = messages.INFO
    what = outcome.tool_name or outcome.tool_call_id
    if outcome.edited:
        what += " (approved with edited arguments)"
    messages.add_message(request, level, f"{what}: {outcome.message}")
    return HttpResponseRedirect(back)


# -- "approve and allow" -----------------------------------------------------------------------------


def _approve_and_allow(
    request: HtmxHttpRequest, target: AgentAccess, card: CallCard, *, edited_args: dict[str, Any] | None
) -> HttpResponse:
    """The approval, then a standing grant on the terms posted (both or neither when the terms are
    wrong; the grant only once the approval took effect). Edited arguments are refused with it."""
    waiting = card.waiting()
    # (A card posted for another agent than the run's has no scopes to offer: nothing is decided.)
    ours = waiting is not None and waiting.agent.id == target.agent.id
    scopes = call_views.grant_scopes(waiting.run) if ours and waiting is not None else []
    form = GrantForm(request.POST, scopes=scopes, auto_id=card.auto_id)
    if not form.is_valid():
        _record_invalid(target, card, DecisionAction.APPROVE, form)
        return card.again(form)
    scope, lasts, uses, condition = form.terms()
    terms = services.GrantTerms(
        scope=GrantScope(scope),
        lasts=lasts,
        max_uses=uses,
        condition=condition,
        covers_risky=form.covers_risky,
    )
    decision = _request(request, card, DecisionAction.APPROVE, edited_args=edited_args)
    try:
        outcome, _grant = services.approve_and_allow(target, decision, terms=terms)
    except InvalidGrant as exc:
        form.add_error(None, str(exc))
        return card.again(form)
    return _answer(request, card, outcome, form)


# -- helpers ---------------------------------------------------------------------------------------


def _agent_for_post(request: HttpRequest, run_id: str) -> Access | AgentAccess:
    """The agent a decision is for (posted by the card, else whichever agent of the user's has the
    run waiting) with the user's right to it; just the user's rights when no agent has it waiting."""
    posted = request.POST.get("agent", "")
    if posted:
        return visible_agent(request, posted)
    access = access_of(request)
    found = queries.run_seen(access, run_id)
    if found is None:
        # No agent has it waiting: the door says why (lost race or gone).
        return access
    return access.for_agent(found[0].id)


def _agent_id(target: Access | AgentAccess) -> str:
    return target.agent.id if isinstance(target, AgentAccess) else ""


def _agent(agent_id: str) -> Agent | None:
    try:
        return agents.get(agent_id)
    except agents.UnknownAgent:
        return None


def _record_invalid(target: Access | AgentAccess, card: CallCard, action: DecisionAction, form: Any) -> None:
    """Keep the attempt in the audit log (apart from decisions); the card shows the errors as before."""
    errors = "; ".join(
        f"{name}: {' '.join(messages)}" if name != "__all__" else " ".join(messages)
        for name, messages in form.errors.items()
    )
    services.attempt_invalid_record(
        target, run_id=card.run_id, tool_call_id=card.tool_call_id, action=action, errors=errors
    )
