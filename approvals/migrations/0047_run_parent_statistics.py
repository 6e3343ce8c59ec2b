# A sub-agent's inbox lists its own runs apart from its supervisors' inner runs. The store writes that
# filter as COALESCE(parent_run_id, '') = '' (approvals/store.py, ``_matches``) so that PostgreSQL
# walks the listing index in order rather than the counting one. But of an expression PostgreSQL
# knows nothing, and guesses that it keeps 0.5% of the rows: for a sub-agent with 10,000 waiting runs
# it expected 50 matches, read the whole table and sorted it for a page of 50 (9.5 ms of the inbox
# page; 1.3 ms with the statistics, read from the index in order). Statistics on the expression
# (PostgreSQL 14+) give the planner the real share; ANALYZE samples a bounded number of rows, so the
# migration takes about as long at a million runs as at a thousand. SQLite: nothing to do (its planner
# takes the index that gives the order).

from django.db import migrations

STATISTICS = "run_parent_or_empty_stats"


def _create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    table = apps.get_model("approvals", "RunRecord")._meta.db_table
    schema_editor.execute(
        f"CREATE STATISTICS IF NOT EXISTS {STATISTICS} ON (COALESCE(parent_run_id, '')) FROM {table}"
    )
    schema_editor.execute(f"ANALYZE {table}")


def _drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP STATISTICS IF EXISTS {STATISTICS}")


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0046_audit_shown_at"),
    ]

    operations = [migrations.RunPython(_create, _drop)]
