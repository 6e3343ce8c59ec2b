"""Fixtures for the dashboard tests: the test runtime wired in as ``AGENTS_RUNTIME``, and users."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from importlib import import_module
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import Group, User
from django.db.backends.utils import CursorWrapper
from django.test import Client

from approvals import agents as served
from approvals.apps import compose
from approvals.store import DjangoRunStore
from tests.approvals import runtime_fixtures
from tests.approvals.runtime_fixtures import DashboardAgents
from tests.approvals.store_helpers import Clock

PASSWORD = "correct horse battery staple"


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
    settings.AGENTS_RUNTIME = "tests.approvals.runtime_fixtures:runtime"
    compose(built.runtime)
    yield built
    served.install(previous)


def ensure_groups() -> None:
    """Groups come from a data migration; a transactional test's flush removes them, so re-run it."""
    import_module("approvals.migrations.0003_groups").create_groups(django_apps, None)
    import_module("approvals.migrations.0010_admins_manage_users").grant(django_apps, None)
    import_module("approvals.migrations.0018_admins_manage_webhooks").grant(django_apps, None)
    import_module("approvals.migrations.0022_grants").admins_manage_grants(django_apps, None)
    import_module("approvals.migrations.0030_auditors").create_auditors(django_apps, None)


def _user(username: str, *groups: str) -> User:
    ensure_groups()
    user = User.objects.create_user(username=username, password=PASSWORD)
    for name in groups:
        user.groups.add(Group.objects.get(name=name))
    return user


@pytest.fixture
def reviewer(transactional_db: None) -> User:
    return _user("rita", "Reviewers")


@pytest.fixture
def admin_member(transactional_db: None) -> User:
    return _user("ada", "Admins")


@pytest.fixture
def nobody(transactional_db: None) -> User:
    """Logged in, but in no group: sees no agent, may not decide."""
    return _user("nina")


@pytest.fixture
def viewer(transactional_db: None) -> User:
    """In ``agent:helpdesk`` only: may look at that agent's calls, may not decide them."""
    ensure_groups()
    Group.objects.get_or_create(name="agent:helpdesk")
    return _user("vic", "agent:helpdesk")


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


class QueryCounter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sql: list[str] = []

    def __len__(self) -> int:
        return len(self.sql)


def in_background() -> bool:
    """Whether this thread is the app's background work (deliveries, sweeps, batches: threads named
    ``countersign-...``) rather than a request's: what an earlier step of a test set going (a
    notification's sending, say) may still be doing while the step measured runs."""
    name = threading.current_thread().name
    return name.startswith("countersign-") and not name.startswith("countersign-request")


@contextmanager
def count_queries(*, background: bool = True) -> Iterator[QueryCounter]:
    """Count SQL statements on every connection of every thread (the runtime's store runs in
    worker threads, which ``CaptureQueriesContext`` on this thread's connection would miss); with
    ``background=False``, not those of the app's background threads (``in_background``)."""
    counter = QueryCounter()
    original_execute = CursorWrapper._execute
    original_executemany = CursorWrapper._executemany

    def execute(self: CursorWrapper, sql: str, *args: Any, **kwargs: Any) -> Any:
        if background or not in_background():
            with counter.lock:
                counter.sql.append(sql)
        return original_execute(self, sql, *args, **kwargs)

    def executemany(self: CursorWrapper, sql: str, *args: Any, **kwargs: Any) -> Any:
        if background or not in_background():
            with counter.lock:
                counter.sql.append(sql)
        return original_executemany(self, sql, *args, **kwargs)

    CursorWrapper._execute = execute  # type: ignore[method-assign]
    CursorWrapper._executemany = executemany  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        CursorWrapper._execute = original_execute  # type: ignore[method-assign]
        CursorWrapper._executemany = original_executemany  # type: ignore[method-assign]
