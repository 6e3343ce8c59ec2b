"""Decision endpoints: approve (optionally with edited arguments), decline with a reason, answer a
``suspend()``-ed call. Each posts to ``approvals.services`` and shows the outcome in place of the card
(htmx) or redirects back with a message (no JavaScript)."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

from agents_runtime import Agent, GrantScope, InvalidGrant
from agents_runtime.vocabulary import DecisionAction, Outcome
from approvals import agents, call_views, cards, dom_ids, queries, services
from approvals.access import Access, AgentAccess
from approvals.forms import DeclineForm, EditedArgsForm, GrantForm
from approvals.schema_forms import ResumeForm
from approvals.services import DECIDE_PERMISSION, DecisionOutcome
from approvals.views.base import (
    HtmxHttpRequest,
    access_of,
    is_partial,
    next_url,
    permission_required,
    visible_agent,
)

#: One run card (the inbox and the run page include the same file).
RUN_CARD = "approvals/partials/run_card.html"


def _next_url(request: HttpRequest, run_id: str) -> str:
    return next_url(request, request.POST.get("next", ""), run_id)


def _agent_for_post(request: HttpRequest, run_id: str) -> Access | AgentAccess:
    """The agent a decision is for (posted by the card, else whichever agent of the user's has the
    run waiting) with the user's right to it; just the user's rights when no agent has it waiting."""
    posted = request.POST.get("agent", "")
    if posted:
        return visible_agent(request, posted)
    access = access_of(request)
    found = queries.run_locate(run_id, agent_ids=access.agent_ids)
    if found is None:
        # No agent has it waiting: let the services say why (lost race or gone).
        return access
    return access.for_agent(found[0].id)


def _agent_id(target: Access | AgentAccess) -> str:
    return target.agent.id if isinstance(target, AgentAccess) else ""


def _record_invalid(
    target: Access | AgentAccess, run_id: str, tool_call_id: str, action: DecisionAction, form: Any
) -> None:
    """Keep the attempt in the audit log (apart from decisions); the card shows the errors as before."""
    errors = "; ".join(
        f"{name}: {' '.join(messages)}" if name != "__all__" else " ".join(messages)
        for name, messages in form.errors.items()
    )
    services.attempt_invalid_record(
        target, run_id=run_id, tool_call_id=tool_call_id, action=action, errors=errors
    )


#: The card's "Decide anyway" box, on a call someone else claimed.
CONFIRM_CLAIMED = "confirm_claimed"


def _claimed_elsewhere(request: HttpRequest, run_id: str, tool_call_id: str) -> str:
    """The warning step before deciding a call someone else is on ("" when none, or confirmed)."""
    if _ticked(request, CONFIRM_CLAIMED):
        return ""
    held = services.claim_warning(run_id, tool_call_id, access_of(request).username)
    if held is None:
        return ""
    return (
        f"{held.username} is on this call (claimed it). Nothing was decided: tick “Decide anyway” "
        "to decide it yourself."
    )


def _rerun_confirmed(request: HttpRequest) -> bool:
    """The card's "Run it again" box, ticked (a call whose tool may have run already)."""
    return _ticked(request, "confirm_rerun")


def _decided(request: HtmxHttpRequest, outcome: DecisionOutcome) -> HttpResponse:
    """The outcome in place of the card (htmx), or back to the page with a message (no JavaScript)."""
    next_url = _next_url(request, outcome.run_id)
    access = access_of(request)
    if outcome.status in {Outcome.LOST_RACE, Outcome.NOT_FOUND} and outcome.run is None:
        # Show the run as it waits now, if it does (another call, or parked again).
        found = queries.run_locate(outcome.run_id, agent_hint=outcome.agent_id, agent_ids=access.agent_ids)
        if found is not None:
            outcome = replace(outcome, run=found[1])
    if is_partial(request):
        agent = _agent(outcome.agent_id)
        agent_name = (agent.name or agent.id) if agent is not None else outcome.agent_id
        card = cards.outcome_card(outcome, agent=agent, agent_name=agent_name, next_url=next_url)
        context = {"card": card, "can_decide": access.can_decide}
        response = render(request, RUN_CARD, context)
        patch_vary_headers(response, ["HX-Request"])
        return response
    level = messages.SUCCESS if outcome.took_effect and outcome.status != Outcome.FAILED else messages.ERROR
    if outcome.status == Outcome.SUSPENDED_AGAIN:
        level = messages.INFO
    what = outcome.tool_name or outcome.tool_call_id
    if outcome.edited:
        what += " (approved with edited arguments)"
    messages.add_message(request, level, f"{what}: {outcome.message}")
    return HttpResponseRedirect(next_url)


def _agent(agent_id: str) -> Agent | None:
    try:
        return agents.get(agent_id)
    except agents.UnknownAgent:
        return None


def _card_with_errors(
    request: HtmxHttpRequest,
    *,
    run_id: str,
    agent_id: str,
    tool_call_id: str,
    resume_form: Any = None,
    decline_form: DeclineForm | None = None,
    edited_args_form: EditedArgsForm | None = None,
    args_form: ResumeForm | None = None,
    grant_form: GrantForm | None = None,
    notice: str = "",
) -> HttpResponse:
    """The card again with the call's form errors: the run is unchanged."""
    access = access_of(request)
    found = queries.run_locate(run_id, agent_hint=agent_id, agent_ids=access.decidable_agent_ids)
    if found is None:
        raise Http404("This run is not waiting any more.")
    agent, run = found
    card = cards.run_card(
        run,
        agent=agent,
        agent_name=agent.name or agent.id,
        next_url=_next_url(request, run_id),
        resume_forms={tool_call_id: resume_form} if resume_form is not None else None,
        decline_forms={tool_call_id: decline_form} if decline_form is not None else None,
        edited_args_forms={tool_call_id: edited_args_form} if edited_args_form is not None else None,
        args_forms={tool_call_id: args_form} if args_form is not None else None,
        grant_forms={tool_call_id: grant_form} if grant_form is not None else None,
        notices={tool_call_id: notice} if notice else None,
        claims=queries.call_claims([run_id]),
    )
    context = {"card": card, "can_decide": access.can_decide}
    if is_partial(request):
        response = render(request, RUN_CARD, context)
        patch_vary_headers(response, ["HX-Request"])
        return response
    # Without JavaScript: the run page with the errors next to the fields.
    context |= {
        "run_id": run_id,
        "agent": agent,
        "decisions": list(queries.run_decisions(run_id)),
        "conversation": cards.conversation(queries.run_conversation(agent, run_id)),
    }
    return render(request, "approvals/run.html", context, status=400)


@require_POST
@login_required
@permission_required(DECIDE_PERMISSION, to="approve tool calls")
def call_approve(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    target = _agent_for_post(request, run_id)
    agent_id = _agent_id(target)
    errors = functools.partial(
        _card_with_errors, request, run_id=run_id, agent_id=agent_id, tool_call_id=tool_call_id
    )
    waiting = _waiting_call(request, run_id, tool_call_id, agent_id)
    tool = call_views.find_tool(waiting.agent, waiting.call.tool_name) if waiting is not None else None
    form: EditedArgsForm | None = None
    args_form: ResumeForm | None = None
    edited_args = None
    if call_views.ARGS_FORM_MARK in request.POST and waiting is not None:
        # "Approve with these arguments" from the form built from the tool's parameters.
        args_form = call_views.args_form_for(
            tool, run_id=run_id, tool_call_id=tool_call_id, data=request.POST
        )
        if args_form is not None:
            if not args_form.is_valid():
                _record_invalid(target, run_id, tool_call_id, DecisionAction.APPROVE, args_form)
                return errors(args_form=args_form)
            edited_args = args_form.resume_data
    elif "edited_args" in request.POST:
        # "Approve with these arguments": the card's JSON form (the advanced view).
        form = EditedArgsForm(request.POST, auto_id=f"{dom_ids.call_block_id(run_id, tool_call_id)}-%s")
        if not form.is_valid():
            _record_invalid(target, run_id, tool_call_id, DecisionAction.APPROVE, form)
            return errors(edited_args_form=form)
        edited_args = form.cleaned_data["edited_args"]
    model_args = waiting.call.args if waiting is not None else None
    if call_views.needs_confirmation(tool, model_args, edited_args) and not _ticked(
        request, call_views.CONFIRM_RISKY
    ):
        # Enforced here, not only by the checkbox's ``required``: nothing is decided unticked.
        return errors(edited_args_form=form, args_form=args_form, notice=call_views.CONFIRM_RISKY_NOTICE)
    claimed = _claimed_elsewhere(request, run_id, tool_call_id)
    if claimed:
        return errors(edited_args_form=form, args_form=args_form, notice=claimed)
    if call_views.GRANT_MARK in request.POST and waiting is not None and isinstance(target, AgentAccess):
        return _approve_and_allow(
            request, target, waiting, run_id=run_id, tool_call_id=tool_call_id, edited_args=edited_args
        )
    outcome = services.decision_approve(
        target,
        run_id=run_id,
        tool_call_id=tool_call_id,
        edited_args=edited_args,
        confirm_rerun=_rerun_confirmed(request),
        # The run as read above: the record's "as shown", without reading it again.
        shown=waiting.run if waiting is not None else None,
    )
    if outcome.status == Outcome.UNCONFIRMED:
        return errors(edited_args_form=form, args_form=args_form, notice=outcome.message)
    if outcome.status == Outcome.REFUSED:
        # This reviewer may not approve (separation of duties, a second vote): nothing changed.
        refused = errors(notice=outcome.message)
        if not is_partial(request):
            refused.status_code = 403
        return refused
    if outcome.refused_args and args_form is not None:
        # Nothing was decided: the runtime's reasons next to the fields they are about.
        args_form.add_field_errors(outcome.field_errors)
        if not args_form.errors:
            args_form.add_error(None, outcome.message)
        return errors(args_form=args_form)
    if form is not None and outcome.refused_args:
        # Nothing was decided: the card again, the runtime's reasons next to what was typed.
        form.add_argument_errors(outcome.field_errors)
        if not form.errors:
            form.add_error("edited_args", outcome.message)
        return errors(edited_args_form=form)
    return _decided(request, outcome)


def _approve_and_allow(
    request: HtmxHttpRequest,
    target: AgentAccess,
    waiting: queries.WaitingCall,
    *,
    run_id: str,
    tool_call_id: str,
    edited_args: dict[str, Any] | None,
) -> HttpResponse:
    """ "Approve and allow": the approval, then a standing grant on the terms posted (both or neither
    when the terms are wrong; the grant only once the approval took effect). Edited arguments are
    refused with it, not dropped."""
    # (A card posted for another agent than the run's has no scopes to offer: nothing is decided.)
    scopes = call_views.grant_scopes(waiting.run) if waiting.agent.id == target.agent.id else []
    form = GrantForm(request.POST, scopes=scopes, auto_id=f"{dom_ids.call_block_id(run_id, tool_call_id)}-%s")
    errors = functools.partial(
        _card_with_errors, request, run_id=run_id, agent_id=target.agent.id, tool_call_id=tool_call_id
    )
    if not form.is_valid():
        _record_invalid(target, run_id, tool_call_id, DecisionAction.APPROVE, form)
        return errors(grant_form=form)
    scope, lasts, uses, condition = form.terms()
    terms = services.GrantTerms(scope=GrantScope(scope), lasts=lasts, max_uses=uses, condition=condition)
    try:
        outcome, _grant = services.approve_and_allow(
            target,
            run_id=run_id,
            tool_call_id=tool_call_id,
            terms=terms,
            confirm_rerun=_rerun_confirmed(request),
            edited_args=edited_args,
        )
    except InvalidGrant as exc:
        form.add_error(None, str(exc))
        return errors(grant_form=form)
    if outcome.status == Outcome.UNCONFIRMED:
        return errors(grant_form=form, notice=outcome.message)
    if outcome.status == Outcome.REFUSED:
        refused = errors(notice=outcome.message)
        if not is_partial(request):
            refused.status_code = 403
        return refused
    return _decided(request, outcome)


def _ticked(request: HttpRequest, name: str) -> bool:
    return request.POST.get(name, "") in {"yes", "on", "true", "1"}


def _waiting_call(
    request: HttpRequest, run_id: str, tool_call_id: str, agent_id: str
) -> queries.WaitingCall | None:
    """The call as it waits now (None: not waiting; the services say why)."""
    agent_ids = access_of(request).decidable_agent_ids
    return queries.waiting_call(run_id, tool_call_id, agent_hint=agent_id or None, agent_ids=agent_ids)


@require_POST
@login_required
@permission_required(DECIDE_PERMISSION, to="decline tool calls")
def call_decline(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    target = _agent_for_post(request, run_id)
    agent_id = _agent_id(target)
    form = DeclineForm(request.POST, auto_id=f"{dom_ids.call_block_id(run_id, tool_call_id)}-%s")
    if not form.is_valid():
        _record_invalid(target, run_id, tool_call_id, DecisionAction.DECLINE, form)
        return _card_with_errors(
            request, run_id=run_id, agent_id=agent_id, tool_call_id=tool_call_id, decline_form=form
        )
    claimed = _claimed_elsewhere(request, run_id, tool_call_id)
    if claimed:
        return _card_with_errors(
            request,
            run_id=run_id,
            agent_id=agent_id,
            tool_call_id=tool_call_id,
            decline_form=form,
            notice=claimed,
        )
    outcome = services.decision_decline(
        target,
        run_id=run_id,
        tool_call_id=tool_call_id,
        reason=form.cleaned_data["reason"],
    )
    return _decided(request, outcome)


@require_POST
@login_required
@permission_required(DECIDE_PERMISSION, to="answer suspended tool calls")
def call_resume(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    posted = request.POST.get("agent") or None
    access = access_of(request)
    # The posted agent is checked first (404 / 403), even when another agent has the run.
    target: Access | AgentAccess = visible_agent(request, posted) if posted else access
    found = queries.run_locate(run_id, agent_hint=posted, agent_ids=access.agent_ids)
    if found is not None:
        target = access.for_agent(found[0].id)
    call = (
        None
        if found is None
        else next((c for c in found[1].tool_calls if c.tool_call_id == tool_call_id), None)
    )
    if found is None or call is None or not isinstance(target, AgentAccess):
        # Stale card: the services tell who decided it (or that it is gone); the runtime validates.
        outcome = services.decision_resume(target, run_id=run_id, tool_call_id=tool_call_id, resume_data=None)
        return _decided(request, outcome)
    agent_id = target.agent.id
    form = cards.resume_form_for(call, run_id=run_id, data=request.POST)
    if not form.is_valid():
        _record_invalid(target, run_id, tool_call_id, DecisionAction.RESUME, form)
        return _card_with_errors(
            request, run_id=run_id, agent_id=agent_id, tool_call_id=tool_call_id, resume_form=form
        )
    claimed = _claimed_elsewhere(request, run_id, tool_call_id)
    if claimed:
        return _card_with_errors(
            request,
            run_id=run_id,
            agent_id=agent_id,
            tool_call_id=tool_call_id,
            resume_form=form,
            notice=claimed,
        )
    outcome = services.decision_resume(
        target,
        run_id=run_id,
        tool_call_id=tool_call_id,
        resume_data=form.resume_data,
        confirm_rerun=_rerun_confirmed(request),
        shown=found[1],
    )
    if outcome.status == Outcome.UNCONFIRMED:
        return _card_with_errors(
            request,
            run_id=run_id,
            agent_id=agent_id,
            tool_call_id=tool_call_id,
            resume_form=form,
            notice=outcome.message,
        )
    if outcome.status == Outcome.INVALID:
        form.add_field_errors(outcome.field_errors)
        if not form.errors:
            form.add_error(None, outcome.message)
        return _card_with_errors(
            request, run_id=run_id, agent_id=agent_id, tool_call_id=tool_call_id, resume_form=form
        )
    return _decided(request, outcome)
