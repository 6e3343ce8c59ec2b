"""Grants suggested from the decided history: Accept or Dismiss (shown on the grants page)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from agents_runtime import InvalidGrant
from approvals.forms.suggestions import SuggestionForm
from approvals.services import suggestions as suggestion_services
from approvals.services.grants import describe
from approvals.views.base import HtmxHttpRequest, access_of, is_partial

INCOMPLETE = "the suggestion's terms did not come back whole."


def _answer(request: HtmxHttpRequest, key: str, notice: str, *, ok: bool) -> HttpResponse:
    if is_partial(request):
        context = {"key": key, "notice": notice, "ok": ok}
        return render(request, "approvals/grants.html#suggestion-chosen", context)
    (messages.success if ok else messages.error)(request, notice)
    return redirect("approvals:grants")


@require_POST
@login_required
def suggestion_accept(request: HtmxHttpRequest) -> HttpResponse:
    form = SuggestionForm(request.POST)
    if not form.is_valid():
        return _answer(request, "", f"Nothing was made: {INCOMPLETE}", ok=False)
    key = request.POST.get("key", "")
    try:
        grant = suggestion_services.accept(access_of(request), form.terms())
    except (suggestion_services.SuggestionGone, InvalidGrant) as exc:
        return _answer(request, key, f"Nothing was made: {exc}", ok=False)
    return _answer(request, key, f"Allowed from now on: {describe(grant)}.", ok=True)


@require_POST
@login_required
def suggestion_dismiss(request: HtmxHttpRequest) -> HttpResponse:
    form = SuggestionForm(request.POST)
    if not form.is_valid():
        return _answer(request, "", f"Nothing was dismissed: {INCOMPLETE}", ok=False)
    key = request.POST.get("key", "")
    try:
        suggestion_services.dismiss(access_of(request), form.terms())
    except suggestion_services.SuggestionGone as exc:
        return _answer(request, key, f"Nothing was dismissed: {exc}", ok=False)
    return _answer(request, key, "Dismissed: this suggestion is not offered again for 14 days.", ok=True)
