"""The dashboard's pages and decision endpoints.

Plain functions, a method guard each, thin bodies: reads come from ``approvals.queries``, changes go
through ``approvals.services``. An htmx request gets the named partial it swaps in; the same URL
without htmx gets the whole page (decisions: a redirect back with a message), so everything works
without JavaScript. htmx 2 does not swap 4xx responses, so errors meant to be shown in place are
answered with 200 to htmx and with 400 otherwise.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails

from agents_runtime import Agent
from approvals import cards, dom_ids, queries, services, tasks
from approvals.access import visible_agent_ids
from approvals.forms import AuditFilterForm, DeclineForm, EditedArgsForm, InboxFilterForm, NewRunForm
from approvals.models.audit import AuditEntry, AuditOutcome
from approvals.registry import get_runtime
from approvals.services import AUDIT_PERMISSION, DECIDE_PERMISSION, DecisionOutcome

AUDIT_PER_PAGE = 50
#: The run page's live partials (their element ids): htmx sends the one it refetches as HX-Target.
RUN_DECISIONS_ID = "run-decisions"
NO_EFFECT = {AuditOutcome.LOST_RACE, AuditOutcome.INVALID}


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def permission_required(permission: str, *, to: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Like Django's, but the 403 page says which permission is missing (and never redirects)."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            services.require_permission(request.user, permission, to=to)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def _partial(request: HtmxHttpRequest) -> bool:
    """An htmx request that swaps a fragment (a history restore needs the whole page)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def _render(
    request: HtmxHttpRequest,
    page: str,
    partial: str,
    context: dict[str, Any],
    *,
    status: int = 200,
) -> HttpResponse:
    template = f"{page}#{partial}" if _partial(request) else page
    response = render(request, template, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _agent_or_404(agent_id: str) -> Agent:
    try:
        return services.agent_get(agent_id)
    except services.UnknownAgent:
        raise Http404(f"No agent “{agent_id}” is registered.") from None


def _visible_agent(request: HttpRequest, agent_id: str) -> Agent:
    agent = _agent_or_404(agent_id)
    services.require_agent_access(request.user, agent.id)
    return agent


def _can_decide(request: HttpRequest) -> bool:
    return request.user.has_perm(DECIDE_PERMISSION)


# --- Pages ------------------------------------------------------------------------------------------


@require_GET
@login_required
def overview(request: HtmxHttpRequest) -> HttpResponse:
    rows = queries.overview_rows(agent_ids=visible_agent_ids(request.user))
    context = {"rows": rows, "now": timezone.now(), "total_pending": sum(r.pending for r in rows)}
    return _render(request, "approvals/overview.html", "agent-table", context)


@require_GET
@login_required
def inbox(request: HtmxHttpRequest, agent_id: str) -> HttpResponse:
    agent = _visible_agent(request, agent_id)
    form = InboxFilterForm(request.GET)
    context: dict[str, Any] = {"agent": agent, "form": form, "can_decide": _can_decide(request)}
    if not form.is_valid():
        # Shown in place of the list; htmx only swaps 2xx responses.
        return _render(
            request, "approvals/inbox.html", "run-list", context, status=200 if _partial(request) else 400
        )
    page = queries.inbox_page(agent, **form.filters())
    next_url = request.get_full_path()
    context["page"] = page
    context["cards"] = [
        cards.run_card(run, agent_name=agent.name or agent.id, next_url=next_url) for run in page.runs
    ]
    return _render(request, "approvals/inbox.html", "run-list", context)


@require_GET
@login_required
def run_detail(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    visible = visible_agent_ids(request.user)
    decisions = [d for d in queries.run_decisions(run_id) if d.agent_id in visible]
    context: dict[str, Any] = {
        "run_id": run_id,
        "decisions": decisions,
        "can_decide": _can_decide(request),
        "conversation": [],
        "card": None,
        "continuing": None,
        "background": None,
        # What the run came to: the last decision that took effect (lost races changed nothing).
        "final": next((d for d in reversed(decisions) if d.outcome not in NO_EFFECT), None),
    }
    # The page's live partials refetch themselves; htmx names the one it swaps (HX-Target).
    if _partial(request) and request.htmx.target == RUN_DECISIONS_ID:
        return _render(request, "approvals/run.html", "run-decisions", context)
    found = queries.run_locate(run_id, agent_hint=request.GET.get("agent"), agent_ids=visible)
    if found is None:
        continuing = queries.run_continuing(run_id, agent_ids=visible)
        final = context["final"]
        if continuing is not None:
            context["continuing"] = cards.decided_calls(continuing)
        elif final is not None and final.outcome == AuditOutcome.CONTINUING:
            context["background"] = tasks.continuation_result(run_id)
        # A live refetch of a run that vanished (decided outside the dashboard) still gets a 200:
        # htmx would not swap a 404, and the page would keep showing the old card.
        if not decisions and continuing is None and not _partial(request):
            raise Http404("No run with this id is waiting, and no decision on it is on record.")
        return _render(request, "approvals/run.html", "run-state", context)
    agent, run = found
    context["agent"] = agent
    context["card"] = cards.run_card(run, agent_name=agent.name or agent.id, next_url=request.get_full_path())
    context["conversation"] = cards.conversation(queries.run_conversation(agent, run_id))
    return _render(request, "approvals/run.html", "run-state", context)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(DECIDE_PERMISSION, to="start runs")
def run_new(request: HtmxHttpRequest) -> HttpResponse:
    visible = visible_agent_ids(request.user)
    agents = [(a.id, a.name or a.id) for a in get_runtime().agents if a.id in visible]
    form = NewRunForm(request.POST or None, agents=agents)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        result = services.run_start(
            user=request.user,
            agent_id=data["agent"],
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


@require_GET
@login_required
@permission_required(AUDIT_PERMISSION, to="read the audit log")
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET)
    visible = visible_agent_ids(request.user)
    context: dict[str, Any] = {"form": form, "agents": visible}
    if not form.is_valid():
        return _render(
            request, "approvals/audit.html", "audit-table", context, status=200 if _partial(request) else 400
        )
    # Only the agents this user may see: an admin designated for one agent audits that agent.
    entries = AuditEntry.objects.filter(agent_id__in=visible).matching(**form.filters()).select_related(None)
    paginator = Paginator(entries, AUDIT_PER_PAGE)
    context["page_obj"] = paginator.get_page(form.cleaned_data.get("page") or 1)
    return _render(request, "approvals/audit.html", "audit-table", context)


# Characters that make a spreadsheet treat a cell as a formula: model output must stay text.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return f"'{text}" if text.startswith(_FORMULA_START) else text


class _Echo:
    def write(self, value: str) -> str:
        return value


AUDIT_CSV_COLUMNS = [
    "created_at",
    "username",
    "agent_id",
    "run_id",
    "thread_id",
    "resource_id",
    "tool_call_id",
    "tool_name",
    "args",
    "suspend_payload",
    "action",
    "reason",
    "resume_data",
    "edited_args",
    "outcome",
    "outcome_detail",
]


@require_GET
@login_required
@permission_required(AUDIT_PERMISSION, to="export the audit log")
def audit_export(request: HttpRequest) -> HttpResponseBase:
    form = AuditFilterForm(request.GET)
    if not form.is_valid():
        return render(request, "approvals/audit.html", {"form": form}, status=400)
    visible = visible_agent_ids(request.user)
    entries = (
        AuditEntry.objects.filter(agent_id__in=visible)
        .matching(**form.filters())
        .order_by("created_at", "id")
    )

    def rows() -> Iterator[str]:
        writer = csv.writer(_Echo())
        yield writer.writerow(AUDIT_CSV_COLUMNS)
        for entry in entries.iterator(chunk_size=500):
            values = [
                entry.created_at.isoformat(),
                entry.username,
                entry.agent_id,
                entry.run_id,
                entry.thread_id,
                entry.resource_id,
                entry.tool_call_id,
                entry.tool_name,
                cards.compact_json(entry.args),
                cards.compact_json(entry.suspend_payload),
                entry.action,
                entry.reason,
                cards.compact_json(entry.resume_data),
                cards.compact_json(entry.edited_args),
                entry.outcome,
                entry.outcome_detail,
            ]
            yield writer.writerow([_csv_cell(v) for v in values])

    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    return StreamingHttpResponse(
        rows(),
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="countersign-audit-{stamp}.csv"'},
    )


# --- Decisions --------------------------------------------------------------------------------------


def _next_url(request: HttpRequest, run_id: str) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("approvals:run", args=[run_id])


def _agent_for_post(request: HttpRequest, run_id: str) -> str:
    """The agent a decision is for: posted by the card, else whichever agent has the run waiting."""
    posted = request.POST.get("agent", "")
    if posted:
        return _visible_agent(request, posted).id
    found = queries.run_locate(run_id, agent_ids=visible_agent_ids(request.user))
    if found is None:
        # No agent has it waiting: let the services say why (lost race or gone).
        return ""
    return found[0].id


def _decided(request: HtmxHttpRequest, outcome: DecisionOutcome) -> HttpResponse:
    """The outcome in place of the card (htmx), or back to the page with a message (no JavaScript)."""
    next_url = _next_url(request, outcome.run_id)
    if outcome.status in {"lost_race", "not_found"} and outcome.run is None:
        # Show the run as it waits now, if it does (another call, or parked again).
        found = queries.run_locate(
            outcome.run_id, agent_hint=outcome.agent_id, agent_ids=visible_agent_ids(request.user)
        )
        if found is not None:
            outcome = replace(outcome, run=found[1])
    if _partial(request):
        agent_name = _agent_name(outcome.agent_id)
        card = cards.outcome_card(outcome, agent_name=agent_name, next_url=next_url)
        response = render(request, "approvals/run.html#run-card", {"card": card, "can_decide": True})
        patch_vary_headers(response, ["HX-Request"])
        return response
    level = messages.SUCCESS if outcome.took_effect and outcome.status != "failed" else messages.ERROR
    if outcome.status == "suspended_again":
        level = messages.INFO
    what = outcome.tool_name or outcome.tool_call_id
    if outcome.edited:
        what += " (approved with edited arguments)"
    messages.add_message(request, level, f"{what}: {outcome.message}")
    return HttpResponseRedirect(next_url)


def _agent_name(agent_id: str) -> str:
    try:
        agent = services.agent_get(agent_id)
    except services.UnknownAgent:
        return agent_id
    return agent.name or agent.id


def _card_with_errors(
    request: HtmxHttpRequest,
    *,
    run_id: str,
    agent_id: str,
    tool_call_id: str,
    resume_form: Any = None,
    decline_form: DeclineForm | None = None,
    edited_args_form: EditedArgsForm | None = None,
    notice: str = "",
) -> HttpResponse:
    """The card again with the call's form errors: the run is unchanged."""
    found = queries.run_locate(run_id, agent_hint=agent_id, agent_ids=visible_agent_ids(request.user))
    if found is None:
        raise Http404("This run is not waiting any more.")
    agent, run = found
    card = cards.run_card(
        run,
        agent_name=agent.name or agent.id,
        next_url=_next_url(request, run_id),
        resume_forms={tool_call_id: resume_form} if resume_form is not None else None,
        decline_forms={tool_call_id: decline_form} if decline_form is not None else None,
        edited_args_forms={tool_call_id: edited_args_form} if edited_args_form is not None else None,
        notices={tool_call_id: notice} if notice else None,
    )
    context = {"card": card, "can_decide": True}
    if _partial(request):
        response = render(request, "approvals/run.html#run-card", context)
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
    agent_id = _agent_for_post(request, run_id)
    form: EditedArgsForm | None = None
    edited_args = None
    if "edited_args" in request.POST:
        # "Approve with these arguments": the card's other form.
        form = EditedArgsForm(request.POST, auto_id=f"{dom_ids.call_block_id(run_id, tool_call_id)}-%s")
        if not form.is_valid():
            return _card_with_errors(
                request, run_id=run_id, agent_id=agent_id, tool_call_id=tool_call_id, edited_args_form=form
            )
        edited_args = form.cleaned_data["edited_args"]
    outcome = services.decision_approve(
        user=request.user,
        agent_id=agent_id,
        run_id=run_id,
        tool_call_id=tool_call_id,
        edited_args=edited_args,
    )
    if form is not None and outcome.refused_args:
        # Nothing was decided: the card again, the runtime's reasons next to what was typed.
        form.add_argument_errors(outcome.field_errors)
        if not form.errors:
            form.add_error("edited_args", outcome.message)
        return _card_with_errors(
            request, run_id=run_id, agent_id=agent_id, tool_call_id=tool_call_id, edited_args_form=form
        )
    return _decided(request, outcome)


@require_POST
@login_required
@permission_required(DECIDE_PERMISSION, to="decline tool calls")
def call_decline(request: HtmxHttpRequest, run_id: str, tool_call_id: str) -> HttpResponse:
    agent_id = _agent_for_post(request, run_id)
    form = DeclineForm(request.POST, auto_id=f"{dom_ids.call_block_id(run_id, tool_call_id)}-%s")
    if not form.is_valid():
        return _card_with_errors(
            request, run_id=run_id, agent_id=agent_id, tool_call_id=tool_call_id, decline_form=form
        )
    outcome = services.decision_decline(
        user=request.user,
        agent_id=agent_id,
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
    if posted:
        _visible_agent(request, posted)
    found = queries.run_locate(run_id, agent_hint=posted, agent_ids=visible_agent_ids(request.user))
    call = (
        None
        if found is None
        else next((c for c in found[1].tool_calls if c.tool_call_id == tool_call_id), None)
    )
    if found is None or call is None:
        # Stale card: the services tell who decided it (or that it is gone); the runtime validates.
        outcome = services.decision_resume(
            user=request.user,
            agent_id=found[0].id if found else (posted or ""),
            run_id=run_id,
            tool_call_id=tool_call_id,
            resume_data=None,
        )
        return _decided(request, outcome)
    agent = found[0]
    form = cards.resume_form_for(call, run_id=run_id, data=request.POST)
    if not form.is_valid():
        return _card_with_errors(
            request, run_id=run_id, agent_id=agent.id, tool_call_id=tool_call_id, resume_form=form
        )
    outcome = services.decision_resume(
        user=request.user,
        agent_id=agent.id,
        run_id=run_id,
        tool_call_id=tool_call_id,
        resume_data=form.resume_data,
    )
    if outcome.status == "invalid":
        form.add_field_errors(outcome.field_errors)
        if not form.errors:
            form.add_error(None, outcome.message)
        return _card_with_errors(
            request, run_id=run_id, agent_id=agent.id, tool_call_id=tool_call_id, resume_form=form
        )
    return _decided(request, outcome)
