"""The Django admin for Countersign: members of Admins may use it without being superusers.

It opens to staff (Django's rule) and to the Admins group; what each may do there still follows
their permissions (Admins: users, groups and the audit log, see migration 0010).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest


class CountersignAdminSite(admin.AdminSite):
    site_header = "Countersign administration"
    site_title = "Countersign admin"

    def has_permission(self, request: HttpRequest) -> bool:
        # (Imported here: this module is loaded while the apps are, before any model may be.)
        from approvals.policy import ADMINS

        user = request.user
        if not user.is_active:
            return False
        return bool(user.is_staff or user.groups.filter(name=ADMINS).exists())


class CountersignAdminConfig(AdminConfig):
    """``django.contrib.admin`` with ``CountersignAdminSite`` as the default site."""

    default_site = "approvals.admin_site.CountersignAdminSite"
