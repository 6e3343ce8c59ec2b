"""URL configuration: Django admin, the auth views, and the approvals dashboard at the root."""

from importlib.util import find_spec

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
]

# The dashboard's urls module is being written alongside this one; mount it as soon as it exists.
if find_spec("approvals.urls") is not None:
    urlpatterns.append(path("", include("approvals.urls")))
