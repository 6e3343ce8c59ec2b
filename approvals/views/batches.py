"""Bulk decisions: prepare a batch from the inbox, preview it, start it, watch it; follow an agent."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agents_runtime import Agent
from approvals import agents, queries, services, tasks
from approvals.cards import batch as batch_view
from approvals.forms.decisions import BatchStartForm, posted_selection
from approvals.forms.filters import InboxFilterForm
from approvals.models import Batch, FollowedAgent
from approvals.views.base import (
    HtmxHttpRequest,
    access_of,
    deciding,
    is_partial,
    render_page,
    visible_agent,
)


@deciding(to="decide calls in bulk")
def batch_new(request: HtmxHttpRequest, agent_id: str) -> HttpResponse:
    """The inbox's bulk form: the selected calls, or every call matching the inbox's filters
    (the filters come in the query string, as on the inbox)."""
    access = visible_agent(request, agent_id)
    inbox_url = reverse("approvals:inbox", args=[agent_id])
    query = request.GET.urlencode()
    back = f"{inbox_url}?{query}" if query else inbox_url
    if request.POST.get("scope") == "matching":
        form = InboxFilterForm(request.GET)
        if not form.is_valid():
            messages.error(request, "These filters are not valid; nothing was prepared.")
            return redirect(back)
        query_dict = {k: str(v) for k, v in request.GET.items() if k not in {"page", "per_page"}}
        batch = services.batch_prepare(access, filters=form.filters(), query=query_dict)
    else:
        selection = posted_selection(request.POST.getlist("call"))
        if not selection:
            messages.error(request, "Select at least one call (its checkbox, or x on the keyboard).")
            return redirect(back)
        batch = services.batch_prepare(access, selection=selection)
    return redirect("approvals:batch", batch_id=batch.pk)


def _visible_batch(request: HttpRequest, batch_id: int) -> Batch:
    """A batch its preparer, or an auditor of its agent, may look at (404 for anyone else)."""
    batch = get_object_or_404(Batch, pk=batch_id)
    access = access_of(request)
    mine = batch.user_id == request.user.pk
    if not (mine or (access.can_audit and batch.agent_id in access.agent_ids)):
        raise Http404("No such batch.")
    return batch


@require_GET
@login_required
def batch_detail(request: HtmxHttpRequest, batch_id: int) -> HttpResponse:
    batch = _visible_batch(request, batch_id)
    agent: Agent | None
    try:
        agent = agents.get(batch.agent_id)
        agent_name = agent.name or agent.id
    except agents.UnknownAgent:
        agent, agent_name = None, batch.agent_id
    may_start = batch.user_id == request.user.pk and access_of(request).can_decide
    view = batch_view.batch_view(batch, agent)
    rules: list[batch_view.RuleGroup] = []
    if may_start and batch.state == Batch.State.DRAFT and agent is not None:
        predictions = services.batch_predictions(access_of(request).for_agent(agent.id), batch)
        rules = batch_view.rule_groups(predictions, agent)
    context: dict[str, Any] = {
        "batch": batch,
        "view": view,
        "agent_name": agent_name,
        "form": BatchStartForm(),
        "may_start": may_start,
        "rules": rules,
        "money_total": batch_view.money_total(view.taken, agent),
    }
    return render_page(request, "approvals/batch.html", "batch-progress", context)


@deciding(to="decide calls in bulk")
def batch_start(request: HtmxHttpRequest, batch_id: int) -> HttpResponse:
    batch = _visible_batch(request, batch_id)
    form = BatchStartForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(str(e) for errors in form.errors.values() for e in errors))
    elif services.batch_start(
        access_of(request), batch, action=form.cleaned_data["action"], reason=form.cleaned_data["reason"]
    ):
        tasks.enqueue_batch(batch.pk)
    else:
        messages.info(request, "This batch was started already.")
    return HttpResponseRedirect(reverse("approvals:batch", args=[batch.pk]))


@require_POST
@login_required
def agent_follow(request: HtmxHttpRequest, agent_id: str) -> HttpResponse:
    """Follow (or, with ``follow=no``, stop following) an agent: notifications of its new calls."""
    access = visible_agent(request, agent_id)
    user = access.user
    if request.POST.get("follow") == "no":
        FollowedAgent.objects.filter(user=user, agent_id=access.agent.id).delete()
    else:
        FollowedAgent.objects.get_or_create(user=user, agent_id=access.agent.id)
    following = queries.follows(user, access.agent.id)
    if not is_partial(request):
        return redirect("approvals:inbox", agent_id=access.agent.id)
    context = {"agent": access.agent, "following": following}
    return render_page(request, "approvals/inbox.html", "follow-button", context)
