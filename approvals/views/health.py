"""The queue-health page: for those who may read the audit log, over the agents they may see."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from approvals.health.figures import health_figures
from approvals.health.page import health_page
from approvals.services import AUDIT_PERMISSION
from approvals.views.base import HtmxHttpRequest, access_of, permission_required, render_page


@require_GET
@login_required
@permission_required(AUDIT_PERMISSION, to="see the queue's health")
def queue_health(request: HtmxHttpRequest) -> HttpResponse:
    page = health_page(health_figures(access_of(request).agent_ids))
    context = {"page": page, "figures": page.figures}
    return render_page(request, "approvals/health.html", "health-figures", context)
