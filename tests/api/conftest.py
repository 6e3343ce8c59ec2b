"""Fixtures for the API tests: the recording's agents served as ``AGENTS_RUNTIME``, users and tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from agents_runtime import Runtime
from approvals import agents as served
from approvals.apps import compose
from approvals.services.tokens import create_token
from tests.approvals.conftest import agents  # noqa: F401 - the dashboard's test agents, for tests of both APIs
from tests.support import mastra_agents
from tests.support.users import make_user


@pytest.fixture
def mastra(settings: Any, transactional_db: None) -> Iterator[Runtime]:
    """``approver``, ``asker`` and ``nomem``, served by the app (fresh call counters per test)."""
    built = mastra_agents.build()
    previous = served.runtime()
    mastra_agents.runtime = built
    settings.AGENTS_RUNTIME = "tests.support.mastra_agents:runtime"
    compose(built)
    yield built
    served.install(previous)


@pytest.fixture
def reviewer(transactional_db: None) -> User:
    return make_user("rita", "Reviewers")


@pytest.fixture
def token_for() -> Callable[[User], str]:
    def make(user: User) -> str:
        return create_token(user, name="test").plaintext

    return make


@pytest.fixture
def reviewer_token(reviewer: User, token_for: Callable[[User], str]) -> str:
    return token_for(reviewer)


@pytest.fixture
def designated(transactional_db: None) -> User:
    """A reviewer of ``asker`` only (group ``agent:asker`` with the decide permission via Reviewers)."""
    Group.objects.get_or_create(name="agent:asker")
    return make_user("dora", "Reviewers", "agent:asker")
