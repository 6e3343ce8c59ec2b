"""The account's Notifications page: how (and whether) a user hears of calls that wait for them."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from approvals.notifications import preferences


@require_http_methods(["GET", "POST"])
@login_required
def notification_settings(request: HttpRequest) -> HttpResponse:
    user: Any = request.user  # login_required: a User
    form = preferences.PreferenceForm(
        request.POST if request.method == "POST" else None, instance=preferences.preference_of(user)
    )
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, "Notification settings saved.")
        return redirect("approvals:notifications")
    context = {"form": form, "email": user.email, "recent": preferences.recent(user)}
    return render(
        request, "approvals/notification_settings.html", context, status=400 if form.errors else 200
    )
