"""Django admin: the audit log is read-only here too (no add, change or delete, not even for superusers).

Members of Admins may sign in and use it without being staff or superusers (``apps.CountersignAdminSite``,
``AdminSignInForm``, ``policy.may_use_admin``); what each may do there still follows their permissions
(Admins: users, groups, the audit log, webhooks, grants; see migrations 0010, 0018, 0022). What
concerns agents (audit rows, webhook deliveries and endpoints, grants, API tokens) is listed as the
desk's policy shows it (``approvals.policy``): an admin designated for some agents sees only theirs.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.http import HttpRequest

from agents_runtime import GrantNotFound
from agents_runtime.untrusted import reveal_invisible
from approvals import agents
from approvals.models import (
    ApiToken,
    AuditEntry,
    ExternalAgent,
    GrantRecord,
    GrantSuggestionRecord,
    WebhookDelivery,
    WebhookEndpoint,
)
from approvals.policy import Access, may_use_admin, visible_agent_ids
from approvals.services import grants as grant_services
from approvals.services import requests as request_services


def visible(name: str, description: str = "") -> Any:
    """A list column showing the field ``name`` with its invisible characters (bidi controls,
    zero-width marks) as visible marks, as the dashboard shows them (``cards.text.reveal_invisible``)."""

    def column(obj: Any) -> str:
        value = getattr(obj, name)
        return reveal_invisible("" if value is None else str(value))

    column.__name__ = name
    return admin.display(description=description or name.replace("_", " "), ordering=name)(column)


def shown_fields(model: Any) -> list[Any]:
    """Every column of ``model`` for a read-only change page, its text through ``visible``."""
    return [
        visible(f.name, str(f.verbose_name)) if isinstance(f, models.CharField | models.TextField) else f.name
        for f in model._meta.concrete_fields
    ]


class AdminSignInForm(AdminAuthenticationForm):
    """The admin's sign-in: whoever ``policy.may_use_admin`` lets in (Admins too, not only staff)."""

    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "invalid_login": (
            "Please enter the correct %(username)s and password of an account that may use the admin "
            "(staff, or the Admins group). Note that both fields may be case-sensitive."
        ),
    }

    def confirm_login_allowed(self, user: Any) -> None:
        AuthenticationForm.confirm_login_allowed(self, user)
        if not may_use_admin(user):
            raise ValidationError(
                self.error_messages["invalid_login"],
                code="invalid_login",
                params={"username": self.username_field.verbose_name},
            )


class SeenAgentsOnly:
    """Rows of the agents the signed-in user may see (superusers see every row)."""

    #: The lookup of a row's agent id.
    agent_lookup = "agent_id"

    def get_queryset(self, request: HttpRequest) -> Any:
        rows = super().get_queryset(request)  # type: ignore[misc]
        if request.user.is_superuser:
            return rows
        return rows.filter(**{f"{self.agent_lookup}__in": visible_agent_ids(request.user)})


class RecordsOnly:
    """Rows that record what happened (audit entries, grants, suggestions chosen): read here, never
    added, changed or deleted (what changes them goes through the services that audit it)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(RecordsOnly, SeenAgentsOnly, admin.ModelAdmin[AuditEntry]):
    list_display = [
        "created_at",
        visible("username"),
        "agent_id",
        visible("run_id", "run id"),
        visible("tool_name"),
        "action",
        "edited",
        "outcome",
    ]
    list_filter = ["action", "outcome", "agent_id", "created_at"]
    search_fields = ["username", "run_id", "thread_id", "resource_id", "tool_name", "tool_call_id", "reason"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    list_select_related = False
    fields = readonly_fields = shown_fields(AuditEntry)
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


# -- users and groups, as Admins (who are not superusers) may manage them ------------------------------

User = get_user_model()


class CountersignUserAdmin(UserAdmin):  # type: ignore[type-arg]
    """Admins manage accounts and their groups, but never make anyone a superuser or touch one. An
    admin who does not see every agent lists and manages only the accounts that see no more than
    they do, and gives no account (their own included) groups that would let it see more: a password
    set or a group taken away would otherwise be a way to see, or to become, more than they may."""

    list_display = (
        visible("username"),
        visible("email", "email address"),
        visible("first_name", "first name"),
        visible("last_name", "last name"),
        "is_staff",
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = list(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            readonly += ["is_superuser", "user_permissions"]
        return readonly

    def get_queryset(self, request: HttpRequest) -> Any:
        rows = super().get_queryset(request)
        if _partial_sight(request) is None:
            return rows
        # Who reviews which agents is the agents' business: only the accounts they may manage.
        return rows.filter(pk__in=[u.pk for u in rows.prefetch_related("groups") if _may_manage(request, u)])

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and not _may_manage(request, obj):
            return False  # its password or groups would be a way to become it
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and not _may_manage(request, obj):
            return False
        return super().has_delete_permission(request, obj)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        seen = _partial_sight(request)
        if seen is None or "groups" not in form.base_fields:
            return form
        bound: set[str] = seen

        class WithinSight(form):  # type: ignore[misc, valid-type]
            def clean(self) -> Any:
                cleaned = super().clean()
                groups = cleaned.get("groups")
                if groups is not None:
                    more = set(_sight(frozenset(g.name for g in groups))) - bound
                    if more:
                        raise ValidationError(
                            "These groups would let the account see agents you do not see ("
                            + ", ".join(sorted(more))
                            + "): ask an admin who sees every agent.",
                            code="wider_sight",
                        )
                return cleaned

        return WithinSight


def _sight(groups: frozenset[str]) -> list[str]:
    """The agents an active account (not a superuser) in ``groups`` sees (``policy.visible_agent_ids``):
    an inactive one would see them once made active again."""
    return visible_agent_ids(_AN_ACTIVE_ACCOUNT, groups)


_AN_ACTIVE_ACCOUNT = SimpleNamespace(is_authenticated=True, is_active=True, is_superuser=False)


def _may_manage(request: HttpRequest, user: Any) -> bool:
    """Whether the signed-in admin may change or delete ``user``: never a superuser unless one
    themselves; an account that sees (or, made active again, would see) no agent they do not."""
    if request.user.is_superuser:
        return True
    if user.is_superuser:
        return False
    seen = _partial_sight(request)
    return seen is None or set(_sight(frozenset(g.name for g in user.groups.all()))) <= seen


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

    list_display = [visible("url", "URL"), visible("description"), "events", "agents", "active", "created_at"]
    list_filter = ["active"]
    fields = ["url", "description", "events", "agents", "active", "secret"]

    def get_queryset(self, request: HttpRequest) -> Any:
        rows = super().get_queryset(request)
        seen = _partial_sight(request)
        if seen is None:
            return rows
        return rows.filter(pk__in=[e.pk for e in rows if _endpoint_seen(e, seen)])

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


def _endpoint_seen(endpoint: WebhookEndpoint, seen: set[str] | None) -> bool:
    """Whether an admin who sees the agents ``seen`` (None: every agent) sees ``endpoint``: one that
    hears only of agents they see (its URL often carries a secret)."""
    return seen is None or (bool(endpoint.agents) and set(endpoint.agents) <= seen)


def _with_endpoint_shown(names: Any, request: HttpRequest) -> list[Any]:
    """``names`` with a delivery's ``endpoint`` shown as its URL where the admin sees it."""
    seen = _partial_sight(request)
    if seen is None:
        return list(names)

    @admin.display(description="endpoint")
    def endpoint(delivery: WebhookDelivery) -> str:
        shown = _endpoint_seen(delivery.endpoint, seen)
        return str(delivery.endpoint) if shown else "(an endpoint of agents you do not all see)"

    return [endpoint if name == "endpoint" else name for name in names]


class SeenEndpointFilter(admin.RelatedFieldListFilter):
    """The deliveries' endpoint filter, offering the endpoints the admin sees (their URLs) only."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        seen = _partial_sight(request)
        endpoints = WebhookEndpoint.objects.order_by("pk")
        return [(str(e.pk), str(e)) for e in endpoints if _endpoint_seen(e, seen)]


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
        visible("last_error"),
    ]
    list_filter = ["status", "event_type", ("endpoint", SeenEndpointFilter)]
    search_fields = ["message_id", "last_error"]
    fields = readonly_fields = shown_fields(WebhookDelivery)
    actions = ["resend"]

    # Its endpoint's URL only to an admin who sees that endpoint (``WebhookEndpointAdmin``).
    def get_list_display(self, request: HttpRequest) -> Any:
        return _with_endpoint_shown(super().get_list_display(request), request)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return _with_endpoint_shown(super().get_fields(request, obj), request)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return _with_endpoint_shown(super().get_readonly_fields(request, obj), request)

    @admin.action(description="Re-send the selected deliveries now (same webhook-id)")
    def resend(self, request: HttpRequest, queryset: Any) -> None:
        from approvals.webhooks import resend

        count = resend(list(queryset))
        self.message_user(request, f"{count} deliveries queued to be sent again.")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# -- standing grants and API tokens: read, and revoked, never made or edited here ----------------------


@admin.register(GrantRecord)
class GrantRecordAdmin(RecordsOnly, SeenAgentsOnly, admin.ModelAdmin[GrantRecord]):
    """Grants are made by "approve and allow" (checked against the tool, audited); here they are read,
    and revoked through the same service as on the grants page (audited too)."""

    list_display = [
        "id",
        "agent_id",
        "tool_name",
        "scope",
        visible("scope_value", "for"),
        visible("condition"),
        "uses",
        "max_uses",
        "expires_at",
        visible("created_by_name", "made by"),
        "revoked_at",
    ]
    list_filter = ["agent_id", "scope"]
    search_fields = ["tool_name", "scope_value", "condition", "created_by_name"]
    fields = readonly_fields = shown_fields(GrantRecord)
    actions = ["revoke"]

    @admin.action(description="Revoke the selected grants now", permissions=["view"])
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        access = Access.of(request.user)
        revoked = 0
        for row in queryset.filter(revoked_at__isnull=True):
            try:
                grant_services.revoke(access, row.pk)
            except (GrantNotFound, PermissionDenied):
                continue
            revoked += 1
        self.message_user(request, f"{revoked} grant(s) revoked.")


@admin.register(GrantSuggestionRecord)
class GrantSuggestionRecordAdmin(RecordsOnly, SeenAgentsOnly, admin.ModelAdmin[GrantSuggestionRecord]):
    """Who accepted or dismissed which suggested grant (the grants page): read only."""

    list_display = [
        "decided_at",
        visible("decided_by_name", "by"),
        "choice",
        "agent_id",
        "tool_name",
        "scope",
        visible("condition"),
        "grant",
    ]
    list_filter = ["choice", "agent_id"]
    fields = readonly_fields = shown_fields(GrantSuggestionRecord)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    """A token acts as its user: an admin who does not see every agent sees the tokens of users who
    see no more than they do, and of the external agents they see. Tokens are made by their users
    (the secret is shown once, there)."""

    # (Never the salt and digest: they are not for anyone's eyes.)
    readonly_fields = [
        "name",
        "user",
        "external_agent",
        "key_id",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    fields = tuple(readonly_fields)
    list_display = [visible("name"), visible("user"), *readonly_fields[2:]]
    search_fields = ["name", "key_id", "user__username"]

    def get_queryset(self, request: HttpRequest) -> Any:
        rows = super().get_queryset(request).select_related("user")
        seen = _partial_sight(request)
        if seen is None:
            return rows
        users = {row.user for row in rows}
        theirs = [u.pk for u in users if set(visible_agent_ids(u)) <= seen]
        # An external agent's account sees no agent; its tokens are that agent's, theirs if they see it.
        foreign = rows.filter(external_agent__isnull=False).exclude(external_agent__agent_id__in=seen)
        return rows.filter(user__in=theirs).exclude(pk__in=foreign.values("pk"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class ExternalAgentForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = ExternalAgent
        fields = ["agent_id", "name", "description", "tools"]

    def clean_tools(self) -> Any:
        tools = self.cleaned_data["tools"]
        try:
            agents.tool_rules(tools)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        return tools


@admin.register(ExternalAgent)
class ExternalAgentAdmin(SeenAgentsOnly, admin.ModelAdmin[ExternalAgent]):
    """Agents that run elsewhere and ask over ``/api/v1/approval-requests``: registered here (or with
    ``manage.py external_agent``), served at once. Their tokens are made with the command (a secret is
    shown once)."""

    form = ExternalAgentForm
    list_display = ["agent_id", visible("name"), "created_at"]
    search_fields = ["agent_id", "name"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["agent_id"] if obj is not None else []

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Its runs and audit rows name it, and a server process keeps serving it until it restarts.
        return False

    def save_model(self, request: HttpRequest, obj: ExternalAgent, form: Any, change: bool) -> None:
        try:
            saved = request_services.register(
                obj.agent_id, name=obj.name, description=obj.description, tools=obj.tools
            )
        except ValueError as exc:
            raise PermissionDenied(str(exc)) from None
        obj.pk, obj.user_id = saved.pk, saved.user_id
