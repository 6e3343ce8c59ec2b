"""The "API tokens" page: a user's own tokens for the HTTP API, created (shown once) and revoked."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from approvals.models import ApiToken
from approvals.services import tokens


class NewTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What uses it, e.g. “chat front end”.")
    expires_in_days = forms.IntegerField(
        label="Expires in (days)",
        required=False,
        min_value=1,
        max_value=3650,
        help_text="Empty: never expires (revoke it here when it is no longer needed).",
    )


def _page(
    request: HttpRequest, form: NewTokenForm, *, plaintext: str | None = None, status: int = 200
) -> HttpResponse:
    user: Any = request.user  # login_required: a User
    context = {
        "form": form,
        "tokens": ApiToken.objects.filter(user=user),
        "plaintext": plaintext,
    }
    return render(request, "approvals/api_tokens.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def api_tokens(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request, NewTokenForm())
    form = NewTokenForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    days = form.cleaned_data["expires_in_days"]
    created = tokens.create_token(
        request.user,
        name=form.cleaned_data["name"],
        expires_at=timezone.now() + timedelta(days=days) if days else None,
    )
    # Rendered, not redirected: the secret is in this response only, never in a session or message.
    return _page(request, NewTokenForm(), plaintext=created.plaintext, status=201)


@require_POST
@login_required
def api_token_revoke(request: HttpRequest, key_id: str) -> HttpResponse:
    if tokens.revoke_token(request.user, key_id):
        messages.success(request, "Token revoked: it no longer authenticates.")
    else:
        messages.error(request, "No such active token of yours.")
    return redirect("approvals:api_tokens")
