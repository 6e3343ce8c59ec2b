"""Fixed reads (approvals/server/database.py): a read every request or decision makes, compiled once.
``fixed_models`` gives the instances the ORM's own query gives, each field converted as the ORM
converts it (JSON, times), with the objects it selects related, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.db.models import Model

from approvals.models import ApiToken, CallClaim, ExternalAgent, WebhookEndpoint
from approvals.server import database
from approvals.server.database import fixed_models
from approvals.services.tokens import create_token
from tests.support.queries import count_queries

pytestmark = pytest.mark.django_db


def _fields(instance: Model) -> dict[str, object]:
    return {field.attname: getattr(instance, field.attname) for field in instance._meta.concrete_fields}


def test_fixed_models_are_the_instances_the_orm_reads() -> None:
    WebhookEndpoint.objects.create(
        url="https://hooks.example/a",
        events=["run.failed", "call.decided"],
        agents=["helpdesk"],
        created_at=datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC),
    )
    WebhookEndpoint.objects.create(url="https://hooks.example/b", description="every agent", agents=[])
    WebhookEndpoint.objects.create(url="https://hooks.example/off", active=False)

    def active() -> list[WebhookEndpoint]:
        return fixed_models(
            "test endpoints", WebhookEndpoint, lambda: WebhookEndpoint.objects.filter(active=True)
        )

    for _ in range(2):  # compiled the first time, reused the second
        read = active()
        assert [_fields(e) for e in read] == [_fields(e) for e in WebhookEndpoint.objects.filter(active=True)]
    first, second = read
    assert first.events == ["run.failed", "call.decided"] and first.agents == ["helpdesk"]
    assert first.created_at == datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC)
    assert not first.wants("run.completed", "helpdesk") and not first.wants("call.decided", "help")
    assert first.wants("call.decided", "helpdesk") and second.wants("run.completed", "anyone")
    assert not first._state.adding and first._state.db == "default"


def test_fixed_models_fill_what_the_query_selects_related() -> None:
    """An API token's read (``services.tokens.authenticated``, every API request): the token with its
    user and its external agent, or none, as the ORM's ``select_related`` gives them."""
    person = User.objects.create_user("tess", email="tess@example.com", password="x")
    account = User.objects.create_user("external:deployer", password=None)
    agent = ExternalAgent.objects.create(
        agent_id="deployer", tools={"deploy": {"approvals": 2}}, user=account
    )
    person_token = create_token(person, name="laptop").token
    agent_token = create_token(account, name="ci", external_agent=agent).token

    def read(key_id: str) -> list[ApiToken]:
        return fixed_models(
            "test token",
            ApiToken,
            lambda key_id: ApiToken.objects.select_related("user", "external_agent").filter(key_id=key_id),
            key_id=key_id,
        )

    for made in (person_token, agent_token, person_token):
        orm = ApiToken.objects.select_related("user", "external_agent").get(key_id=made.key_id)
        with count_queries() as statements:
            (token,) = read(made.key_id)
            related = (token.user, token.external_agent)  # (filled by the read: no query of their own)
        assert len(statements) == 1
        assert _fields(token) == _fields(orm) and _fields(related[0]) == _fields(orm.user)
        assert (related[1] is None) == (orm.external_agent is None)
        if related[1] is not None:
            assert _fields(related[1]) == _fields(orm.external_agent)
            assert related[1].tools == {"deploy": {"approvals": 2}}
    assert read("no-such-key") == []


def test_a_list_of_values_reads_what_the_orms_in_lookup_reads_whatever_its_length() -> None:
    """A page's claims (``queries.call_claims``): the ids of the runs on the page, as many as the page
    holds, compiled once for each length; each id goes to its own place."""
    now = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    rita = User.objects.create_user("rita", password=None)
    for run, call, expires in [("r1", "c1", 60), ("r2", "c1", 60), ("r2", "c2", -60), ("r3", "c1", 60)]:
        CallClaim.objects.create(
            agent_id="helpdesk",
            run_id=run,
            tool_call_id=call,
            user=rita,
            username="rita",
            claimed_at=now,
            expires_at=now + timedelta(seconds=expires),
        )

    def read(run_ids: list[str]) -> list[tuple[str, str]]:
        live = fixed_models(
            "test claims",
            CallClaim,
            lambda run_ids, now: CallClaim.objects.filter(run_id__in=run_ids, expires_at__gt=now),
            run_ids=run_ids,
            now=now,
        )
        return sorted((c.run_id, c.tool_call_id) for c in live)

    for run_ids in (["r2"], ["r1", "r3"], ["r3", "r1"], ["nope", "r3"], ["r1", "r2", "r3"], ["r1"]):
        orm = CallClaim.objects.filter(run_id__in=run_ids, expires_at__gt=now)
        assert read(run_ids) == sorted((c.run_id, c.tool_call_id) for c in orm), run_ids
    assert read(["r1", "r2", "r3"]) == [("r1", "c1"), ("r2", "c1"), ("r3", "c1")]
    # Longer than any page: read as well, but not kept (one compiled read a length would have no bound).
    longer = [f"x{n}" for n in range(database.LONGEST_KEPT_LIST)] + ["r3"]
    kept = len(database._fixed)
    assert read(longer) == [("r3", "c1")] and len(database._fixed) == kept
