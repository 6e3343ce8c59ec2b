"""The routing rules page: the rules of the agents a user sees; admins of an agent make, change,
try and delete them (``approvals.services.rules``)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from agents_runtime import InvalidRule, RuleNotFound
from approvals import queries
from approvals.forms.rules import RuleForm
from approvals.models import RoutingRule
from approvals.policy import may_manage_rules
from approvals.services import rules as rule_services
from approvals.views.base import access_of, is_partial


def _page(request: HttpRequest, form: RuleForm, *, status: int = 200, **extra: Any) -> HttpResponse:
    access = access_of(request)
    rows = queries.rules_visible(access)
    context = {
        "rules": [(row, may_manage_rules(access, row.agent_id)) for row in rows],
        "form": form,
        "may_add": bool(form.fields["tool"].choices),  # type: ignore[attr-defined]
        **extra,
    }
    return render(request, "approvals/rules.html", context, status=status)


def _form(request: HttpRequest, data: Any = None, **kwargs: Any) -> RuleForm:
    return RuleForm(data, tools=queries.rule_tools(access_of(request)), **kwargs)


@require_http_methods(["GET", "POST"])
@login_required
def rules_page(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _page(request, _form(request))
    form = _form(request, request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    agent_id, terms = form.agent_and_terms()
    try:
        rule = rule_services.add_rule(access_of(request), agent_id, terms)
    except InvalidRule as exc:
        form.add_error("condition", str(exc))
        return _page(request, form, status=400)
    except RuleNotFound:
        raise Http404("No such agent.") from None
    messages.success(request, f"Rule #{rule.id} is on: {rule.describe()}.")
    return redirect("approvals:rules")


@require_POST
@login_required
def rule_try(request: HttpRequest) -> HttpResponse:
    """ "Try": what the form's rule would have matched in the tool's history; saves nothing."""
    form = _form(request, request.POST)
    trial = None
    if form.is_valid():
        agent_id, terms = form.agent_and_terms()
        try:
            trial = rule_services.try_rule(access_of(request), agent_id, terms)
        except RuleNotFound:
            raise Http404("No such agent.") from None
    context = {"trial": trial, "form": form}
    if is_partial(request):  # type: ignore[arg-type]
        return render(request, "approvals/rules.html#trial", context)
    return _page(request, form, trial=trial)


@require_http_methods(["GET", "POST"])
@login_required
def rule_edit(request: HttpRequest, rule_id: int) -> HttpResponse:
    access = access_of(request)
    row = RoutingRule.objects.filter(pk=rule_id, agent_id__in=access.agent_ids).first()
    if row is None:
        raise Http404("No such rule.")
    if not may_manage_rules(access, row.agent_id):
        raise PermissionDenied(rule_services.NOT_AN_ADMIN)
    initial = {
        "tool": f"{row.agent_id}:{row.tool_name}",
        "route": row.route,
        "condition": row.condition,
        "reason": row.reason,
        "position": row.position,
    }
    form = _form(request, request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        _, terms = form.agent_and_terms()
        try:
            rule = rule_services.change_rule(access, rule_id, terms)
        except InvalidRule as exc:
            form.add_error("condition", str(exc))
        except RuleNotFound:
            raise Http404("No such rule.") from None
        else:
            messages.success(request, f"Rule #{rule.id} is changed: {rule.describe()}.")
            return redirect("approvals:rules")
    status = 400 if request.method == "POST" else 200
    return _page(request, form, status=status, editing=row)


@require_POST
@login_required
def rule_delete(request: HttpRequest, rule_id: int) -> HttpResponse:
    try:
        rule_services.delete_rule(access_of(request), rule_id)
    except RuleNotFound:
        raise Http404("No such rule.") from None
    messages.success(request, f"Rule #{rule_id} is deleted: it routes no call from now on.")
    return redirect("approvals:rules")


__all__ = ["rule_delete", "rule_edit", "rule_try", "rules_page"]
