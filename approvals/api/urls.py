"""``/api/``: Mastra's human-in-the-loop routes, as ``@mastra/client-js`` calls them."""

from django.urls import path

from approvals.api import views

app_name = "api"

urlpatterns = [
    path("agents/<str:agent_id>/stream", views.stream, name="stream"),
    path("agents/<str:agent_id>/suspended-runs", views.suspended_runs, name="suspended_runs"),
    path("agents/<str:agent_id>/approve-tool-call", views.approve_tool_call, name="approve"),
    path("agents/<str:agent_id>/decline-tool-call", views.decline_tool_call, name="decline"),
    path("agents/<str:agent_id>/resume-stream", views.resume_stream, name="resume"),
]
