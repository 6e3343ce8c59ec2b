"""URL configuration: Django admin, the auth views, the HTTP API and the approvals dashboard at the root."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", include("approvals.api.urls")),
    path("", include("approvals.urls")),
]
