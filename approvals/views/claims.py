"""Claims on a call ("I'm on it", renew, release): the card again (htmx) or back with a message."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse, HttpResponseRedirect

from approvals import services
from approvals.views.base import (
    CallCard,
    HtmxHttpRequest,
    deciding,
    is_partial,
    next_url,
    visible_agent,
)


@deciding(to="claim tool calls")
def call_claim(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    target = visible_agent(request, request.POST.get("agent", ""))
    op = request.POST.get("op", "claim")  # (the card's buttons say which; a bare post claims)
    refused = ""
    try:
        if op == "release":
            change = services.release_claim(target, run_id=run_id, tool_call_id=tool_call_id)
        elif op == "claim":
            change = services.claim_call(target, run_id=run_id, tool_call_id=tool_call_id)
        else:
            raise services.ClaimRefused("Nothing changed: a claim is made (claim) or given up (release).")
        message = change.message
    except services.ClaimRefused as exc:
        refused = message = str(exc)
    if not is_partial(request):
        messages.add_message(request, messages.ERROR if refused else messages.SUCCESS, message)
        return HttpResponseRedirect(next_url(request, request.POST.get("next", ""), run_id))
    return CallCard(request, run_id, tool_call_id, target.agent.id).again(notice=refused, expanded=True)
