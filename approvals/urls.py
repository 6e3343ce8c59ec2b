"""The dashboard's URLs (part of the stable surface: see the dashboard spec)."""

from django.urls import path, register_converter

from approvals import views
from approvals.converters import CallIdConverter, IdConverter

register_converter(IdConverter, "id")
register_converter(CallIdConverter, "call_id")

app_name = "approvals"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("agents/<id:agent_id>/", views.inbox, name="inbox"),
    path("runs/new/", views.run_new, name="run_new"),
    path("runs/<id:run_id>/", views.run_detail, name="run"),
    # Tool call ids are model output: ``call_id`` round-trips any of them (see approvals.converters).
    path("runs/<id:run_id>/calls/<call_id:tool_call_id>/approve", views.call_approve, name="approve"),
    path("runs/<id:run_id>/calls/<call_id:tool_call_id>/decline", views.call_decline, name="decline"),
    path("runs/<id:run_id>/calls/<call_id:tool_call_id>/resume", views.call_resume, name="resume"),
    path("audit/", views.audit_log, name="audit"),
    path("audit/export.csv", views.audit_export, name="audit_export"),
]
