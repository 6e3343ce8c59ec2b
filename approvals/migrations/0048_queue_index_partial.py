# The reviewer's queue index becomes partial on PostgreSQL (the waiting runs it lists: suspended, not a
# sub-agent's inner run), so that an agent's prepared listing cannot use it.
#
# A listing's statement is prepared once per connection (approvals/server/database.py) and its agent is
# a parameter. After a few executions PostgreSQL may plan it once for any agent (a generic plan), from
# the agents' average share of the runs. With one big agent among small ones, the oldest-first listing
# of a small agent (the overview's "oldest waiting", the inbox's default order) then walked the queue's
# index, which has the same order, past every waiting run to find the agent's first, where the agent's
# own index (run_agent_oldest_idx) has it at once (docs/scaling.md, bench/inbox_page.py). A partial index
# whose condition names the status cannot serve a statement whose status is a parameter, so the
# generic plan takes the agent's index; the queue's statements, sent with their values, still walk it.
#
# SQLite prepares nothing across requests, and it cannot match a bound status (Django binds every
# value there) against a partial index's condition either, which would leave the queue without an
# index to walk: there the index keeps the columns it had, under the new name.

from django.db import migrations, models

TABLE = "approvals_run"
OLD = "run_queue_idx"
NEW = "run_queue_waiting_idx"
WHOLE = "(status, suspended_at, run_id, agent_id, parent_run_id)"
PARTIAL = "(suspended_at, run_id, agent_id) WHERE status = 'suspended' AND parent_run_id IS NULL"


def _forward(apps, schema_editor):
    shape = PARTIAL if schema_editor.connection.vendor == "postgresql" else WHOLE
    schema_editor.execute(f"DROP INDEX IF EXISTS {OLD}")
    schema_editor.execute(f"CREATE INDEX {NEW} ON {TABLE} {shape}")


def _backward(apps, schema_editor):
    schema_editor.execute(f"DROP INDEX IF EXISTS {NEW}")
    schema_editor.execute(f"CREATE INDEX {OLD} ON {TABLE} {WHOLE}")


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0047_run_parent_statistics"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="runrecord", name=OLD),
                migrations.AddIndex(
                    model_name="runrecord",
                    index=models.Index(
                        condition=models.Q(("parent_run_id__isnull", True), ("status", "suspended")),
                        fields=["suspended_at", "run_id", "agent_id"],
                        name=NEW,
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(_forward, _backward)],
        )
    ]
