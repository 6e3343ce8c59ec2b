"""Admins manage users and groups in the Django admin (without being superusers)."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

CODENAMES = ["view_user", "add_user", "change_user", "view_group", "add_group", "change_group"]


def grant(apps, schema_editor):
    # auth's permissions are normally created after all migrations ran (post_migrate).
    app_config = apps.get_app_config("auth")
    # create_permissions skips apps without a models module, which a migration state's apps lack;
    # put back what was there (tests call this with the real registry).
    models_module = getattr(app_config, "models_module", None)
    app_config.models_module = models_module or True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = models_module
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    admins, _ = Group.objects.get_or_create(name="Admins")
    admins.permissions.add(*Permission.objects.filter(content_type__app_label="auth", codename__in=CODENAMES))


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for admins in Group.objects.filter(name="Admins"):
        admins.permissions.remove(
            *Permission.objects.filter(content_type__app_label="auth", codename__in=CODENAMES)
        )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0009_decisions_audited_at_decision"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
