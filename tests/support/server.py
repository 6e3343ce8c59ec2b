"""Real server processes for the live-update tests: Daphne, ``manage.py`` commands and a task worker.

Each process gets an explicit environment built from ``env_for``: the settings variables this suite
sets are removed first (CI runs the whole suite with ``DATABASE_URL`` and ``REDIS_URL`` pointing at
PostgreSQL and Redis), so a test says exactly which database, channel layer and task backend its
processes share.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit, urlunsplit

from tests.support import templates
from tests.support.zygote import ForkedProcess, zygote

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
MANAGE = str(ROOT / "manage.py")

#: The demo login that ``manage.py demo_setup`` creates (in the Admins group).
USERNAME, PASSWORD = "reviewer", "countersign-demo"
#: A second reviewer, for "someone else decided it".
OTHER_USERNAME, OTHER_PASSWORD = "second-reviewer", "countersign-second"

#: The settings of every process the tests start (production's, with quick password hashing:
#: ``tests/support/settings.py``); the tests of production's settings themselves use ``config.settings``.
TEST_SETTINGS = "tests.support.settings"

_SETTINGS_VARIABLES = ("DATABASE_URL", "REDIS_URL", "TASKS_BACKEND", "AGENTS_RUNTIME", "AGENTS_MODEL")


def env_for(
    database_url: str,
    *,
    redis_url: str | None = None,
    tasks_backend: str | None = None,
    settings_module: str = TEST_SETTINGS,
) -> dict[str, str]:
    """The environment of a process on ``database_url``: the suite's settings (production's with quick
    password hashing, ``tests/support/settings.py``) unless ``settings_module`` says otherwise."""
    env = {k: v for k, v in os.environ.items() if k not in _SETTINGS_VARIABLES}
    env.update(
        DJANGO_SETTINGS_MODULE=settings_module,
        DATABASE_URL=database_url,
        DEBUG="1",  # static files straight from static/, no collectstatic (config/static_files.py)
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        # A process started on a machine busy with the rest of the suite (two cores, four workers)
        # can take past production's 1 s to make its first PostgreSQL connection, which would read as
        # the server being unreachable; the tests of an unreachable database set 1 s again.
        DATABASE_UNREACHABLE_SECONDS="10",
    )
    if redis_url:
        env["REDIS_URL"] = redis_url
    if tasks_backend:
        env["TASKS_BACKEND"] = tasks_backend
    return env


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    """Run ``manage.py ARGS`` to completion in a process of its own (``tests/support/zygote.py``); its stdout
    (raises with the output when it fails)."""
    return templates.run(env, *args, timeout=timeout)


def _prepare(env: dict[str, str]) -> None:
    templates.migrated(env["DATABASE_URL"], env)
    manage(env, "demo_setup", "--no-seed")
    manage(
        env,
        "shell",
        "-c",
        "from django.contrib.auth.models import Group, User\n"
        f"user = User.objects.create_user({OTHER_USERNAME!r}, password={OTHER_PASSWORD!r})\n"
        "user.groups.add(Group.objects.get(name='Reviewers'))",
    )


def prepare_database(env: dict[str, str]) -> None:
    """Migrate, create the demo login and a second reviewer (no demo runs: tests start their own).

    The database (new and empty: a SQLite file not there yet, or ``postgres_database()``'s) becomes a
    copy of a template this process prepared the same way once (``tests/support/templates.py``).
    """
    templates.clone(env["DATABASE_URL"], env, "live-prepared", _prepare)


def start_run(env: dict[str, str], agent_id: str, prompt: str, *, thread: str | None = None) -> str:
    """``manage.py run_agent`` in its own process; the new run's id (it must have suspended)."""
    args = ["run_agent", agent_id, prompt] + (["--thread", thread] if thread else [])
    out = manage(env, *args)
    match = re.search(r"^run_id: (\S+)$", out, re.MULTILINE)
    assert match and "status: suspended" in out, out
    return match.group(1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Process:
    """A long-running child (Daphne or a worker) whose output goes to a log file.

    ``forked``: started by the zygote (``tests/support/zygote.py``) when its command is this Python running a
    script or a module (a process of its own all the same); else, and by default, by ``subprocess``.
    """

    name: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | ForkedProcess | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)
    forked: bool = False

    def start(self) -> None:
        self._log = self.log_path.open("ab")
        self._log.write(f"\n=== start {' '.join(self.command)}\n".encode())
        self._log.flush()
        if self.forked:
            self.popen = zygote.popen(self.command, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        else:
            self.popen = subprocess.Popen(
                self.command, cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT
            )

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL: the way a crashed or OOM-killed server goes (no goodbye to its sockets' peers)."""
        self._stop(signal.SIGKILL)

    def stop(self) -> None:
        self._stop(signal.SIGTERM)

    def _stop(self, sig: signal.Signals) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=15)
        self.popen = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Daphne(Process):
    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        port: int | None = None,
        *,
        probe_headers: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        # Headers for the readiness probe: behind a proxy with SECURE_SSL_REDIRECT, the proxy's own.
        self.probe_headers = probe_headers or {}
        super().__init__(
            name=f"daphne:{self.port}",
            command=[
                PYTHON,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "config.asgi:application",
            ],
            env=env,
            log_path=log_path,
            forked=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        super().start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise AssertionError(f"{self.name} exited at start:\n{self.log()}")
            try:
                probe = urllib.request.Request(self.url + "/accounts/login/", headers=self.probe_headers)
                with urllib.request.urlopen(probe, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not answer within {timeout} s:\n{self.log()}")


def db_worker(env: dict[str, str], log_path: Path, worker_id: str) -> Process:
    return Process(
        name=f"db_worker:{worker_id}",
        command=[
            PYTHON,
            MANAGE,
            "db_worker",
            "--no-reload",
            "--no-startup-delay",
            "--interval",
            "0.1",
            "--worker-id",
            worker_id,
        ],
        env=env,
        log_path=log_path,
        forked=True,
    )


@contextmanager
def running(*processes: Process) -> Iterator[None]:
    try:
        for process in processes:
            process.start()
        yield
    finally:
        for process in reversed(processes):
            process.stop()


@contextmanager
def postgres_database(server_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database on ``server_url``'s server; dropped afterwards. Yields its URL."""
    import psycopg

    name = f"countersign_live_{uuid.uuid4().hex[:10]}"
    parts = urlsplit(server_url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
