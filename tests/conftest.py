"""Generic hooks and fixtures for the whole suite. Package-specific fixtures live next to their tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support import services, templates, zygote
from tests.support.browsers import launcher

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def _keep_bytecode() -> None:
    """Compiled modules are kept (``__pycache__``), whatever ``PYTHONDONTWRITEBYTECODE`` says.

    Some machines set it (this project's CI does). Then every process the suite starts — the
    workers, each Daphne, each ``manage.py`` the zygote forks, a few hundred in all — compiles the
    project's modules from source again, and pytest rewrites every test module again in each
    worker (docs/scaling.md, "The cost of a test run"). The variable is cleared here, before the
    test modules are imported and the workers and processes start, so all of them read and write
    the same caches.
    """
    if os.environ.get("PYTHONDONTWRITEBYTECODE") or sys.dont_write_bytecode:
        os.environ["PYTHONDONTWRITEBYTECODE"] = ""
        sys.dont_write_bytecode = False


_keep_bytecode()


def _own_secret_key() -> None:
    """Tests run with DEBUG off, as production does, so they bring a SECRET_KEY of their own as a
    deployment must (the servers refuse the public default: ``approvals/checks.py``). The processes
    they start (Daphne, ``manage.py``) inherit it through the environment."""
    from django.conf import settings

    from approvals.checks import public_secret_key

    if public_secret_key():
        settings.SECRET_KEY = os.environ["SECRET_KEY"] = "countersign-tests-" + "k" * 50


_own_secret_key()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Run SQLite tests on a file in this session's temp dir, not Django's default in-memory database.

    A file behaves like production (WAL, IMMEDIATE transactions, a busy timeout instead of shared-cache
    table locks), lets threads (Channels' database_sync_to_async) and subprocesses (Daphne, race tests)
    open the same test database, and cannot clash with another pytest run in the same checkout.
    """
    from django.conf import settings

    database = settings.DATABASES["default"]
    test = database.setdefault("TEST", {})
    if database["ENGINE"] == "django.db.backends.sqlite3" and not test.get("NAME"):
        test["NAME"] = str(tmp_path_factory.mktemp("sqlite") / "test_countersign.sqlite3")


@pytest.fixture(scope="session", autouse=True)
def _no_expiry_sweep() -> Iterator[None]:
    """The ASGI app starts the expiry sweep when it first serves: not in this process (tests that
    use the app in-process would leave its thread running). Tests run a ``Sweeper`` of their own."""
    from django.conf import settings

    settings.EXPIRY_SWEEP = "off"
    yield


@pytest.fixture(autouse=True)
def _no_address_served() -> Iterator[None]:
    """Each test starts as a process that has served no page (``approvals.site``): the address a
    test's pages were served at (testserver) is no other test's link address."""
    from approvals import site

    site.forget()
    yield
    site.forget()


@pytest.fixture(autouse=True)
def _an_empty_cache() -> Iterator[None]:
    """Each test starts with this process's cache empty: an earlier test's rate-limit window, open
    wait (a streamed answer left unread, which the test client never closes as a server does) or
    cached health figures are no later test's."""
    from django.core.cache import cache

    cache.clear()
    yield


@pytest.fixture(autouse=True)
def _no_refunds_yet() -> Iterator[None]:
    """Each test starts with the demo's orders as refunded by none of its refunds: what is left to
    refund on an order (``demo.tools.REFUNDED_CENTS``) is in the previews tests read."""
    from demo import tools

    tools.REFUNDED_CENTS.clear()
    yield
    tools.REFUNDED_CENTS.clear()


@pytest.fixture(autouse=True)
def _no_sender_left() -> Iterator[None]:
    """No delivery's sender thread outlives its test (``deliveries.stop_senders``): one asleep until
    its retry would wake in a later test and send that test's row of the same id, or at the end of
    the run, with its database gone."""
    from approvals.outbound import deliveries

    yield
    deliveries.stop_senders()


@pytest.fixture(scope="session", autouse=True)
def _decisions_at_once() -> Iterator[None]:
    """Browser decisions are taken at once in tests (production holds them 5 s for Undo): the suite's
    tests of cards, keys and races expect a click's effect in its answer. The undo window's own tests
    set ``DECISION_UNDO_SECONDS`` themselves; the servers tests start inherit this one."""
    from django.conf import settings

    settings.DECISION_UNDO_SECONDS = 0
    os.environ["DECISION_UNDO_SECONDS"] = "0"
    yield


@pytest.fixture(scope="session", autouse=True)
def _nothing_collected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Pages name the static files by their plain names, whatever var/static holds.

    A manifest there (from `make run DEBUG=false`) would date from then, and a page naming a static
    file added since would fail. Tests of collected files collect into a directory of their own.
    """
    from django.test import override_settings

    with override_settings(STATIC_ROOT=tmp_path_factory.mktemp("static_root")):
        yield


@pytest.fixture(scope="session", autouse=True)
def _quick_emptying() -> None:
    """Transactional tests end with a DELETE of their rows, not a TRUNCATE (tests/support/flushing.py)."""
    from tests.support import flushing

    flushing.install()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """pytest-django's test databases, plus closing the connections async tests leave in asgiref's thread.

    Async tests reach the ORM through ``sync_to_async``, which runs in asgiref's single worker thread;
    its connection is never closed by a request cycle. On PostgreSQL the pool would wait for it and
    DROP DATABASE would then fail with "being accessed by other users".
    """
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)
    connections.close_all()
    _end_stray_postgres_sessions()


def _end_stray_postgres_sessions() -> None:
    """End idle sessions other threads of this run still hold on the PostgreSQL test database.

    The runtime reaches the store from worker threads; a connection such a thread opened is not
    closed by any request cycle, and DROP DATABASE refuses while it is there.
    """
    from django.conf import settings
    from django.db import connections

    database = settings.DATABASES["default"]
    if connections["default"].vendor != "postgresql":
        return
    import psycopg

    with psycopg.connect(
        dbname="postgres",
        user=database.get("USER") or None,
        host=database.get("HOST") or None,
        port=database.get("PORT") or None,
        password=database.get("PASSWORD") or None,
        autocommit=True,
    ) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            [database["NAME"]],
        )


#: Redis databases tests name for themselves (tests/live/test_multi_instance.py, tests/deploy/
#: test_production_way.py, tests/approvals/live/test_live_redis_shards.py): never a worker's.
_REDIS_DATABASES_OF_TESTS = {11, 12, 13}


def _keep_collection_order(config: pytest.Config) -> None:
    """``--dist loadgroup`` hands the tests out in the order ``pytest_collection_modifyitems`` left
    them (see there), not xdist's default of the largest groups first: that sent the transactional
    tests of an ``xdist_group`` ahead of pytest-django's non-transactional ones, whose data
    migrations' rows (the Reviewers and Admins groups) their flush had removed."""
    if getattr(config.option, "dist", "no") == "loadgroup":
        config.option.loadscopereorder = False


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker's channel layer gets a Redis database of its own.

    Pages and events are grouped by agent and run: two workers sharing a database would see each
    other's events. ``REDIS_URL`` is changed in this process's environment too, so the processes its
    tests start (with ``os.environ``) use the same database as it does. pytest-django gives each worker
    a test database of its own already (``test_..._gw0``, ...).
    """
    _keep_collection_order(config)
    worker = getattr(config, "workerinput", {}).get("workerid")
    url = os.environ.get("REDIS_URL", "").strip()
    if not worker or not url or "," in url or os.environ.get("REDIS_SENTINELS", "").strip():
        return
    parts = urlsplit(url)
    if parts.scheme not in {"redis", "rediss"}:
        return
    given = int(parts.path.strip("/") or 0)
    free = [n for n in range(16) if n not in _REDIS_DATABASES_OF_TESTS and n != given]
    index = int(worker.removeprefix("gw"))
    database = given if index == 0 else free[(index - 1) % len(free)]
    os.environ["REDIS_URL"] = urlunsplit(parts._replace(path=f"/{database}"))

    from channels.layers import channel_layers as built_layers
    from django.conf import settings

    from config.channel_layers import channel_layers

    settings.REDIS_URL = os.environ["REDIS_URL"]
    settings.CHANNEL_LAYERS = channel_layers(settings.REDIS_URL)
    built_layers.backends.clear()


@pytest.fixture(scope="session", autouse=True)
def _shared_templates(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> None:
    """The run's pytest processes build each SQLite template database once between them
    (tests/support/templates.py): in the directory pytest-xdist's workers have in common."""
    base = tmp_path_factory.getbasetemp()
    worker = hasattr(request.config, "workerinput")
    templates.share_directory((base.parent if worker else base) / "templates")


@pytest.fixture(scope="session", autouse=True)
def _first_request_done(_shared_templates: None, django_db_setup: None, django_db_blocker: Any) -> None:
    """What a process does once, at its first request, done before any test: serve the external
    agents registered so far (a database read: ``approvals.apps``). Otherwise a test without the
    database fails whenever it makes its worker's first request, and passes in another order."""
    from django.core.signals import request_started

    with django_db_blocker.unblock():
        request_started.send(sender=__name__, environ={})


@pytest.fixture(scope="session", autouse=True)
def _helper_processes() -> Iterator[None]:
    """At the end: the browser closed, the zygote stopped, the template databases dropped."""
    yield
    try:
        launcher.close()
    finally:
        zygote.zygote.stop()
        templates.drop_all()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--dist loadgroup``: the tests of one ``xdist_group`` run in one worker, one after another.

    pytest-xdist tags each grouped test's node id with ``@<group>`` by setting ``item._nodeid``,
    which pytest 9 no longer reads (the id lives in ``item._id``): every group was spread over the
    workers, and tests sharing a Redis database flushed it under each other. Tag them here until
    xdist does (then this finds the tag and does nothing).

    Before that, in ``.ci/run``'s PostgreSQL phase, the tests that ran the same in its SQLite phase
    are deselected (``services.ran_in_the_sqlite_phase``).
    """
    again = [item for item in items if services.ran_in_the_sqlite_phase(item)]
    if again:
        config.hook.pytest_deselected(items=again)
        left_out = set(again)
        items[:] = [item for item in items if item not in left_out]
    if not getattr(config.option, "loadgroup", False):
        return
    _long_tests_first(items)
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        if names and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def _uses_test_database(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    return item.get_closest_marker("django_db") is not None or any(
        name in fixtures for name in ("db", "transactional_db", "live_server", "django_db_reset_sequences")
    )


def _long_tests_first(items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the long tests that need no test database (browsers, servers, bursts of
    processes) go first, the many short ones after: a worker that starts one near the end of the run
    would otherwise keep running it while the others sit idle.

    pytest-django orders the rest (tests in a transaction, then transactional ones, then those
    without the database) and that order is kept: only tests that never touch the test database
    move, so none of them can see what another left there. Each worker runs the tests it is sent in
    this order, browser tests one after another (one Chromium launch: ``browser``).
    """
    first = [item for item in items if item.get_closest_marker("slow") and not _uses_test_database(item)]
    if not first:
        return
    moved = set(first)
    items[:] = first + [item for item in items if item not in moved]


_NEXT_ITEM = pytest.StashKey[pytest.Item | None]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    item.stash[_NEXT_ITEM] = nextitem
    return (yield)


def _uses_browser(item: pytest.Item | None) -> bool:
    return item is not None and "browser" in getattr(item, "fixturenames", ())


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The process's Chromium (``tests/support/browsers.py``); the contexts a test opened are closed after it,
    and the browser too unless the next test uses it (before the session's teardown: see there)."""
    launched = launcher.get()
    before = set(launched.contexts)
    yield launched
    for context in launched.contexts:
        if context not in before:
            context.close()
    if not _uses_browser(request.node.stash.get(_NEXT_ITEM, None)):
        launcher.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Playwright's sync API keeps an event loop running in this thread: no asyncio test (or fixture),
    # nor Django's teardown of the test databases, could run while the browser is up. Closed after the
    # last of consecutive tests that use it (the fixture), in any case before a test without it.
    if launcher.running and not _uses_browser(item):
        launcher.close()
    # Checked at setup, not collection, so that a required-but-missing service fails the test itself.
    if item.get_closest_marker("postgres"):
        services.require_postgres()
    if item.get_closest_marker("redis"):
        services.require_redis()
    if item.get_closest_marker("e2e"):
        services.require_chromium()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not services.skipped_for:
        return
    terminalreporter.section("NOT TESTED: services missing", sep="!", red=True, bold=True)
    for reason in sorted(set(services.skipped_for)):
        count = services.skipped_for.count(reason)
        terminalreporter.write_line(f"{count:4} test(s) skipped: {reason}", red=True, bold=True)
    terminalreporter.write_line(
        f"CI sets {services.REQUIRE_SERVICES}=1 and {services.REQUIRE_BROWSER}=1, which turn these skips "
        "into failures.",
        bold=True,
    )


@pytest.fixture
def artifacts_dir(request: pytest.FixtureRequest) -> Path:
    """A git-ignored folder for this test's screenshots and logs: test-artifacts/<test name>/."""
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in request.node.name)
    path = ARTIFACTS / safe_name
    path.mkdir(parents=True, exist_ok=True)
    return path
