"""Fixtures for the runtime suite. Every test that touches storage runs once per store kind.

``STORE_KINDS`` (below) is the hook for more stores. The in-memory reference is always there; the
Django store joins with an entry like this (checked: the whole suite passes with it on SQLite and on
PostgreSQL)::

    def _django(request: pytest.FixtureRequest, lease: timedelta | None) -> RunStore:
        from approvals.store import DjangoRunStore

        return DjangoRunStore(lease)

    STORE_KINDS = {
        "memory": StoreKind(_memory),
        "django": StoreKind(_django, marks=(pytest.mark.django_db(transaction=True),)),
    }

``transaction=True`` because the runtime calls the store from other threads (asgiref's shared thread
for the Django store, called from these async tests), which must see committed rows. Which database
that is follows ``DATABASE_URL`` (SQLite file by default, PostgreSQL in CI).

Tests never reach into a store's internals: they look at storage through the public API
(``list_suspended_runs``) or the ``RunStore`` protocol (``get_run`` ...), always off the event loop
(``helpers.off_loop``), as the runtime itself does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest

from agents_runtime import Agent, InMemoryRunStore, RunStore, Runtime


@dataclass(frozen=True)
class StoreKind:
    #: ``build(request, lease)`` returns a fresh, empty store; ``lease=None`` means the store's default.
    build: Callable[[pytest.FixtureRequest, timedelta | None], RunStore]
    marks: tuple[pytest.MarkDecorator, ...] = ()


def _memory(request: pytest.FixtureRequest, lease: timedelta | None) -> RunStore:
    return InMemoryRunStore() if lease is None else InMemoryRunStore(lease=lease)


def _django(request: pytest.FixtureRequest, lease: timedelta | None) -> RunStore:
    from approvals.store import DjangoRunStore

    return DjangoRunStore(lease)


STORE_KINDS: dict[str, StoreKind] = {
    "memory": StoreKind(_memory),
    # SQLite by default, PostgreSQL when DATABASE_URL says so (CI runs the suite on both).
    "django": StoreKind(_django, marks=(pytest.mark.django_db(transaction=True),)),
}

MakeStore = Callable[..., RunStore]
RuntimeFor = Callable[..., Runtime]


@pytest.fixture(params=[pytest.param(name, marks=kind.marks) for name, kind in STORE_KINDS.items()])
def make_store(request: pytest.FixtureRequest) -> MakeStore:
    """``make_store(lease=None)``: a new empty store of this test's store kind."""
    kind = STORE_KINDS[request.param]

    def make(*, lease: timedelta | None = None) -> RunStore:
        return kind.build(request, lease)

    return make


@pytest.fixture
def store(make_store: MakeStore) -> RunStore:
    return make_store()


@pytest.fixture
def runtime_for(store: RunStore) -> RuntimeFor:
    """``runtime_for(*agents)``: a ``Runtime`` over this test's store. Call it again for a "restart"."""

    def build(*agents: Agent) -> Runtime:
        return Runtime(agents, storage=store)

    return build


@pytest.fixture
def local_time_not_utc() -> Iterator[None]:
    """Run with a local time zone far from UTC, so that "naive means UTC" is really tested."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Kolkata"  # UTC+05:30, no daylight saving
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
