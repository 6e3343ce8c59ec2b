# How many runs wait per agent on an undecided call of each tool, and of each kind (PostgreSQL only):
# the exact ``total`` of a listing filtered by tool or by kind (the inbox's filters) without counting
# its matches on every request. Counted from 0049's indexes, that total grew with the matches: at a
# million waiting runs it was nearly all of such a listing's time (docs/scaling.md).
#
# A run waits on a tool (or kind) while it is suspended and one of its calls of that tool (or kind)
# is undecided: a fact of two tables. Triggers on both that each looked at the other table would
# see its change of the same statement already made (the decision is one statement that updates the
# call and the run, on PostgreSQL), and count a run twice or not at all. So the run row keeps the
# keys it is counted under: ``waiting_keys``, the sorted keys ("tool:<name>", "kind:<kind>") of its
# undecided calls, and the counters are the sum of the waiting runs' kept keys. Triggers on
# approvals_parked_call (whichever code writes the calls) give a run its keys again and, if it
# waits, move its counters from the keys kept to the new ones; the run rows' own triggers move its
# kept keys' counters when it starts or stops waiting, as 0025's and 0027's do. Each move is from
# what the counters hold to what they should, whichever of the two triggers of a statement fires
# first.
#
# approvals_waiting_call holds one counter per (agent, key, inner run or not, slot), the slot the
# run row's id modulo 16 as in 0025 (an agent's calls of one tool are decided as often as its runs
# are). A counter that reaches 0 is deleted: tool names come from agents outside (approval
# requests), so the table stays as long as the keys waited on, not every key there ever was.
# store.py (``_keyed_counter``) reads it for a listing filtered by tool alone or by kind alone; other
# listings, and SQLite, count their matches as before. ``waiting_keys`` is not a model field: only
# these triggers write it and nothing reads it but them.

from django.db import migrations

SLOTS = 16
CALLS = "approvals_parked_call"

# The keys of a run's undecided calls, sorted, each once (``{run}``: the run's id).
_KEYS_OF = f"""ARRAY(
    SELECT 'tool:' || c.tool_name FROM {CALLS} c WHERE c.run_id = {{run}} AND c.action IS NULL
    UNION SELECT 'kind:' || c.kind FROM {CALLS} c WHERE c.run_id = {{run}} AND c.action IS NULL
    ORDER BY 1)"""

# Calls inserted, changed or deleted (``{rows}``: their run ids) give their runs their keys again
# and move the counters of those that wait from the keys kept to the new ones, in one statement for
# all the runs (not through the run rows' trigger: a bulk load's million row-level moves of a few
# counter rows in one transaction would chain a million row versions of them, each move walking the
# chain). A counter that reaches 0 is then deleted, unless another transaction moved it meanwhile.
# The keys kept are read before the run row is locked: the store's writers of a run's calls take the
# run row first (a decision's statement updates it, a claim or a new park locks it), so two
# transactions never move one run's counters from the same keys.
_CALLS_CHANGED = f"""
CREATE FUNCTION approvals_waiting_call_{{op}}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    zero_agents text[];
    zero_keys text[];
    zero_delegated boolean[];
    zero_slots smallint[];
BEGIN
    WITH touched AS MATERIALIZED (
        -- (Each run's keys from its calls' index, whatever the planner believes of the tables'
        -- sizes: a join of the runs with their calls grouped was planned as a loop over both.)
        SELECT r.id, r.agent_id, r.parent_run_id IS NOT NULL AS delegated, r.status,
            r.waiting_keys AS old_keys, {_KEYS_OF.format(run="r.id")} AS new_keys
        FROM approvals_run r WHERE r.id IN (SELECT run_id FROM {{rows}})
    ), changed AS (
        SELECT * FROM touched WHERE old_keys IS DISTINCT FROM new_keys
    ), kept AS (
        UPDATE approvals_run r SET waiting_keys = changed.new_keys FROM changed WHERE r.id = changed.id
    ), moved AS (
        INSERT INTO approvals_waiting_call AS counted (agent_id, key, delegated, slot, n)
        SELECT agent_id, key, delegated, slot, SUM(n) FROM (
            SELECT agent_id, unnest(old_keys) AS key, delegated, id % {SLOTS} AS slot, -1 AS n
            FROM changed WHERE status = 'suspended'
            UNION ALL SELECT agent_id, unnest(new_keys), delegated, id % {SLOTS}, 1
            FROM changed WHERE status = 'suspended') moves
        GROUP BY 1, 2, 3, 4 HAVING SUM(n) <> 0
        ON CONFLICT (agent_id, key, delegated, slot) DO UPDATE SET n = counted.n + excluded.n
        RETURNING agent_id, key, delegated, slot, n
    )
    SELECT array_agg(agent_id), array_agg(key), array_agg(delegated), array_agg(slot)
    INTO zero_agents, zero_keys, zero_delegated, zero_slots FROM moved WHERE n = 0;
    IF zero_agents IS NOT NULL THEN
        DELETE FROM approvals_waiting_call w
        USING unnest(zero_agents, zero_keys, zero_delegated, zero_slots) z(agent_id, key, delegated, slot)
        WHERE w.agent_id = z.agent_id AND w.key = z.key AND w.delegated = z.delegated
            AND w.slot = z.slot AND w.n = 0;
    END IF;
    RETURN NULL;
END $$;
"""

# A counter moved by n for each (agent, key, inner run or not, slot) of ``moves``; one left at 0 is
# deleted. (The same counter row twice in one INSERT ... ON CONFLICT is an error: grouped first.)
_MOVE = """
    INSERT INTO approvals_waiting_call AS counted (agent_id, key, delegated, slot, n)
    SELECT agent_id, key, delegated, slot, SUM(n) FROM ({moves}) moves
    GROUP BY 1, 2, 3, 4 HAVING SUM(n) <> 0
    ON CONFLICT (agent_id, key, delegated, slot) DO UPDATE SET n = counted.n + excluded.n;
    DELETE FROM approvals_waiting_call WHERE n = 0 AND (agent_id, key) IN (
        SELECT agent_id, key FROM ({moves}) moves);
"""


# A run row's moves in a row trigger: its old version's keys out, its new version's in (in an
# INSERT trigger OLD is NULL, in a DELETE trigger NEW: their part moves nothing).
_ROW_MOVES = " UNION ALL ".join(
    f"SELECT {row}.agent_id AS agent_id, unnest({row}.waiting_keys) AS key,"
    f" {row}.parent_run_id IS NOT NULL AS delegated, {row}.id % {SLOTS} AS slot, {sign} AS n"
    f" WHERE {row}.status = 'suspended'"
    for row, sign in (("OLD", -1), ("NEW", 1))
)


#: A row trigger's condition that this version of a run counts (it waits, on some key).
_COUNTS = "({row}.status = 'suspended' AND cardinality({row}.waiting_keys) > 0)"

POSTGRESQL = f"""
ALTER TABLE approvals_run ADD COLUMN waiting_keys text[] NOT NULL DEFAULT '{{}}';
UPDATE approvals_run SET waiting_keys = {_KEYS_OF.format(run="approvals_run.id")}
    WHERE id IN (SELECT run_id FROM {CALLS} WHERE action IS NULL);
CREATE TABLE approvals_waiting_call (
    agent_id varchar(255) NOT NULL,
    key text NOT NULL,
    delegated boolean NOT NULL,
    slot smallint NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (agent_id, key, delegated, slot)
);
INSERT INTO approvals_waiting_call (agent_id, key, delegated, slot, n)
    SELECT agent_id, unnest(waiting_keys), parent_run_id IS NOT NULL, id % {SLOTS}, COUNT(*)
    FROM approvals_run WHERE status = 'suspended' GROUP BY 1, 2, 3, 4;

-- The calls' side. Inserts, once per statement (a bulk load's million calls move the counters
-- once); a call decided, renamed or deleted while undecided, per row, and only then: a decision
-- pays for the one call it decides, and nothing else a call's row goes through (its tool started,
-- a vote, an escalation, its decided rows deleted with their run) fires at all. Each firing reads
-- the run's calls as they are now, so two rows of one statement give the same answer, once.
{_CALLS_CHANGED.format(op="inserted", rows="inserted")}
{_CALLS_CHANGED.format(op="changed", rows="(SELECT OLD.run_id AS run_id UNION SELECT NEW.run_id) called")}
CREATE TRIGGER approvals_call_waiting_insert AFTER INSERT ON {CALLS}
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_call_inserted();
CREATE TRIGGER approvals_call_waiting_update AFTER UPDATE OF action, tool_name, kind, run_id ON {CALLS}
    FOR EACH ROW WHEN ((OLD.action IS NULL OR NEW.action IS NULL) AND (
        (OLD.action IS NULL) <> (NEW.action IS NULL) OR OLD.tool_name <> NEW.tool_name
        OR OLD.kind <> NEW.kind OR OLD.run_id <> NEW.run_id))
    EXECUTE FUNCTION approvals_waiting_call_changed();
CREATE TRIGGER approvals_call_waiting_delete AFTER DELETE ON {CALLS}
    FOR EACH ROW WHEN (OLD.action IS NULL) EXECUTE FUNCTION approvals_waiting_call_changed();

-- The runs' side: a run that starts or stops waiting, or changes agent, moves the counters of the
-- keys it holds (never its keys alone: only the calls' triggers above change them, and count). A
-- run parks with no keys (its calls come next) and ends running: neither fires. A run deleted
-- while it waits is counted out here; its calls, deleted with it, find no run to count.
CREATE FUNCTION approvals_waiting_call_run_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{_MOVE.format(moves=_ROW_MOVES)}
    RETURN NULL;
END $$;
CREATE FUNCTION approvals_waiting_call_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM approvals_waiting_call;
    RETURN NULL;
END $$;
CREATE TRIGGER approvals_run_waiting_call_insert AFTER INSERT ON approvals_run FOR EACH ROW
    WHEN {_COUNTS.format(row="NEW")} EXECUTE FUNCTION approvals_waiting_call_run_moved();
CREATE TRIGGER approvals_run_waiting_call_delete AFTER DELETE ON approvals_run FOR EACH ROW
    WHEN {_COUNTS.format(row="OLD")} EXECUTE FUNCTION approvals_waiting_call_run_moved();
CREATE TRIGGER approvals_run_waiting_call_update
    AFTER UPDATE OF status, agent_id, parent_run_id ON approvals_run FOR EACH ROW
    WHEN (({_COUNTS.format(row="OLD")} OR {_COUNTS.format(row="NEW")}) AND (
        OLD.status IS DISTINCT FROM NEW.status OR OLD.agent_id IS DISTINCT FROM NEW.agent_id
        OR (OLD.parent_run_id IS NULL) <> (NEW.parent_run_id IS NULL)))
    EXECUTE FUNCTION approvals_waiting_call_run_moved();
CREATE TRIGGER approvals_run_waiting_call_truncate AFTER TRUNCATE ON approvals_run
    FOR EACH STATEMENT EXECUTE FUNCTION approvals_waiting_call_truncate();
"""

POSTGRESQL_REVERSE = f"""
DROP TRIGGER approvals_run_waiting_call_truncate ON approvals_run;
DROP TRIGGER approvals_run_waiting_call_update ON approvals_run;
DROP TRIGGER approvals_run_waiting_call_delete ON approvals_run;
DROP TRIGGER approvals_run_waiting_call_insert ON approvals_run;
DROP TRIGGER approvals_call_waiting_delete ON {CALLS};
DROP TRIGGER approvals_call_waiting_update ON {CALLS};
DROP TRIGGER approvals_call_waiting_insert ON {CALLS};
DROP FUNCTION approvals_waiting_call_truncate();
DROP FUNCTION approvals_waiting_call_run_moved();
DROP FUNCTION approvals_waiting_call_changed();
DROP FUNCTION approvals_waiting_call_inserted();
DROP TABLE approvals_waiting_call;
ALTER TABLE approvals_run DROP COLUMN waiting_keys;
"""


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRESQL, params=None)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_REVERSE, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0049_filter_total_indexes"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
