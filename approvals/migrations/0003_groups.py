"""Groups "Reviewers" (may decide) and "Admins" (may also read the audit log) exist after `migrate`."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUPS = {
    "Reviewers": ["decide_runs"],
    "Admins": ["decide_runs", "view_audit_log"],
}


def create_groups(apps, schema_editor):
    # Permissions are normally created after all migrations ran (post_migrate); make sure ours exist.
    app_config = apps.get_app_config("approvals")
    # create_permissions skips apps without a models module, which a migration state's apps lack;
    # put back what was there (tests call this with the real registry).
    models_module = getattr(app_config, "models_module", None)
    app_config.models_module = models_module or True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = models_module

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        permissions = Permission.objects.filter(content_type__app_label="approvals", codename__in=codenames)
        group.permissions.add(*permissions)


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=GROUPS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0002_audit"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
