# How many runs wait per agent and day of suspension (PostgreSQL only): a deep page of an agent's
# listing starts at its day instead of skipping every newer run in the index one by one (page 1,000 of
# 50 skipped 50,000 index entries, ~10 ms at 1,000,000 waiting runs, three pages' worth of time).
#
# approvals_waiting_day holds one counter per (agent, inner run or not, UTC day of suspended_at,
# slot), the slot the run row's id modulo 16 as in approvals_waiting_count (0025), so that concurrent
# parks of one agent, all on today's row, rarely wait on the same counter row. Triggers on
# approvals_run move them in the very statement that parks, claims, reclaims, finishes, deletes or
# re-dates a run, so a listing reads the committed counts of its own snapshot. store/listing.py
# reads them for a deep page (offset >= listing.DEEP_OFFSET) of a listing filtered by agent (and
# inner-run-ness) only; other listings, and SQLite, skip by OFFSET as before. Days no run waits on
# any more are deleted with their last decrement, so the table stays as long as the waiting days.
# The table has no model: only store/listing.py reads it, and only these triggers write it.

from django.db import migrations

SLOTS = 16
DAY = "(suspended_at AT TIME ZONE 'UTC')::date"

POSTGRESQL = f"""
CREATE TABLE approvals_waiting_day (
    agent_id varchar(255) NOT NULL,
    delegated boolean NOT NULL,
    day date NOT NULL,
    slot smallint NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (agent_id, delegated, day, slot)
);
INSERT INTO approvals_waiting_day (agent_id, delegated, day, slot, n)
    SELECT agent_id, parent_run_id IS NOT NULL, {DAY}, id % {SLOTS}, COUNT(*) FROM approvals_run
    WHERE status = 'suspended' GROUP BY 1, 2, 3, 4;
CREATE FUNCTION approvals_waiting_day_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO approvals_waiting_day AS counted (agent_id, delegated, day, slot, n)
    SELECT agent_id, parent_run_id IS NOT NULL, {DAY}, id % {SLOTS}, COUNT(*) FROM inserted
    WHERE status = 'suspended' GROUP BY 1, 2, 3, 4
    ON CONFLICT (agent_id, delegated, day, slot) DO UPDATE SET n = counted.n + excluded.n;
    RETURN NULL;
END $$;
CREATE FUNCTION approvals_waiting_day_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE approvals_waiting_day AS counted SET n = counted.n - gone.n
    FROM (SELECT agent_id, parent_run_id IS NOT NULL AS delegated, {DAY} AS day, id % {SLOTS} AS slot,
                 COUNT(*) AS n
          FROM deleted WHERE status = 'suspended' GROUP BY 1, 2, 3, 4) gone
    WHERE counted.agent_id = gone.agent_id AND counted.delegated = gone.delegated
        AND counted.day = gone.day AND counted.slot = gone.slot;
    DELETE FROM approvals_waiting_day WHERE n = 0 AND (agent_id, delegated, day, slot) IN (
        SELECT agent_id, parent_run_id IS NOT NULL, {DAY}, id % {SLOTS} FROM deleted
        WHERE status = 'suspended');
    RETURN NULL;
END $$;
CREATE FUNCTION approvals_waiting_day_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'suspended' THEN
        UPDATE approvals_waiting_day SET n = n - 1
        WHERE agent_id = OLD.agent_id AND delegated = (OLD.parent_run_id IS NOT NULL)
            AND day = (OLD.suspended_at AT TIME ZONE 'UTC')::date AND slot = OLD.id % {SLOTS};
        DELETE FROM approvals_waiting_day
        WHERE agent_id = OLD.agent_id AND delegated = (OLD.parent_run_id IS NOT NULL)
            AND day = (OLD.suspended_at AT TIME ZONE 'UTC')::date AND slot = OLD.id % {SLOTS} AND n = 0;
    END IF;
    IF NEW.status = 'suspended' THEN
        INSERT INTO approvals_waiting_day AS counted (agent_id, delegated, day, slot, n)
        VALUES (NEW.agent_id, NEW.parent_run_id IS NOT NULL, (NEW.suspended_at AT TIME ZONE 'UTC')::date,
                NEW.id % {SLOTS}, 1)
        ON CONFLICT (agent_id, delegated, day, slot) DO UPDATE SET n = counted.n + 1;
    END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION approvals_waiting_day_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM approvals_waiting_day;
    RETURN NULL;
END $$;
CREATE TRIGGER approvals_run_waiting_day_insert AFTER INSERT ON approvals_run
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_day_inserted();
CREATE TRIGGER approvals_run_waiting_day_delete AFTER DELETE ON approvals_run
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_day_deleted();
CREATE TRIGGER approvals_run_waiting_day_update AFTER UPDATE OF status, agent_id, parent_run_id, suspended_at
    ON approvals_run FOR EACH ROW
    WHEN ((OLD.status = 'suspended' OR NEW.status = 'suspended') AND (
        OLD.status IS DISTINCT FROM NEW.status OR OLD.agent_id IS DISTINCT FROM NEW.agent_id
        OR (OLD.parent_run_id IS NULL) <> (NEW.parent_run_id IS NULL)
        OR OLD.suspended_at IS DISTINCT FROM NEW.suspended_at))
    EXECUTE FUNCTION approvals_waiting_day_updated();
CREATE TRIGGER approvals_run_waiting_day_truncate AFTER TRUNCATE ON approvals_run
    FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_day_truncate();
"""

POSTGRESQL_REVERSE = """
DROP TRIGGER approvals_run_waiting_day_truncate ON approvals_run;
DROP TRIGGER approvals_run_waiting_day_update ON approvals_run;
DROP TRIGGER approvals_run_waiting_day_delete ON approvals_run;
DROP TRIGGER approvals_run_waiting_day_insert ON approvals_run;
DROP FUNCTION approvals_waiting_day_truncate();
DROP FUNCTION approvals_waiting_day_updated();
DROP FUNCTION approvals_waiting_day_deleted();
DROP FUNCTION approvals_waiting_day_inserted();
DROP TABLE approvals_waiting_day;
"""


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRESQL, params=None)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_REVERSE, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0025_waiting_counts"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
