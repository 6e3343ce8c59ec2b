"""Django admin: the audit log is read-only here too (no add, change or delete, not even for superusers)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from approvals.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin[AuditEntry]):
    list_display = [
        "created_at",
        "username",
        "agent_id",
        "run_id",
        "tool_name",
        "action",
        "edited",
        "outcome",
    ]
    list_filter = ["action", "outcome", "agent_id", "created_at"]
    search_fields = ["username", "run_id", "thread_id", "resource_id", "tool_name", "tool_call_id", "reason"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    list_select_related = False
    readonly_fields = [f.name for f in AuditEntry._meta.get_fields() if f.concrete]
    actions = None

    @admin.display(boolean=True, description="Edited arguments")
    def edited(self, obj: AuditEntry) -> bool:
        """Approved with the reviewer's arguments instead of the model's (``edited_args``)."""
        return obj.edited_args is not None

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Whoever may read the audit log in the dashboard may read it here.
        return request.user.has_perm("approvals.view_audit_log") or super().has_view_permission(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request) or super().has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
