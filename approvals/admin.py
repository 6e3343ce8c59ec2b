"""Django admin: the audit log is read-only here too (no add, change or delete, not even for superusers).

Members of Admins may use it without being superusers (``apps.CountersignAdminSite``); what each may do
there still follows their permissions (Admins: users, groups and the audit log, see migration 0010).
What concerns agents (audit rows, webhook deliveries and endpoints) is listed as the desk's policy
shows it (``approvals.policy``): an admin designated for some agents sees only theirs.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from approvals import agents
from approvals.models import AuditEntry, WebhookDelivery, WebhookEndpoint
from approvals.policy import visible_agent_ids


class SeenAgentsOnly:
    """Rows of the agents the signed-in user may see (superusers see every row)."""

    #: The lookup of a row's agent id.
    agent_lookup = "agent_id"

    def get_queryset(self, request: HttpRequest) -> Any:
        rows = super().get_queryset(request)  # type: ignore[misc]
        if request.user.is_superuser:
            return rows
        return rows.filter(**{f"{self.agent_lookup}__in": visible_agent_ids(request.user)})


@admin.register(AuditEntry)
class AuditEntryAdmin(SeenAgentsOnly, admin.ModelAdmin[AuditEntry]):
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


# -- users and groups, as Admins (who are not superusers) may manage them ------------------------------

User = get_user_model()


class CountersignUserAdmin(UserAdmin):  # type: ignore[type-arg]
    """Admins manage accounts and their groups, but never make anyone a superuser or touch one."""

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = list(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            readonly += ["is_superuser", "user_permissions"]
        return readonly

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False  # its password or groups would be a way to become it
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False
        return super().has_delete_permission(request, obj)


class CountersignGroupAdmin(GroupAdmin):
    """Admins put people in groups; which permissions a group carries is a superuser's choice."""

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = list(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            readonly.append("permissions")
        return readonly


for model, model_admin in ((User, CountersignUserAdmin), (Group, CountersignGroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)


# -- webhooks ----------------------------------------------------------------------------------------


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin[WebhookEndpoint]):
    """An endpoint hears of every agent it lists (none listed: of every agent), so an admin who does
    not see every agent sees and changes only the endpoints of agents they see."""

    list_display = ["url", "description", "events", "agents", "active", "created_at"]
    list_filter = ["active"]
    fields = ["url", "description", "events", "agents", "active", "secret"]

    def get_queryset(self, request: HttpRequest) -> Any:
        rows = super().get_queryset(request)
        seen = _partial_sight(request)
        if seen is None:
            return rows
        return rows.filter(pk__in=[e.pk for e in rows if e.agents and set(e.agents) <= seen])

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        sight = _partial_sight(request)
        if sight is None:
            return form
        seen: set[str] = sight

        class Scoped(form):  # type: ignore[valid-type,misc]
            def clean_agents(self) -> Any:
                listed = self.cleaned_data.get("agents") or []
                if not listed or not set(listed) <= seen:
                    raise ValidationError(
                        "List only agents you review (an empty list means every agent): "
                        + ", ".join(sorted(seen))
                    )
                return listed

        return Scoped


def _partial_sight(request: HttpRequest) -> set[str] | None:
    """The agents the user sees, when that is not every agent (None: every agent)."""
    if request.user.is_superuser:
        return None
    seen = set(visible_agent_ids(request.user))
    return None if seen >= {a.id for a in agents.all_agents()} else seen


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(SeenAgentsOnly, admin.ModelAdmin[WebhookDelivery]):
    """Deliveries are written by the sender; an admin reads them and may send one again."""

    agent_lookup = "payload__data__agentId"

    list_display = [
        "created_at",
        "event_type",
        "endpoint",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
    ]
    list_filter = ["status", "event_type", "endpoint"]
    search_fields = ["message_id", "last_error"]
    readonly_fields = [f.name for f in WebhookDelivery._meta.get_fields() if f.concrete]
    actions = ["resend"]

    @admin.action(description="Re-send the selected deliveries now (same webhook-id)")
    def resend(self, request: HttpRequest, queryset: Any) -> None:
        from approvals.webhooks import resend

        count = resend(list(queryset))
        self.message_user(request, f"{count} deliveries queued to be sent again.")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
