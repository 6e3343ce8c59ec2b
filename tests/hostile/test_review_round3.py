"""Review of the third round (open waits, nested mirrors' owners, votes and grants, live escalations):
the defects found, each with the test that showed it."""

from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.apps import apps as django_apps
from django.core.cache import cache
from django.db import connection
from django.test import Client

from approvals.models import GrantRecord, ParkedCallRecord
from approvals.services import waits
from tests.approvals.conftest import agents  # noqa: F401 - the dashboard's runtime fixture
from tests.approvals.views.test_rules_views import add_rule, approve_url
from tests.hostile.test_nested_namesakes import Tower, tower  # noqa: F401 - its fixture
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import make_user

HX: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}


# -- approve and allow: the vote that completes a quorum is a vote too -------------------------------


def test_the_vote_that_completes_a_routed_quorum_makes_no_standing_grant(
    agents: DashboardAgents,  # noqa: F811
    admin_member_client: Client,
    reviewer_client: Client,
    client_for: Any,
) -> None:
    """A rule asks for two approvals: the first voter's forged "approve and allow" makes no grant,
    and neither may the second's, whose vote completes the two: the grant would let one person
    approve every such call from then on (no rule asks again), what two people had to do."""
    add_rule(admin_member_client, "two", 'note == "big"')
    run = agents.start("helpdesk", "refund big", thread="t-2")
    call = run.tool_calls[0]
    first = reviewer_client.post(approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk"}, **HX)
    assert "Vote recorded" in first.content.decode()

    forged = {"agent": "helpdesk", "grant-scope": "thread", "grant-lasts": "1h", "grant-uses": ""}
    forged |= {"grant-condition": ""}
    sam = client_for(make_user("sam", "Reviewers"))
    second = sam.post(approve_url(run.run_id, call.tool_call_id), forged, **HX).content.decode()

    assert agents.executed["refund"].count == 1, second  # (the two approvals took the call)
    assert not GrantRecord.objects.exists(), "the vote completing a two-person approval made a grant"
    assert "Allowed from now on" not in second and "No standing grant" in second


# -- migration 0055 on rows of odd shapes ----------------------------------------------------------


def _migrate_0055() -> None:
    migration = import_module("approvals.migrations.0055_nested_mirrors_owner")
    migration.owners_of_nested_mirrors(django_apps, SimpleNamespace(connection=connection))


def test_migration_0055_passes_over_a_mirror_whose_delegation_has_odd_shapes(tower: Tower) -> None:  # noqa: F811
    """A stored delegation whose ids are JSON lists or objects (the store reads them as text) must
    not stop the upgrade (``TypeError: unhashable type``), and the other rows are still fixed."""
    run_id, call = tower.start("pay")
    row = ParkedCallRecord.objects.get(run__run_id=run_id, tool_call_id=call.tool_call_id)
    row.delegation = {**(row.delegation or {}), "agent_id": "ops"}
    row.save(update_fields=["delegation"])
    # (Another row of the same tree, the leaf's own call, with a delegation of odd shapes.)
    leaf = ParkedCallRecord.objects.filter(run__agent_id="treasury").get()
    leaf.delegation = {"tool_call_id": "t", "inner_run_id": ["x"], "inner_tool_call_id": {"a": 1}}
    leaf.save(update_fields=["delegation"])

    _migrate_0055()

    row.refresh_from_db()
    assert row.delegation["agent_id"] == "treasury"


# -- open waits: a slot gives back its own place only ----------------------------------------------


def test_a_slot_whose_key_went_does_not_free_the_wait_that_took_its_place(settings: Any) -> None:
    """A slot's key can go before its answer ends: evicted by a full local-memory cache (or a Redis
    at ``maxmemory``), or expired under a stream that outlived ``slot_seconds()`` (an approval's
    continuation streams for as long as the run goes, then the reviewer wait). Another wait of the
    account then takes the same key; the first answer's end must not delete it, or the account keeps
    two answers open on a limit of one, and with each such turn one more."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "review-round3-waits",
            "OPTIONS": {"MAX_ENTRIES": 3, "CULL_FREQUENCY": 1},
        }
    }
    settings.API_OPEN_WAITS_PER_CALLER = 1
    first = async_to_sync(waits.take)("ada")
    for n in range(3):  # (other users of the cache: the decision rate limit, the health page)
        cache.set(f"other:{n}", n)
    assert cache.get(str(first.key)) is None  # (the full cache let the slot's key go)
    second = async_to_sync(waits.take)("ada")

    first.release()  # the first answer ends

    with pytest.raises(waits.TooManyWaits):
        async_to_sync(waits.take)("ada")
    second.release()
    async_to_sync(waits.take)("ada").release()
