"""The dashboard's URLs (part of the stable surface: see the dashboard spec)."""

from django.urls import path

from approvals.views import audit, decisions, pages

app_name = "approvals"

urlpatterns = [
    path("", pages.overview, name="overview"),
    path("agents/<str:agent_id>/", pages.inbox, name="inbox"),
    path("runs/new/", pages.run_new, name="run_new"),
    path("runs/<str:run_id>/", pages.run_detail, name="run"),
    # ``str`` matches anything but "/": sub-agent call ids such as "call_1:call_2" included.
    path("runs/<str:run_id>/calls/<str:tool_call_id>/approve", decisions.call_approve, name="approve"),
    path("runs/<str:run_id>/calls/<str:tool_call_id>/decline", decisions.call_decline, name="decline"),
    path("runs/<str:run_id>/calls/<str:tool_call_id>/resume", decisions.call_resume, name="resume"),
    path("audit/", audit.audit_log, name="audit"),
    path("audit/export.csv", audit.audit_export, name="audit_export"),
]
