"""Checks for the outside services some tests need: PostgreSQL, Redis and Debian's Chromium.

Call ``require_postgres()``, ``require_redis()`` or ``require_chromium()`` at the top of a test or
fixture, or mark the test ``postgres`` / ``redis`` / ``e2e`` (``tests/conftest.py`` calls them for
you). When the service is missing the test is skipped with a loud reason, and the run ends with a
banner listing what was skipped. CI sets ``COUNTERSIGN_REQUIRE_SERVICES=1`` and
``COUNTERSIGN_REQUIRE_BROWSER=1`` so that a missing service fails the test instead: database- and
browser-specific tests can never silently skip there. Tests that start Redis servers of their own
call ``require_redis_server()``.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM = "/usr/bin/chromium"
#: Debian's build of Chromium's headless shell (package chromium-headless-shell, from the same sources
#: and version): what Playwright itself runs for headless Chromium. A new browser context and its first
#: page cost it about a third of the CPU the full browser spends, so the browser tests use it when it
#: is installed (``make test`` installs it with Chromium), else Chromium.
HEADLESS_SHELL = "/usr/lib/chromium/chromium-headless-shell"

# Flags for Debian's Chromium on these machines: no sandbox as root, and no background traffic
# (this network refuses it, many connections at a time).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

REQUIRE_SERVICES = "COUNTERSIGN_REQUIRE_SERVICES"
REQUIRE_BROWSER = "COUNTERSIGN_REQUIRE_BROWSER"

# Reasons for every skip so far, printed again as a banner at the end of the run.
skipped_for: list[str] = []


def _required(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() in {"1", "true", "yes", "on"}


def _unavailable(reason: str, *, variable: str) -> None:
    if _required(variable):
        pytest.fail(f"{reason} — and {variable}=1 says this run must not skip it", pytrace=False)
    skipped_for.append(reason)
    pytest.skip(f"!!! NOT TESTED: {reason} (set {variable}=1 to make this a failure)")


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def require_postgres() -> str:
    """The PostgreSQL ``DATABASE_URL`` the suite runs on; skip (or fail) when there is none."""
    if not suite_on_postgres():
        _unavailable(
            "PostgreSQL: DATABASE_URL is not a postgres:// URL (e.g. postgres://root@127.0.0.1:5432/countersign)",
            variable=REQUIRE_SERVICES,
        )
    url = os.environ["DATABASE_URL"].strip()
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    if not _answers(host, port):
        _unavailable(f"PostgreSQL: nothing answers on {host}:{port}", variable=REQUIRE_SERVICES)
    return url


def suite_on_postgres() -> bool:
    """Whether the suite itself runs on PostgreSQL (``DATABASE_URL``), as CI's second phase does."""
    return urlsplit(os.environ.get("DATABASE_URL", "").strip()).scheme in {"postgres", "postgresql", "pgsql"}


def database_params() -> list[Any]:
    """The databases a test that starts processes of its own runs them on, as ``pytest`` params:
    SQLite (marked ``own_sqlite``: what its processes do does not change with ``DATABASE_URL``), and
    PostgreSQL (marked ``postgres``: skipped, or failed under ``REQUIRE_SERVICES``, without it)."""
    return [
        pytest.param("sqlite", marks=pytest.mark.own_sqlite),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]


#: Set by ``.ci/run`` for its second phase (PostgreSQL and Redis), once the first (SQLite) passed.
SQLITE_PHASE_PASSED = "COUNTERSIGN_SQLITE_PHASE_PASSED"


def ran_in_the_sqlite_phase(item: pytest.Item) -> bool:
    """Whether ``item`` would run exactly as it ran in this CI run's SQLite phase: a test marked
    ``own_sqlite`` (its servers and commands on a SQLite file of their own and the in-process channel
    layer, whatever ``DATABASE_URL`` and ``REDIS_URL`` say), while the suite runs on PostgreSQL after
    ``.ci/run``'s SQLite phase passed. A developer's ``make test`` on PostgreSQL still runs it."""
    own = item.get_closest_marker("own_sqlite") is not None
    return own and _required(SQLITE_PHASE_PASSED) and suite_on_postgres()


def require_redis() -> str:
    """The ``REDIS_URL`` to use, once the server has answered a PING; skip (or fail) otherwise."""
    import redis

    url = os.environ.get("REDIS_URL", "").strip()
    if not url:
        _unavailable("Redis: REDIS_URL is not set (e.g. redis://127.0.0.1:6379/0)", variable=REQUIRE_SERVICES)
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as error:
        _unavailable(f"Redis: {url} does not answer PING ({error})", variable=REQUIRE_SERVICES)
    finally:
        client.close()
    return url


def require_redis_server() -> str:
    """The path of ``redis-server``, for tests that start servers of their own; skip (or fail) without it."""
    path = shutil.which("redis-server")
    if not path:
        _unavailable(
            "Redis: redis-server is not installed (apt-get install redis-server)", variable=REQUIRE_SERVICES
        )
    return str(path)


def browser_executable() -> str:
    """The headless shell when it is installed, else Debian's Chromium."""
    return HEADLESS_SHELL if os.access(HEADLESS_SHELL, os.X_OK) else CHROMIUM


@functools.cache
def _chromium_problem() -> str | None:
    executable = browser_executable()
    if not (os.access(executable, os.X_OK) or shutil.which(executable)):
        return f"Chromium: {CHROMIUM} is missing (apt-get install chromium; `make test` does it as root)"
    try:
        subprocess.run([executable, "--version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        return f"Chromium: {executable} --version failed ({error})"
    return None


def require_chromium() -> str:
    """The path of Debian's Chromium (its headless shell if installed) for Playwright's
    ``executable_path``; skip (or fail) without it."""
    if problem := _chromium_problem():
        _unavailable(problem, variable=REQUIRE_BROWSER)
    return browser_executable()


def database_url() -> str:
    """The test database, as a ``DATABASE_URL`` for a child process."""
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    login = db.get("USER") or ""
    if login and db.get("PASSWORD"):
        login += f":{db['PASSWORD']}"
    host = f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    return f"postgres://{login}{'@' if login else ''}{host}/{db['NAME']}"
