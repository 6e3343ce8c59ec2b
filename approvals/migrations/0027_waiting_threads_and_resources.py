# How many runs wait per agent and thread, and per agent and end user (PostgreSQL only): the exact
# ``total`` of a listing filtered by thread or by end user without counting the filter's index
# entries on every request (4,000 waiting runs of one thread at 1,000,000: ~2 ms a listing, a third
# of it, and growing with the thread).
#
# approvals_waiting_thread holds one counter per (agent, inner run or not, thread) that has a waiting
# run, approvals_waiting_resource the same per end user (resource). Runs without a thread (or end
# user) are not counted there. Triggers on approvals_run move them in the very statement that parks,
# claims, reclaims, finishes, deletes or moves a run, whichever code writes it, as 0025's do for the
# agent's counters, so a listing reads the committed counts of its own snapshot. A counter whose last
# run stops waiting is deleted with it: the tables stay as long as the threads and end users waited
# on, not as every thread there ever was. No slots (0025 spreads an agent's counter over 16 rows):
# parks on one thread or end user are few at a time, and each statement holds its row briefly.
# store/listing.py reads them for a listing filtered by thread or by end user alone (with the
# agent and inner-run-ness); other listings, and SQLite, count their matches as before.
# The tables have no model: only store/listing.py reads them, and only these triggers write them.

from collections.abc import Callable

from django.db import migrations

KEYS = {"thread": "thread_id", "resource": "resource_id"}


def _table(kind: str) -> str:
    return f"approvals_waiting_{kind}"


def _create(kind: str, column: str) -> str:
    table = _table(kind)
    return f"""
CREATE TABLE {table} (
    agent_id varchar(255) NOT NULL,
    {column} varchar(255) NOT NULL,
    delegated boolean NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (agent_id, {column}, delegated)
);
INSERT INTO {table} (agent_id, {column}, delegated, n)
    SELECT agent_id, {column}, parent_run_id IS NOT NULL, COUNT(*) FROM approvals_run
    WHERE status = 'suspended' AND {column} IS NOT NULL GROUP BY 1, 2, 3;
"""


def _inserted(kind: str, column: str) -> str:
    return f"""
    INSERT INTO {_table(kind)} AS counted (agent_id, {column}, delegated, n)
    SELECT agent_id, {column}, parent_run_id IS NOT NULL, COUNT(*) FROM inserted
    WHERE status = 'suspended' AND {column} IS NOT NULL GROUP BY 1, 2, 3
    ON CONFLICT (agent_id, {column}, delegated) DO UPDATE SET n = counted.n + excluded.n;
"""


def _deleted(kind: str, column: str) -> str:
    table = _table(kind)
    return f"""
    UPDATE {table} AS counted SET n = counted.n - gone.n
    FROM (SELECT agent_id, {column}, parent_run_id IS NOT NULL AS delegated, COUNT(*) AS n
          FROM deleted WHERE status = 'suspended' AND {column} IS NOT NULL GROUP BY 1, 2, 3) gone
    WHERE counted.agent_id = gone.agent_id AND counted.{column} = gone.{column}
        AND counted.delegated = gone.delegated;
    DELETE FROM {table} WHERE n = 0 AND (agent_id, {column}, delegated) IN (
        SELECT agent_id, {column}, parent_run_id IS NOT NULL FROM deleted
        WHERE status = 'suspended' AND {column} IS NOT NULL);
"""


def _updated(kind: str, column: str) -> str:
    # The last waiting run of a thread takes its counter with it in one statement (the usual case: a
    # thread waits on one run at a time); otherwise the counter goes down by one, and is deleted if
    # that was its last (a concurrent decrement the DELETE did not see, committed while it waited).
    table = _table(kind)
    key = (
        f"agent_id = OLD.agent_id AND {column} = OLD.{column} AND delegated = (OLD.parent_run_id IS NOT NULL)"
    )
    return f"""
    IF OLD.status = 'suspended' AND OLD.{column} IS NOT NULL THEN
        DELETE FROM {table} WHERE {key} AND n = 1;
        IF NOT FOUND THEN
            UPDATE {table} SET n = n - 1 WHERE {key} RETURNING n INTO remaining;
            IF remaining = 0 THEN  -- another run of it stopped waiting meanwhile
                DELETE FROM {table} WHERE {key};
            END IF;
        END IF;
    END IF;
    IF NEW.status = 'suspended' AND NEW.{column} IS NOT NULL THEN
        INSERT INTO {table} AS counted (agent_id, {column}, delegated, n)
        VALUES (NEW.agent_id, NEW.{column}, NEW.parent_run_id IS NOT NULL, 1)
        ON CONFLICT (agent_id, {column}, delegated) DO UPDATE SET n = counted.n + 1;
    END IF;
"""


def _each(step: Callable[[str, str], str]) -> str:
    return "".join(step(kind, column) for kind, column in KEYS.items())


POSTGRESQL = f"""
{_each(_create)}
-- Inserts and deletes: once per statement, from its transition table (a bulk load or a cascade is
-- one update per counter, not one per row).
CREATE FUNCTION approvals_waiting_keys_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{_each(_inserted)}
    RETURN NULL;
END $$;
CREATE FUNCTION approvals_waiting_keys_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{_each(_deleted)}
    RETURN NULL;
END $$;
-- Updates (a park, claim or reclaim moves one run): per row, only when it waits before or after
-- and its status, agent, inner-run-ness, thread or end user changes.
CREATE FUNCTION approvals_waiting_keys_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    remaining bigint;
BEGIN
{_each(_updated)}
    RETURN NULL;
END $$;
CREATE FUNCTION approvals_waiting_keys_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {_table("thread")};
    DELETE FROM {_table("resource")};
    RETURN NULL;
END $$;
CREATE TRIGGER approvals_run_waiting_keys_insert AFTER INSERT ON approvals_run
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_keys_inserted();
CREATE TRIGGER approvals_run_waiting_keys_delete AFTER DELETE ON approvals_run
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_keys_deleted();
CREATE TRIGGER approvals_run_waiting_keys_update
    AFTER UPDATE OF status, agent_id, parent_run_id, thread_id, resource_id ON approvals_run FOR EACH ROW
    WHEN ((OLD.status = 'suspended' OR NEW.status = 'suspended') AND (
        OLD.status IS DISTINCT FROM NEW.status OR OLD.agent_id IS DISTINCT FROM NEW.agent_id
        OR (OLD.parent_run_id IS NULL) <> (NEW.parent_run_id IS NULL)
        OR OLD.thread_id IS DISTINCT FROM NEW.thread_id
        OR OLD.resource_id IS DISTINCT FROM NEW.resource_id))
    EXECUTE FUNCTION approvals_waiting_keys_updated();
CREATE TRIGGER approvals_run_waiting_keys_truncate AFTER TRUNCATE ON approvals_run
    FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_keys_truncate();
"""

POSTGRESQL_REVERSE = f"""
DROP TRIGGER approvals_run_waiting_keys_truncate ON approvals_run;
DROP TRIGGER approvals_run_waiting_keys_update ON approvals_run;
DROP TRIGGER approvals_run_waiting_keys_delete ON approvals_run;
DROP TRIGGER approvals_run_waiting_keys_insert ON approvals_run;
DROP FUNCTION approvals_waiting_keys_truncate();
DROP FUNCTION approvals_waiting_keys_updated();
DROP FUNCTION approvals_waiting_keys_deleted();
DROP FUNCTION approvals_waiting_keys_inserted();
DROP TABLE {_table("resource")};
DROP TABLE {_table("thread")};
"""


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRESQL, params=None)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_REVERSE, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0026_waiting_days"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
