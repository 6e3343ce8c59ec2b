"""The grants page: standing grants a user may see (their agents'; admins: all), and revoking one."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agents_runtime import GrantNotFound
from approvals import queries
from approvals.services import grants as grant_services
from approvals.services import suggestions as suggestion_services
from approvals.views.base import access_of


@require_GET
@login_required
def grants_page(request: HttpRequest) -> HttpResponse:
    access = access_of(request)
    show = "all" if request.GET.get("show") == "all" else "live"
    rows = queries.grants_visible(access, live_only=show == "live")
    context = {
        "grants": [(row, grant_services.may_revoke(access, row)) for row in rows],
        "show": show,
        "now": timezone.now(),
        "suggestions": suggestion_services.suggestions(access),
    }
    return render(request, "approvals/grants.html", context)


@require_POST
@login_required
def grant_revoke(request: HttpRequest, grant_id: int) -> HttpResponse:
    try:
        grant_services.revoke(access_of(request), grant_id)
    except GrantNotFound:
        raise Http404("No such grant.") from None
    messages.success(request, f"Grant #{grant_id} is revoked: it approves nothing from now on.")
    return redirect("approvals:grants")
