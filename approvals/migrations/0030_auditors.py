"""Group "Auditors": reads every agent's calls, ended runs and audit log; decides and manages nothing."""

from django.contrib.auth.management import create_permissions
from django.db import migrations


def create_auditors(apps, schema_editor):
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
    auditors, _ = Group.objects.get_or_create(name="Auditors")
    auditors.permissions.add(
        *Permission.objects.filter(content_type__app_label="approvals", codename="view_audit_log")
    )


def remove_auditors(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="Auditors").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0029_audit_of_grants"),
    ]

    operations = [migrations.RunPython(create_auditors, remove_auditors)]
