"""The profile menu's one setting: the time zone times are shown in (``approvals.times``)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from approvals import times
from approvals.forms.filters import TimeZoneForm

#: A year: the choice is this browser's display preference.
_COOKIE_AGE = 365 * 24 * 3600


@require_POST
@login_required
def time_zone_set(request: HttpRequest) -> HttpResponse:
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = "/"
    response = HttpResponseRedirect(target)
    form = TimeZoneForm(request.POST)
    if not form.is_valid():
        # A name that is no zone: nothing changes, and the page it goes back to says so.
        messages.error(request, "Times are shown as before: " + " ".join(map(str, form.errors["time_zone"])))
        return response
    chosen = form.cleaned_data["time_zone"]
    if chosen:
        response.set_cookie(
            times.CHOSEN_ZONE_COOKIE,
            chosen,
            max_age=_COOKIE_AGE,
            samesite="Lax",
            secure=request.is_secure(),
            httponly=True,
        )
    else:
        response.delete_cookie(times.CHOSEN_ZONE_COOKIE, samesite="Lax")
    return response
