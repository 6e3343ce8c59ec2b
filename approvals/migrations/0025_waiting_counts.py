# How many runs wait per agent, kept by the database itself: a listing's exact ``total`` without a
# COUNT over every waiting run of the agent (1,000,000 runs: tens of milliseconds per request).
#
# approvals_waiting_count holds one counter per (agent, inner run or not, slot); the slot is the run
# row's id modulo 16, so that concurrent parks and claims of one agent rarely wait on the same
# counter row. Triggers on approvals_run move the counters in the very statement that parks, claims,
# reclaims, finishes or deletes a run, whichever code writes it (the store, a bulk load, a cascade),
# so the sum is always the committed number of suspended runs, in the reader's snapshot.
# TRUNCATE (PostgreSQL's flush) empties the counters too; SQLite's flush deletes row by row.
# The table has no model: only store/listing.py reads it, and only these triggers write it.

from django.db import migrations

SLOTS = 16

POSTGRESQL = f"""
CREATE TABLE approvals_waiting_count (
    agent_id varchar(255) NOT NULL,
    delegated boolean NOT NULL,
    slot smallint NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (agent_id, delegated, slot)
);
INSERT INTO approvals_waiting_count (agent_id, delegated, slot, n)
    SELECT agent_id, parent_run_id IS NOT NULL, id % {SLOTS}, COUNT(*) FROM approvals_run
    WHERE status = 'suspended' GROUP BY 1, 2, 3;
-- Inserts and deletes: once per statement, from its transition table (a bulk load or a cascade is
-- one update per counter, not one per row: in one transaction a million row-level updates of 16
-- counter rows chain a million row versions, each update walking the chain before it).
CREATE FUNCTION approvals_waiting_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO approvals_waiting_count AS counted (agent_id, delegated, slot, n)
    SELECT agent_id, parent_run_id IS NOT NULL, id % {SLOTS}, COUNT(*) FROM inserted
    WHERE status = 'suspended' GROUP BY 1, 2, 3
    ON CONFLICT (agent_id, delegated, slot) DO UPDATE SET n = counted.n + excluded.n;
    RETURN NULL;
END $$;
CREATE FUNCTION approvals_waiting_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE approvals_waiting_count AS counted SET n = counted.n - gone.n
    FROM (SELECT agent_id, parent_run_id IS NOT NULL AS delegated, id % {SLOTS} AS slot, COUNT(*) AS n
          FROM deleted WHERE status = 'suspended' GROUP BY 1, 2, 3) gone
    WHERE counted.agent_id = gone.agent_id AND counted.delegated = gone.delegated
        AND counted.slot = gone.slot;
    RETURN NULL;
END $$;
-- Updates (a park, claim or reclaim moves one run): per row, only when the status, agent or
-- inner-run-ness changes (transition tables cannot be limited to those columns).
CREATE FUNCTION approvals_waiting_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'suspended' THEN
        UPDATE approvals_waiting_count SET n = n - 1
        WHERE agent_id = OLD.agent_id AND delegated = (OLD.parent_run_id IS NOT NULL)
            AND slot = OLD.id % {SLOTS};
    END IF;
    IF NEW.status = 'suspended' THEN
        INSERT INTO approvals_waiting_count AS counted (agent_id, delegated, slot, n)
        VALUES (NEW.agent_id, NEW.parent_run_id IS NOT NULL, NEW.id % {SLOTS}, 1)
        ON CONFLICT (agent_id, delegated, slot) DO UPDATE SET n = counted.n + 1;
    END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION approvals_waiting_count_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM approvals_waiting_count;
    RETURN NULL;
END $$;
CREATE TRIGGER approvals_run_waiting_insert AFTER INSERT ON approvals_run
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_count_inserted();
CREATE TRIGGER approvals_run_waiting_delete AFTER DELETE ON approvals_run
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_count_deleted();
CREATE TRIGGER approvals_run_waiting_update AFTER UPDATE OF status, agent_id, parent_run_id
    ON approvals_run FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.agent_id IS DISTINCT FROM NEW.agent_id
        OR (OLD.parent_run_id IS NULL) <> (NEW.parent_run_id IS NULL))
    EXECUTE FUNCTION approvals_waiting_count_updated();
CREATE TRIGGER approvals_run_waiting_truncate AFTER TRUNCATE ON approvals_run
    FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_count_truncate();
"""

POSTGRESQL_REVERSE = """
DROP TRIGGER approvals_run_waiting_truncate ON approvals_run;
DROP TRIGGER approvals_run_waiting_update ON approvals_run;
DROP TRIGGER approvals_run_waiting_delete ON approvals_run;
DROP TRIGGER approvals_run_waiting_insert ON approvals_run;
DROP FUNCTION approvals_waiting_count_truncate();
DROP FUNCTION approvals_waiting_count_updated();
DROP FUNCTION approvals_waiting_count_deleted();
DROP FUNCTION approvals_waiting_count_inserted();
DROP TABLE approvals_waiting_count;
"""

_ADD = f"""
    INSERT INTO approvals_waiting_count (agent_id, delegated, slot, n)
    SELECT NEW.agent_id, NEW.parent_run_id IS NOT NULL, NEW.id % {SLOTS}, 1 WHERE NEW.status = 'suspended'
    ON CONFLICT (agent_id, delegated, slot) DO UPDATE SET n = n + 1;
"""
_REMOVE = f"""
    UPDATE approvals_waiting_count SET n = n - 1
    WHERE OLD.status = 'suspended' AND agent_id = OLD.agent_id
        AND delegated = (OLD.parent_run_id IS NOT NULL) AND slot = OLD.id % {SLOTS};
"""

SQLITE = [
    """
    CREATE TABLE approvals_waiting_count (
        agent_id varchar(255) NOT NULL,
        delegated bool NOT NULL,
        slot smallint NOT NULL,
        n bigint NOT NULL,
        PRIMARY KEY (agent_id, delegated, slot)
    )
    """,
    f"""
    INSERT INTO approvals_waiting_count (agent_id, delegated, slot, n)
    SELECT agent_id, parent_run_id IS NOT NULL, id % {SLOTS}, COUNT(*) FROM approvals_run
    WHERE status = 'suspended' GROUP BY 1, 2, 3
    """,
    f"CREATE TRIGGER approvals_run_waiting_insert AFTER INSERT ON approvals_run BEGIN {_ADD} END",
    f"CREATE TRIGGER approvals_run_waiting_delete AFTER DELETE ON approvals_run BEGIN {_REMOVE} END",
    f"""
    CREATE TRIGGER approvals_run_waiting_update AFTER UPDATE OF status, agent_id, parent_run_id
    ON approvals_run
    WHEN OLD.status IS NOT NEW.status OR OLD.agent_id IS NOT NEW.agent_id
        OR (OLD.parent_run_id IS NULL) <> (NEW.parent_run_id IS NULL)
    BEGIN {_REMOVE} {_ADD} END
    """,
]

SQLITE_REVERSE = [
    "DROP TRIGGER approvals_run_waiting_update",
    "DROP TRIGGER approvals_run_waiting_delete",
    "DROP TRIGGER approvals_run_waiting_insert",
    "DROP TABLE approvals_waiting_count",
]


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    statements = [POSTGRESQL] if schema_editor.connection.vendor == "postgresql" else SQLITE
    for statement in statements:
        schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_REVERSE, params=None)
        return
    for statement in SQLITE_REVERSE:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0024_queue_health"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
