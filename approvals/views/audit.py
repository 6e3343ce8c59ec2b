"""The audit log page and its CSV export, scoped to the agents the viewer may see."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from approvals import cards
from approvals.forms import AuditFilterForm
from approvals.models.audit import AuditEntry
from approvals.services import AUDIT_PERMISSION
from approvals.views.base import HtmxHttpRequest, access_of, is_partial, permission_required, render_page

AUDIT_PER_PAGE = 50


class _AuditPage(Page[AuditEntry]):
    """Django's page, with the names the shared pager reads (``partials/pager.html``)."""

    @property
    def num_pages(self) -> int:
        return self.paginator.num_pages

    @property
    def previous_page(self) -> int:
        return self.number - 1

    @property
    def next_page(self) -> int:
        return self.number + 1


class _AuditPaginator(Paginator[AuditEntry]):
    def _get_page(self, *args: Any, **kwargs: Any) -> Page[AuditEntry]:
        return _AuditPage(*args, **kwargs)


@require_GET
@login_required
@permission_required(AUDIT_PERMISSION, to="read the audit log")
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET)
    visible = access_of(request).agent_ids
    context: dict[str, Any] = {"form": form, "agents": visible}
    if not form.is_valid():
        return render_page(
            request,
            "approvals/audit.html",
            "audit-table",
            context,
            status=200 if is_partial(request) else 400,
        )
    # Only the agents this user may see: an admin designated for one agent audits that agent.
    entries = AuditEntry.objects.filter(agent_id__in=visible).matching(**form.filters()).select_related(None)
    paginator = _AuditPaginator(entries, AUDIT_PER_PAGE)
    context["page_obj"] = paginator.get_page(form.cleaned_data.get("page") or 1)
    return render_page(request, "approvals/audit.html", "audit-table", context)


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
    visible = access_of(request).agent_ids
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
