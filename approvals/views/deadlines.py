"""Extending a call's deadline from its card (the form under "Extend deadline…")."""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpResponse

from approvals import ids
from approvals.forms.decisions import ExtendDeadlineForm
from approvals.services.deadlines import deadline_extend
from approvals.views.base import CallCard, HtmxHttpRequest, deciding, visible_agent


@deciding(to="extend deadlines")
def call_extend_deadline(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    target = visible_agent(request, request.POST.get("agent", ""))
    form = ExtendDeadlineForm(request.POST, auto_id=f"{ids.call_block_id(run_id, tool_call_id)}-x-%s")
    if not form.is_valid():
        problems = "; ".join(" ".join(map(str, errors)) for errors in form.errors.values())
        notice = f"The deadline was not extended: {problems}"
    else:
        notice = deadline_extend(
            target,
            run_id=run_id,
            tool_call_id=tool_call_id,
            by=timedelta(minutes=form.cleaned_data["by_minutes"]),
            reason=form.cleaned_data["reason"],
        ).message
    # The card again, as it waits now, with what happened on the call.
    return CallCard(request, run_id, tool_call_id, target.agent.id).again(notice=notice)
