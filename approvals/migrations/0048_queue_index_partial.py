# The reviewer's queue index becomes partial (the waiting runs it lists: suspended, not a sub-agent's
# inner run), so that an agent's prepared listing cannot use it.
#
# A listing's statement is prepared once per connection (approvals/server/database.py) and its agent is
# a parameter. After a few executions PostgreSQL may plan it once for any agent (a generic plan), from
# the agents' average share of the runs. With one big agent among small ones, the oldest-first listing
# of a small agent (the overview's "oldest waiting", the inbox's default order) then walked the queue's
# index, which has the same order, past every waiting run to find the agent's first: ~55 ms an agent
# at a million runs, against 0.05 ms from the agent's own index (run_agent_oldest_idx). A partial index
# whose condition names the status cannot serve a statement whose status is a parameter, so the
# generic plan takes the agent's index; the queue's statements, written with their values, still walk
# this one.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0047_run_parent_statistics"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="runrecord",
            name="run_queue_idx",
        ),
        migrations.AddIndex(
            model_name="runrecord",
            index=models.Index(
                condition=models.Q(("parent_run_id__isnull", True), ("status", "suspended")),
                fields=["suspended_at", "run_id", "agent_id"],
                name="run_queue_waiting_idx",
            ),
        ),
    ]
