# The inbox's list of sub-agents' waiting calls read the agent's whole waiting list to find a few
# delegated runs (parent_run_id set): 18 ms of the inbox page at 10,000 waiting runs on SQLite. A
# partial index of the delegated runs alone, in suspension order, makes it a short range scan.
#
# Built CONCURRENTLY on PostgreSQL (it reads every run once; a plain CREATE INDEX would hold off the
# decisions meanwhile). Hence no transaction.

from django.db import migrations, models

INDEX = models.Index(
    fields=["agent_id", "status", "suspended_at", "run_id"],
    condition=models.Q(parent_run_id__isnull=False),
    name="run_delegated_oldest_idx",
)


def _add_index(apps, schema_editor):
    model = apps.get_model("approvals", "RunRecord")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.add_index(model, INDEX, concurrently=True)
    else:
        schema_editor.add_index(model, INDEX)


def _drop_index(apps, schema_editor):
    model = apps.get_model("approvals", "RunRecord")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.remove_index(model, INDEX, concurrently=True)
    else:
        schema_editor.remove_index(model, INDEX)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0034_audit_search_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_add_index, _drop_index)],
            state_operations=[migrations.AddIndex(model_name="runrecord", index=INDEX)],
        ),
    ]
