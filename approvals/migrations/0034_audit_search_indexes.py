# The audit log at millions of rows (docs/scaling.md, "The audit log at 10M rows"): its outcome and
# tool filters read an index instead of the whole log, and on PostgreSQL the search inside the call's
# arguments (AuditEntry.objects.matching(in_args=...)) a trigram index of their text.
#
# Both are built CONCURRENTLY on PostgreSQL: a plain CREATE INDEX would hold off every decision (each
# writes its audit row) for the minutes an index over millions of rows takes. Hence no transaction.

from django.db import migrations, models

OUTCOME_INDEX = models.Index(fields=["outcome", "-created_at"], name="audit_outcome_created")
# The tool filter, and the tools the filter form offers (AuditEntry.objects.values_seen).
TOOL_INDEX = models.Index(fields=["tool_name", "-created_at"], name="audit_tool_created")

# Exactly the expression AuditEntry.objects.matching(in_args=...) filters on (models/audit.py's
# ArgumentsText, upper-cased as Django's icontains reads it on PostgreSQL); an index on anything else
# would never be used (tests/approvals/views/test_audit_plans.py asks the planner).
ARGS_TEXT = (
    "UPPER((COALESCE(args::text, suspend_payload::text, '') || ' ' || COALESCE(edited_args::text, ''))::text)"
)
ARGS_INDEX = "audit_args_trgm"


def _add_indexes(apps, schema_editor):
    model = apps.get_model("approvals", "AuditEntry")
    if schema_editor.connection.vendor != "postgresql":
        # SQLite: the argument search reads the rows the other filters leave (a SQLite desk's log).
        for index in (OUTCOME_INDEX, TOOL_INDEX):
            schema_editor.add_index(model, index)
        return
    for index in (OUTCOME_INDEX, TOOL_INDEX):
        schema_editor.add_index(model, index, concurrently=True)
    # pg_trgm ships with PostgreSQL (contrib) and is a trusted extension: the database's owner may
    # create it without being a superuser.
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    table = model._meta.db_table
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {ARGS_INDEX} ON {table} USING gin ({ARGS_TEXT} gin_trgm_ops)"
    )


def _drop_indexes(apps, schema_editor):
    model = apps.get_model("approvals", "AuditEntry")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {ARGS_INDEX}")
    for index in (OUTCOME_INDEX, TOOL_INDEX):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.remove_index(model, index, concurrently=True)
        else:
            schema_editor.remove_index(model, index)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0033_chosen_run_ids"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_add_indexes, _drop_indexes)],
            state_operations=[
                migrations.AddIndex(model_name="auditentry", index=OUTCOME_INDEX),
                migrations.AddIndex(model_name="auditentry", index=TOOL_INDEX),
            ],
        ),
    ]
