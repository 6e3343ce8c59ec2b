# The total of a listing filtered by tool or by kind (the inbox's filters): how many of the agent's
# waiting runs have an undecided call of that tool or kind. The waiting counters (0025, 0027) do not
# hold it, so it is counted. At a million waiting runs PostgreSQL counted it by reading the agent's
# run rows from the table (a parallel sequential scan: their snapshots make the table large) and
# every undecided call likewise (docs/scaling.md, "The inbox in deadline order, the overview and the
# queue's thread filter at a million runs").
#
# These three indexes hold what the count reads, so it is two index-only scans and a hash semi-join:
# the agent's waiting runs' ids by (agent_id, status, parent_run_id), as the count filters them
# (delegated or not), and the undecided calls' run ids by kind and by tool name. The runs' index
# repeats run_agent_status_parent_idx's keys: that one stays, deduplicated, for plain counts
# (PostgreSQL does not deduplicate an index with INCLUDE columns).
#
# PostgreSQL only (SQLite has no INCLUDE, and its counts read its indexes already), built
# CONCURRENTLY like 0034's, so decisions go on while they are built; raw SQL outside the models'
# state, like 0034's trigram index.

from django.db import migrations

INDEXES = {
    "run_waiting_ids_idx": "approvals_run (agent_id, status, parent_run_id) INCLUDE (id)",
    "call_undecided_kind_runs_idx": "approvals_parked_call (kind) INCLUDE (run_id) WHERE action IS NULL",
    "call_undecided_tool_runs_idx": "approvals_parked_call (tool_name) INCLUDE (run_id) WHERE action IS NULL",
}


def _add_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, definition in INDEXES.items():
        schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {definition}")


def _drop_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0048_queue_index_partial"),
    ]

    operations = [
        migrations.RunPython(_add_indexes, _drop_indexes),
    ]
