"""URL configuration: Django admin, the auth views, the HTTP API and the approvals dashboard at the root."""

from django.contrib import admin
from django.urls import include, path

from approvals.views import probes

urlpatterns = [
    path("admin/", admin.site.urls),
    # Probes and Prometheus (approvals/views/probes.py): no login, no session.
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("metrics", probes.metrics, name="metrics"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", include("approvals.api.urls")),
    path("", include("approvals.urls")),
]
