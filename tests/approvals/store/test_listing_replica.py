"""Listings from a read replica (``DATABASE_REPLICA_URL``): the run store reads its listings there and
everything else (a run by id, decisions) on the primary. Two real databases in a real process; here
they are two SQLite files holding different runs, so where each answer came from shows."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support import templates, zygote
from tests.support.server import TEST_SETTINGS

PROBE = """
import json, django
django.setup()
from django.conf import settings
from agents_runtime.store import RunQuery
from approvals import agents
from approvals.store import DjangoRunStore
from tests.support.store_helpers import approval, decision, suspension
store = agents.runtime().storage
store.insert_suspended(suspension("on-primary", calls=[approval("c1")]))
if "replica" in settings.DATABASES:
    DjangoRunStore(using="replica").insert_suspended(suspension("on-replica", calls=[approval("c2")]))
runs, total = store.list_suspended(RunQuery(agent_id="support", limit=10))
receipt = store.decide(agent_id="support", run_id="on-primary", rule=lambda run: ("c1", decision()))
print(json.dumps({
    "listed": [r.run_id for r in runs],
    "total": total,
    "read_by_id": [i for i in ("on-primary", "on-replica") if store.get_run(i) is not None],
    "decided": receipt.claimed_version is not None,
}))
"""


def _probe(tmp_path: Path, replica: bool) -> dict[str, object]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_REPLICA_URL", "REDIS_URL")
    }
    env |= {
        "DJANGO_SETTINGS_MODULE": TEST_SETTINGS,
        "DATABASE_URL": f"sqlite:///{tmp_path}/primary.sqlite3",
    }
    # Both migrated (a copy of a database `manage.py migrate` made once); a real replica has the
    # primary's schema.
    templates.migrated(env["DATABASE_URL"], env)
    if replica:
        env["DATABASE_REPLICA_URL"] = f"sqlite:///{tmp_path}/replica.sqlite3"
        templates.migrated(env["DATABASE_REPLICA_URL"], env)
    done = zygote.zygote.run([sys.executable, "-c", PROBE], env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def test_listings_come_from_the_replica_and_the_rest_from_the_primary(tmp_path: Path) -> None:
    assert _probe(tmp_path, replica=True) == {
        "listed": ["on-replica"],
        "total": 1,
        "read_by_id": ["on-primary"],
        "decided": True,
    }


def test_without_a_replica_everything_is_the_primary(tmp_path: Path) -> None:
    assert _probe(tmp_path, replica=False) == {
        "listed": ["on-primary"],
        "total": 1,
        "read_by_id": ["on-primary"],
        "decided": True,
    }
