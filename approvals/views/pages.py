"""The dashboard's pages: the overview, an agent's inbox, a run, and the form that starts a run."""

from __future__ import annotations

import functools
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_http_methods

from agents_runtime import Agent, AgentRun
from agents_runtime.store import NO_EFFECT_OUTCOMES, Outcome
from approvals import agents, queries, services, tasks
from approvals.cards import record as run_records
from approvals.cards import run as cards
from approvals.forms.decisions import NewRunForm
from approvals.forms.filters import InboxFilterForm, QueueFilterForm, date_presets, queue_token
from approvals.policy import Access
from approvals.services import DECIDE_PERMISSION
from approvals.views.base import (
    HtmxHttpRequest,
    access_of,
    is_partial,
    next_url,
    permission_required,
    render_page,
    visible_agent,
)

#: The run page's live partials (their element ids): htmx sends the one it refetches as HX-Target.
RUN_DECISIONS_ID = "run-decisions"
#: A sub-agent's inbox lists at most this many of the runs its supervisors decide (read-only).
DELEGATED_SHOWN = 20
#: How a background continuation's result reads on the run page (``running``: none yet).
_BACKGROUND_OUTCOMES = {
    "success": Outcome.COMPLETED,
    "failed": Outcome.FAILED,
    "suspended": Outcome.SUSPENDED_AGAIN,
}


@require_GET
@login_required
def home(request: HtmxHttpRequest) -> HttpResponse:
    """The landing page: the queue for whoever decides more than one agent's calls (everyone else
    keeps the overview; both have their own address)."""
    if len(access_of(request).decision_scope) > 1:
        return queue(request)
    return overview(request)


@require_GET
@login_required
def overview(request: HtmxHttpRequest) -> HttpResponse:
    access = access_of(request)
    rows = queries.overview_rows(agent_ids=access.agent_ids)
    context = {
        "rows": rows,
        "now": timezone.now(),
        "total_pending": sum(r.pending for r in rows),
        "escalated": queries.escalated_count(access),
    }
    return render_page(request, "approvals/overview.html", "agent-table", context)


@require_GET
@login_required
def inbox(request: HtmxHttpRequest, agent_id: str) -> HttpResponse:
    access = visible_agent(request, agent_id)
    agent = access.agent
    form = InboxFilterForm(request.GET)
    context: dict[str, Any] = {"agent": agent, "form": form, "can_decide": access.can_decide}
    if not is_partial(request):
        context["following"] = queries.follows(request.user, agent.id)
    if not form.is_valid():
        # Shown in place of the list; htmx only swaps 2xx responses.
        return render_page(
            request, "approvals/inbox.html", "run-list", context, status=200 if is_partial(request) else 400
        )
    sub_agent = queries.is_sub_agent(agent)
    # A sub-agent's inner runs wait on its supervisor: listed apart, read-only, not counted here.
    # Seen only for calls escalated to the user's groups: only those are listed.
    page = queries.inbox_page(
        agent, **form.filters(), delegated=False if sub_agent else None, escalated_to=access.escalation_scope
    )
    next_url = request.get_full_path()
    name = agent.name or agent.id
    context["page"] = page
    context["cards"] = _cards(request, page.runs, {agent.id: agent}, next_url=next_url, access=access.access)
    if sub_agent and not access.escalated_only:
        shown = {**form.filters(), "page": 1, "per_page": DELEGATED_SHOWN}
        inner = queries.inbox_page(agent, **shown, delegated=True)
        context["delegated_total"] = inner.total
        context["delegated_cards"] = [
            cards.run_card(run, agent=agent, agent_name=name, next_url=next_url) for run in inner.runs
        ]
    return render_page(request, "approvals/inbox.html", "run-list", context)


@require_GET
@login_required
def queue(request: HtmxHttpRequest) -> HttpResponse:
    """Every call the user may decide, across their agents: soonest deadline first, then oldest,
    paged from where the last page ended."""
    access = access_of(request)
    suggested = queries.queue_suggestions(access, waiting=not is_partial(request))
    form = QueueFilterForm(
        request.GET,
        agents=suggested.agents,
        tools=suggested.tools,
        threads=suggested.threads,
        resources=suggested.resources,
    )
    context: dict[str, Any] = {
        "form": form,
        "can_decide": access.can_decide,
        "counts": queries.queue_counts(access),
        "presets": date_presets(request.GET),
    }
    if not form.is_valid():
        # Shown in place of the list; htmx only swaps 2xx responses.
        status = 200 if is_partial(request) else 400
        return render_page(request, "approvals/queue.html", "run-list", context, status=status)
    page = queries.queue_page(access, **form.filters())
    context["page"] = page
    context["cards"] = _cards(
        request, page.runs, page.agents_by_id, next_url=request.get_full_path(), folded=True, access=access
    )
    following = page.next_after
    context["pager"] = {
        "positional": True,
        "after": form.cleaned_data.get("after") is not None,
        "next_after": following and queue_token(following.deadline, following.suspended_at, following.run_id),
    }
    return render_page(request, "approvals/queue.html", "run-list", context)


def _cards(
    request: HtmxHttpRequest,
    runs: list[AgentRun],
    agents_by_id: dict[str, Agent],
    *,
    next_url: str,
    access: Access,
    folded: bool = False,
) -> list[cards.RunCard]:
    """The cards of a list of waiting runs (inbox, queue), their claims and held decisions read once
    for all; the reviewer's own held decisions show as their receipts (folded in the queue)."""
    run_ids = [run.run_id for run in runs]
    claims = queries.call_claims(run_ids)
    held = queries.call_holds(run_ids)
    viewer = request.user.get_username()
    shown = []
    for run in runs:
        agent = agents_by_id.get(run.agent_id)
        name = (agent.name or agent.id) if agent is not None else run.agent_id
        shown.append(
            cards.seen_card(
                run,
                held=held,
                viewer=viewer,
                folded=folded,
                agent=agent,
                agent_name=name,
                next_url=next_url,
                claims=claims,
                access=access,
            )
        )
    return shown


@require_GET
@login_required
def run_detail(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    access = access_of(request)
    # The run as it is now, read once and only when asked: users who see an agent only for calls
    # escalated to them need it before the decisions partial, the others after it.
    stored = functools.cache(functools.partial(queries.run_now, run_id))
    found = queries.waiting_seen(access, stored()) if access.escalated_agent_ids else None
    visible = access.agent_ids if found is None else (*access.agent_ids, found[0].id)
    # Seen only for the calls escalated to the user: those calls' decisions, not the conversation.
    only = (
        {c.tool_call_id for c in found[1].tool_calls}
        if found and found[0].id not in access.agent_ids
        else None
    )
    # Invalid attempts are kept apart from decisions (the audit log shows them on request).
    decisions = [
        d
        for d in queries.run_decisions(run_id)
        if d.agent_id in visible and d.outcome != Outcome.INVALID and (only is None or d.tool_call_id in only)
    ]
    context: dict[str, Any] = {
        "run_id": run_id,
        "decisions": decisions,
        "decision_rows": cards.decision_rows(decisions),
        "can_decide": access.can_decide,
        "conversation": [],
        "card": None,
        "continuing": None,
        "background": None,
        # What the run came to: the last decision that took effect (lost races changed nothing).
        "final": next((d for d in reversed(decisions) if d.outcome not in NO_EFFECT_OUTCOMES), None),
    }
    # The page's live partials refetch themselves; htmx names the one it swaps (HX-Target).
    if is_partial(request) and request.htmx.target == RUN_DECISIONS_ID:
        return render_page(request, "approvals/run.html", "run-decisions", context)
    if not access.escalated_agent_ids:  # (else found above, once)
        found = queries.waiting_seen(access, stored())
    if found is None:
        continuing = queries.continuing(stored(), agent_ids=visible)
        record = None if continuing is not None else queries.run_record(run_id, agent_ids=visible)
        final = context["final"]
        if continuing is not None:
            context["continuing"] = cards.decided_calls(continuing)
        elif record is not None:
            context["record"] = run_records.record_view(record, decisions)
        elif final is not None and final.outcome == Outcome.CONTINUING:
            background = tasks.continuation_result(run_id)
            context["background"] = background
            context["background_outcome"] = (
                _BACKGROUND_OUTCOMES.get(background.status) if background else None
            )
        # A live refetch of a run that vanished (decided outside the dashboard) still gets a 200:
        # htmx would not swap a 404, and the page would keep showing the old card.
        if not decisions and continuing is None and record is None and not is_partial(request):
            raise Http404("No run with this id is waiting, and no decision on it is on record.")
        return render_page(request, "approvals/run.html", "run-state", context)
    agent, run = found
    context["agent"] = agent
    context["can_decide"] = access.for_agent(agent.id).can_decide
    # Opened from an inbox row without JavaScript: its forms return to that inbox, filters kept.
    back = next_url(request, request.GET.get("next") or request.get_full_path(), run_id)
    context["card"] = cards.seen_card(
        run,
        held=queries.call_holds([run_id]),
        viewer=request.user.get_username(),
        agent=agent,
        agent_name=agent.name or agent.id,
        next_url=back,
        expanded=True,
        claims=queries.call_claims([run_id]),
        access=access,
    )
    if only is None:
        context["conversation"] = cards.conversation(queries.run_conversation(agent, run_id))
    return render_page(request, "approvals/run.html", "run-state", context)


@require_GET
@login_required
def call_body(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    """A folded inbox row's body (why the call waits, its arguments, its forms), fetched when the row
    opens. Without htmx, or once the call waits no more: the run page, which says what became of it."""
    run_url = reverse("approvals:run", args=[run_id])
    if not is_partial(request):
        return redirect(run_url)
    access = access_of(request)
    found = queries.run_seen(access, run_id)
    call = next((c for c in found[1].tool_calls if c.tool_call_id == tool_call_id), None) if found else None
    if found is not None and call is not None and found[0].id not in access.agent_ids:
        # Seen only for calls escalated to the user's groups: only those.
        call = call if call.escalated_to in access.groups else None
    if found is None or call is None:
        # 200: htmx swaps it in place of "Loading…"; the row itself goes with the list's live refetch.
        response = render(request, "approvals/partials/run_card.html#call-gone", {"run_url": run_url})
    else:
        agent, run = found
        card = cards.run_card(
            run,
            agent=agent,
            agent_name=agent.name or agent.id,
            next_url=next_url(request, request.GET.get("next", ""), run_id),
            expanded=True,
            claims=queries.call_claims([run_id]),
            held={key: h.username for key, h in queries.call_holds([run_id]).items()},
            access=access,
        )
        cv = next(cv for cv in card.calls if cv.call.tool_call_id == tool_call_id)
        context = {"card": card, "cv": cv, "can_decide": access.for_agent(agent.id).can_decide}
        response = render(request, "approvals/partials/run_card.html#call-body", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(DECIDE_PERMISSION, to="start runs")
def run_new(request: HtmxHttpRequest) -> HttpResponse:
    visible = access_of(request).agent_ids
    choices = [(a.id, a.name or a.id) for a in agents.all_agents() if a.id in visible]
    form = NewRunForm(request.POST or None, agents=choices)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        result = services.run_start(
            visible_agent(request, data["agent"]),
            prompt=data["prompt"],
            thread_id=data["thread"] or None,
            resource_id=data["resource"] or None,
        )
        if result.status == "suspended":
            messages.success(request, f"Run {result.run_id} started and is waiting for a decision.")
            return redirect("approvals:run", run_id=result.run_id)
        if result.status == "success":
            messages.success(request, f"Run {result.run_id} completed: {result.text or '(no text)'}")
        else:
            messages.error(request, f"Run {result.run_id} failed: {result.error or 'unknown error'}")
        return redirect("approvals:run_new")
    status = 400 if request.method == "POST" else 200
    return render(request, "approvals/new_run.html", {"form": form}, status=status)
