"""The audit log page and its CSV export, scoped to the agents the viewer may see."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from approvals import queries
from approvals.cards import run as cards
from approvals.cards.audit import audit_rows
from approvals.forms.filters import AuditFilterForm, audit_token, date_presets
from approvals.models import RECORD_FIELDS, AuditEntry
from approvals.services import AUDIT_PERMISSION
from approvals.views.base import HtmxHttpRequest, access_of, is_partial, permission_required, render_page


def _filter_form(request: HttpRequest) -> AuditFilterForm:
    choices = queries.audit_choices(access_of(request).agent_ids)
    return AuditFilterForm(request.GET, agents=choices.agents, users=choices.users, tools=choices.tools)


@require_GET
@login_required
@permission_required(AUDIT_PERMISSION, to="read the audit log")
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    form = _filter_form(request)
    visible = access_of(request).agent_ids
    context: dict[str, Any] = {"form": form, "agents": visible, "presets": date_presets(request.GET)}
    if not form.is_valid():
        return render_page(
            request,
            "approvals/audit.html",
            "audit-table",
            context,
            status=200 if is_partial(request) else 400,
        )
    # Only the agents this user may see: an admin designated for one agent audits that agent.
    filters = form.filters()
    entries = AuditEntry.objects.filter(agent_id__in=visible).matching(**filters).select_related(None)
    page = queries.audit_page(
        entries, after=form.cleaned_data.get("after"), searching=queries.is_search(filters)
    )
    following = page.next_after
    context["page"] = page
    context["rows"] = audit_rows(page.entries)
    context["pager"] = {
        "positional": True,
        "top_label": "Newest records",
        "after": page.after,
        "next_after": following and audit_token(following.created_at, following.pk),
    }
    return render_page(request, "approvals/audit.html", "audit-table", context)


# Characters that make a spreadsheet treat a cell as a formula: model output must stay text.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return f"'{text}" if text.startswith(_FORMULA_START) else text


class _Echo:
    def write(self, value: str) -> str:
        return value


#: The export's columns: the record's fields, in the record's order, then what decided it when a
#: person did not click it alone: the bulk batch and the standing grant (their ids; empty: none).
AUDIT_CSV_COLUMNS = [*RECORD_FIELDS, "batch", "grant"]
_LINKS = {"batch": "batch_id", "grant": "grant_id"}
_JSON_COLUMNS = frozenset({"args", "suspend_payload", "resume_data", "edited_args"})


def _csv_values(entry: AuditEntry) -> list[Any]:
    values: list[Any] = []
    for name in AUDIT_CSV_COLUMNS:
        value = getattr(entry, _LINKS.get(name, name))
        if name in _JSON_COLUMNS:
            value = cards.compact_json(value)
        elif name == "created_at":
            value = value.isoformat()
        values.append(value)
    return values


@require_GET
@login_required
@permission_required(AUDIT_PERMISSION, to="export the audit log")
def audit_export(request: HttpRequest) -> HttpResponseBase:
    form = _filter_form(request)
    if not form.is_valid():
        return render(request, "approvals/audit.html", {"form": form}, status=400)
    visible = access_of(request).agent_ids
    # The page's order (the model's: newest first), so row N of the file is row N of the pages.
    entries = AuditEntry.objects.filter(agent_id__in=visible).matching(**form.filters())

    def rows() -> Iterator[str]:
        writer = csv.writer(_Echo())
        yield writer.writerow(AUDIT_CSV_COLUMNS)
        for entry in entries.iterator(chunk_size=500):
            yield writer.writerow([_csv_cell(v) for v in _csv_values(entry)])

    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    return StreamingHttpResponse(
        rows(),
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="countersign-audit-{stamp}.csv"'},
    )
