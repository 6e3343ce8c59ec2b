"""The dashboard's URLs (part of the stable surface: see the dashboard spec)."""

from django.urls import path

from approvals import views

app_name = "approvals"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("agents/<str:agent_id>/", views.inbox, name="inbox"),
    path("runs/new/", views.run_new, name="run_new"),
    path("runs/<str:run_id>/", views.run_detail, name="run"),
    # ``str`` matches anything but "/": sub-agent call ids such as "call_1:call_2" included.
    path("runs/<str:run_id>/calls/<str:tool_call_id>/approve", views.call_approve, name="approve"),
    path("runs/<str:run_id>/calls/<str:tool_call_id>/decline", views.call_decline, name="decline"),
    path("runs/<str:run_id>/calls/<str:tool_call_id>/resume", views.call_resume, name="resume"),
    path("audit/", views.audit_log, name="audit"),
    path("audit/export.csv", views.audit_export, name="audit_export"),
]
