"""Fixtures for the dashboard tests: the test runtime wired in as ``AGENTS_RUNTIME``, and users."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from approvals import agents as served
from approvals.apps import compose
from approvals.store import DjangoRunStore
from tests.support import runtime_fixtures
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.store_helpers import Clock
from tests.support.users import ensure_groups, make_user


@pytest.fixture
def clock() -> Clock:
    """A clock the test moves by hand (leases, deadlines)."""
    return Clock()


@pytest.fixture
def store(clock: Clock) -> DjangoRunStore:
    """The database store with a 30-second lease on ``clock`` (a module may define its own)."""
    return DjangoRunStore(timedelta(seconds=30), clock=clock)


@pytest.fixture
def agents(settings: Any, transactional_db: None) -> Iterator[DashboardAgents]:
    """The test runtime, served by the dashboard (the runtime writes from worker threads: real commits)."""
    built = runtime_fixtures.build_runtime()
    previous = served.runtime()
    # What ApprovalsConfig.ready() does with AGENTS_RUNTIME (multi-process tests name this module).
    settings.AGENTS_RUNTIME = "tests.support.runtime_fixtures:runtime"
    compose(built.runtime)
    yield built
    served.install(previous)


@pytest.fixture
def reviewer(transactional_db: None) -> User:
    return make_user("rita", "Reviewers")


@pytest.fixture
def admin_member(transactional_db: None) -> User:
    return make_user("ada", "Admins")


@pytest.fixture
def nobody(transactional_db: None) -> User:
    """Logged in, but in no group: sees no agent, may not decide."""
    return make_user("nina")


@pytest.fixture
def viewer(transactional_db: None) -> User:
    """In ``agent:helpdesk`` only: may look at that agent's calls, may not decide them."""
    ensure_groups()
    Group.objects.get_or_create(name="agent:helpdesk")
    return make_user("vic", "agent:helpdesk")


@pytest.fixture
def client_for() -> Callable[[User], Client]:
    def make(user: User, **kwargs: Any) -> Client:
        client = Client(**kwargs)
        client.force_login(user)
        return client

    return make


@pytest.fixture
def reviewer_client(reviewer: User, client_for: Callable[..., Client]) -> Client:
    return client_for(reviewer)


@pytest.fixture
def admin_member_client(admin_member: User, client_for: Callable[..., Client]) -> Client:
    return client_for(admin_member)
