"""``/api/``: Mastra's human-in-the-loop routes, as ``@mastra/client-js`` calls them; the native API
under ``/api/v1/``; every agent as an AG-UI agent (``ag-ui/agents/<id>``); its OpenAPI document and a
page listing its operations."""

from django.urls import path, re_path
from django.views.generic import RedirectView

from approvals.api import ag_ui, errors, openapi, views
from approvals.api.v1 import views as v1

app_name = "api"

RUN = "v1/agents/<str:agent_id>/runs/<str:run_id>"

urlpatterns = [
    path("agents", views.agents, name="agents"),
    path("agents/<str:agent_id>", views.agent_detail, name="agent"),
    path("agents/<str:agent_id>/stream", views.stream, name="stream"),
    path("agents/<str:agent_id>/generate", views.generate, name="generate"),
    path("agents/<str:agent_id>/suspended-runs", views.suspended_runs, name="suspended_runs"),
    path("agents/<str:agent_id>/approve-tool-call", views.approve_tool_call, name="approve"),
    path("agents/<str:agent_id>/decline-tool-call", views.decline_tool_call, name="decline"),
    path(
        "agents/<str:agent_id>/approve-tool-call-generate",
        views.approve_tool_call_generate,
        name="approve_generate",
    ),
    path(
        "agents/<str:agent_id>/decline-tool-call-generate",
        views.decline_tool_call_generate,
        name="decline_generate",
    ),
    path("agents/<str:agent_id>/resume-stream", views.resume_stream, name="resume"),
    path("v1/agents", v1.agent_list, name="v1_agents"),
    path(RUN, v1.run_detail, name="v1_run"),
    path(f"{RUN}/calls/<str:tool_call_id>/approve", v1.approve, name="v1_approve"),
    path(f"{RUN}/calls/<str:tool_call_id>/decline", v1.decline, name="v1_decline"),
    path(f"{RUN}/calls/<str:tool_call_id>/resume", v1.resume, name="v1_resume"),
    path("v1/audit", v1.audit_log, name="v1_audit"),
    path("v1/approval-requests", v1.approval_requests, name="v1_requests"),
    path("v1/approval-requests/<str:request_id>", v1.approval_request, name="v1_request"),
    path(
        "v1/approval-requests/<str:request_id>/cancel", v1.approval_request_cancel, name="v1_request_cancel"
    ),
    path(
        "v1/approval-requests/<str:request_id>/result", v1.approval_request_result, name="v1_request_result"
    ),
    path("ag-ui/agents/<str:agent_id>", ag_ui.agent_run, name="ag_ui"),
    path("openapi.json", openapi.document_view, name="openapi"),
    path("docs/", openapi.docs_page, name="docs"),
    path("docs", RedirectView.as_view(pattern_name="api:docs")),
    # Last: whatever else is under /api/ answers JSON, as the routes do.
    re_path(r"^(?P<path>[\s\S]*)$", errors.no_route),  # (any character: a newline too)
]
