"""Claims on a call ("I'm on it", renew, release): the card again (htmx) or back with a message."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

from approvals import cards, queries, services
from approvals.services import DECIDE_PERMISSION
from approvals.views.base import HtmxHttpRequest, access_of, is_partial, permission_required, visible_agent
from approvals.views.decisions import RUN_CARD, _next_url


@require_POST
@login_required
@permission_required(DECIDE_PERMISSION, to="claim tool calls")
def call_claim(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    target = visible_agent(request, request.POST.get("agent", ""))
    refused = ""
    try:
        if request.POST.get("op") == "release":
            change = services.release_claim(target, run_id=run_id, tool_call_id=tool_call_id)
        else:
            change = services.claim_call(target, run_id=run_id, tool_call_id=tool_call_id)
        message = change.message
    except services.ClaimRefused as exc:
        refused = message = str(exc)
    next_url = _next_url(request, run_id)
    if not is_partial(request):
        messages.add_message(request, messages.ERROR if refused else messages.SUCCESS, message)
        return HttpResponseRedirect(next_url)
    access = access_of(request)
    found = queries.run_locate(run_id, agent_hint=target.agent.id, agent_ids=access.agent_ids)
    if found is None:
        raise Http404("This run is not waiting any more.")
    agent, run = found
    card = cards.run_card(
        run,
        agent=agent,
        agent_name=agent.name or agent.id,
        next_url=next_url,
        notices={tool_call_id: refused} if refused else None,
        claims=queries.call_claims([run_id]),
        expanded=True,
    )
    response = render(request, RUN_CARD, {"card": card, "can_decide": access.can_decide})
    patch_vary_headers(response, ["HX-Request"])
    return response
