"""A call that waits for an answer to ``suspend()`` is of kind ``input`` (was ``suspend``).

The public word (the inbox's ``kind`` filter, ``list_suspended_runs(kind=...)``) was already
``input``; the store now keeps the same word instead of translating it.
"""

from django.db import migrations, models


def to_input(apps, schema_editor):
    apps.get_model("approvals", "ParkedCallRecord").objects.filter(kind="suspend").update(kind="input")


def to_suspend(apps, schema_editor):
    apps.get_model("approvals", "ParkedCallRecord").objects.filter(kind="input").update(kind="suspend")


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0010_admins_manage_users"),
    ]

    operations = [
        migrations.AlterField(
            model_name="parkedcallrecord",
            name="kind",
            field=models.CharField(
                choices=[("approval", "Needs approval"), ("input", "Waiting for input")], max_length=16
            ),
        ),
        migrations.RunPython(to_input, to_suspend),
    ]
