"""Admins register external agents (which ask for approval over HTTP) in the Django admin."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

CODENAMES = ["view_externalagent", "add_externalagent", "change_externalagent"]


def grant(apps, schema_editor):
    # Permissions are normally created after all migrations ran (post_migrate): as 0010 does.
    app_config = apps.get_app_config("approvals")
    models_module = getattr(app_config, "models_module", None)
    app_config.models_module = models_module or True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = models_module
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    admins, _ = Group.objects.get_or_create(name="Admins")
    admins.permissions.add(
        *Permission.objects.filter(content_type__app_label="approvals", codename__in=CODENAMES)
    )


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for admins in Group.objects.filter(name="Admins"):
        admins.permissions.remove(
            *Permission.objects.filter(content_type__app_label="approvals", codename__in=CODENAMES)
        )


class Migration(migrations.Migration):
    dependencies = [("approvals", "0036_external_agents")]

    operations = [migrations.RunPython(grant, revoke)]
