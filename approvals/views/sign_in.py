"""The sign-in's own answer to too many failed logins (django-axes' lockout), with ``Retry-After``.

django-axes answers a locked-out login 429 with its template but no ``Retry-After``; this is its
answer (``AXES_LOCKOUT_CALLABLE``) with the same page and context, saying when the lock lifts
(``LOGIN_COOLOFF_MINUTES``), as every 429 of this app does.
"""

from __future__ import annotations

import math
from typing import Any

from axes.helpers import get_client_username, get_cool_off, get_cool_off_iso8601, get_failure_limit
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def locked_out(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    context: dict[str, Any] = {
        "failure_limit": get_failure_limit(request, credentials),
        "username": get_client_username(request, credentials) or "",
    }
    cool_off = get_cool_off(request)
    if cool_off:
        context.update(cooloff_time=get_cool_off_iso8601(cool_off), cooloff_timedelta=cool_off)
    response = render(request, settings.AXES_LOCKOUT_TEMPLATE, context, status=429)
    if cool_off:
        response["Retry-After"] = str(max(1, math.ceil(cool_off.total_seconds())))
    return response
