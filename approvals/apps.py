from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out
        from django.db.models.signals import post_migrate

        from approvals import signals

        user_logged_out.connect(signals.close_live_sockets, dispatch_uid="countersign-close-live-sockets")
        # So that the admin offers an ``agent:<id>`` group for every agent.
        post_migrate.connect(
            signals.create_agent_groups, sender=self, dispatch_uid="countersign-agent-groups"
        )
