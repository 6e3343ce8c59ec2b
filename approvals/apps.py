"""The app's composition root: the runtime is loaded and wired here, once, at start-up."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.contrib import admin
from django.contrib.admin import apps as admin_apps
from django.http import HttpRequest

from agents_runtime import Runtime


def compose(runtime: Runtime) -> Runtime:
    """Wire ``runtime`` into the app and serve it: its runs are stored in the database (unless it
    brought a store), the desk's policy is checked in every decision, its events reach open pages,
    and decided runs continue in background tasks."""
    from approvals import agents, live, notifications, tasks, webhooks
    from approvals.policy import DeskPolicy

    runtime.add_listener(live.publish)
    runtime.add_listener(webhooks.on_run_event, types=webhooks.EVENT_TYPES)
    runtime.add_listener(notifications.on_run_event, types=notifications.EVENT_TYPES)
    runtime.scheduler = tasks.Scheduler()
    if runtime.policy is None:
        runtime.policy = DeskPolicy()
    return agents.install(runtime)


def _serve_external_agents(sender: Any, **kwargs: Any) -> None:
    """``request_started``, once per process: serve the external agents registered so far."""
    from django.core.signals import request_started

    from approvals import agents

    request_started.disconnect(dispatch_uid="countersign-external-agents")
    agents.sync_external()


class ApprovalsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out
        from django.core.signals import got_request_exception, request_finished, request_started
        from django.db.models.signals import post_migrate

        from approvals import agents, checks, live, policy, tasks
        from approvals.server import database

        checks.register_checks()

        compose(agents.load(settings.AGENTS_RUNTIME))
        # External agents are registered in the database: served from this process's first request
        # (not here: no query while the apps load).
        request_started.connect(_serve_external_agents, dispatch_uid="countersign-external-agents")
        # With TASKS_BACKEND=database the worker process expires calls past their deadline.
        tasks.start_for_worker()
        user_logged_out.connect(live.close_sockets_on_logout, dispatch_uid="countersign-close-live-sockets")
        # The database pool's figures in the log: now and then, and when it ran dry (PostgreSQL's pool).
        if any(database.get("OPTIONS", {}).get("pool") for database in settings.DATABASES.values()):
            request_finished.connect(database.log_now_and_then, dispatch_uid="countersign-pool-stats")
            got_request_exception.connect(database.log_exhaustion, dispatch_uid="countersign-pool-exhausted")
        # So that the admin offers an ``agent:<id>`` group for every agent.
        post_migrate.connect(policy.create_agent_groups, sender=self, dispatch_uid="countersign-agent-groups")


class CountersignAdminSite(admin.AdminSite):
    site_header = "Countersign administration"
    site_title = "Countersign admin"

    def has_permission(self, request: HttpRequest) -> bool:
        # (Imported here: this module is loaded while the apps are, before any model may be.)
        from approvals.policy import may_use_admin

        return may_use_admin(request.user)

    @property
    def login_form(self) -> Any:  # type: ignore[override]
        """The sign-in form that lets in whom ``has_permission`` lets in (Django's lets in staff only)."""
        from approvals.admin import AdminSignInForm

        return AdminSignInForm


class CountersignAdminConfig(admin_apps.AdminConfig):
    """``django.contrib.admin`` with ``CountersignAdminSite`` as the default site (settings name it)."""

    default = False  # ("approvals" alone means ApprovalsConfig)

    default_site = "approvals.apps.CountersignAdminSite"
