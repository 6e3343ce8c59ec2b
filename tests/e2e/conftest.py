"""The browser tests' world: the app under Daphne in a subprocess, Debian's Chromium, logged-in pages.

One server per session (per pytest-xdist worker; pytest-django's ``live_server`` has no websockets):
a fresh SQLite file in the session's temp dir, migrated (a copy of a database ``manage.py migrate``
made once: ``tests/support/templates.py``), ``demo_setup`` (the login ``reviewer`` in Admins and the demo
runs), a second reviewer in Reviewers, then Daphne on a free port with ``DEBUG`` on so that it serves
the static files. Tests start the runs they decide with ``manage.py run_agent``'s code (a test's
runs one after the other in one ``manage.py`` process: ``tests/support/zygote.py``), so they depend
neither on each other nor on their order. The browser is the process's one Chromium
(``tests/support/browsers.py``).

Every page a test opens is watched: a console error, an uncaught exception or a Content-Security-
Policy violation fails the test (at teardown). When a test fails, a screenshot of each of its pages
is saved under ``test-artifacts/<test name>/``; Daphne's log goes to ``test-artifacts/e2e-server/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Error, Page, expect

from tests.support import services, templates, zygote
from tests.support.browsers import launcher
from tests.support.server import TEST_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
SERVER_ARTIFACTS = ROOT / "test-artifacts" / "e2e-server"
DAPHNE = [sys.executable, "-m", "daphne"]
#: A server process: forked from the zygote (tests/support/zygote.py).
Child = subprocess.Popen[bytes] | zygote.ForkedProcess
SERVER_START_TIMEOUT = 30.0
#: Playwright's wait for any element or navigation; a decision with the scripted model takes < 1 s.
TIMEOUT_MS = 10_000
# The same for `expect(...)` assertions (Playwright's own default, 5 s, ran out on a loaded CI machine
# while a decision's continuation was still on its way to the page).
expect.set_options(timeout=TIMEOUT_MS)

# Chromium logs CSP violations to the console too, but the event is the documented contract: turn
# each one into a console error that the watcher below cannot miss. Init scripts are injected by the
# browser, not by the page, so the page's CSP does not apply to this one.
CSP_REPORTER = """
document.addEventListener("securitypolicyviolation", (event) => {
  console.error(`CSP violation: ${event.violatedDirective} blocked ${event.blockedURI || "inline"}`
    + ` at ${event.sourceFile || document.location.href}:${event.lineNumber}`);
});
"""


class Login(NamedTuple):
    username: str
    password: str


#: Created by ``demo_setup``, in the Admins group (may decide and read the audit log).
ADMIN = Login("reviewer", "countersign-demo")
#: Created here, in the Reviewers group (may decide, no audit log).
REVIEWER = Login("casey", "casey-reviews-e2e")

_CREATE_REVIEWER = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
user = get_user_model().objects.create_user({REVIEWER.username!r}, password={REVIEWER.password!r})
user.groups.add(Group.objects.get(name="Reviewers"))
"""


class RunRequest(NamedTuple):
    agent_id: str
    prompt: str
    thread: str
    resource: str | None = None
    #: The run's deadline in seconds (``run_agent --expires-after``).
    expires_after: float | None = None
    #: What its calls become when nobody answers in time (``run_agent --on-expiry``).
    on_expiry: str | None = None


def unique(prefix: str) -> str:
    """A thread (or resource) id no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Server:
    base_url: str
    env: Mapping[str, str]
    log: Path

    def url(self, path: str) -> str:
        return self.base_url + path

    def manage(self, *args: str, timeout: float = 120) -> str:
        """Run ``manage.py`` against the server's database in a process of its own
        (``tests/support/zygote.py``); its stdout (fails the test on an error)."""
        done = zygote.manage(list(args), self.env, timeout=timeout)
        if done.returncode != 0:
            pytest.fail(
                f"manage.py {' '.join(args)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}",
                pytrace=False,
            )
        return done.stdout

    def start_runs(self, *runs: RunRequest) -> list[str]:
        """Start each run as ``manage.py run_agent`` does, one after the other in one ``manage.py``
        process (not a process each, whose start-up and checks cost more than a run: docs/scaling.md,
        "The cost of a test run"); their ids, each one suspended."""
        commands = [_run_agent_args(run) for run in runs]
        lines = self.manage("shell", "--command", _RUN_AGENTS % json.dumps(commands)).splitlines()
        outputs = [
            json.loads(line.removeprefix("run_agent: ")) for line in lines if line.startswith("run_agent: ")
        ]
        ids = []
        for run, output in zip(runs, outputs, strict=True):
            printed = dict(
                line.split(": ", 1) for line in output.splitlines() if line.startswith(("run_id:", "status:"))
            )
            assert printed.get("status") == "suspended", f"run_agent {run} printed {printed}"
            ids.append(printed["run_id"])
        return ids

    def pass_deadline(self, run_id: str) -> None:
        """Move the waiting run's clock on to its first deadline: its calls' deadlines and the moment
        it parked, earlier by the time left, as if that time had passed. The server's sweep (every
        second) then expires the call as it would have, with the same reason ("No reviewer answered
        within 10 minutes" for a ten-minute deadline).
        A test opens its page first, then calls this: it neither waits the deadline out nor races a
        short one against the page's loading on a busy machine."""
        self.manage("shell", "--command", _PASS_DEADLINE % (run_id,))


#: ``Server.pass_deadline``: one transaction, so the sweep never sees the deadline moved alone.
_PASS_DEADLINE = """
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from approvals.models import ParkedCallRecord, RunRecord
with transaction.atomic():
    run = RunRecord.objects.select_for_update().get(run_id=%r)
    waiting = ParkedCallRecord.objects.filter(run=run, expires_at__isnull=False).undecided()
    left = min(call.expires_at for call in waiting) - timezone.now()
    waiting.update(expires_at=F("expires_at") - left)
    RunRecord.objects.filter(pk=run.pk).update(suspended_at=F("suspended_at") - left)
"""


#: ``manage.py run_agent`` once per argument list, each one's output a JSON string on a line of its own
#: (the server's log may print lines between them).
_RUN_AGENTS = """
import io, json
from django.core.management import call_command
for args in json.loads(%r):
    out = io.StringIO()
    call_command(*args, stdout=out)
    print("run_agent:", json.dumps(out.getvalue()))
"""


def _run_agent_args(run: RunRequest) -> list[str]:
    args = ["run_agent", run.agent_id, run.prompt, "--thread", run.thread]
    if run.resource is not None:
        args += ["--resource", run.resource]
    if run.expires_after is not None:
        args += ["--expires-after", str(run.expires_after)]
    if run.on_expiry is not None:
        args += ["--on-expiry", run.on_expiry]
    return args


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(process: Child) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait_until_serving(process: Child, port: int, log: Path) -> bool:
    """True once this Daphne says it listens on ``port`` and answers there; False if it exited."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    listening = f"Listening on TCP address 127.0.0.1:{port}"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False  # e.g. the port was taken between _free_port() and Daphne's bind
        # The log line proves the answer below comes from this process, not from whoever else could
        # hold the port.
        if listening in log.read_text(errors="replace"):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=5) as answer:
                    if answer.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
        time.sleep(0.1)
    return False


def _start_daphne(env: Mapping[str, str], log: Path) -> tuple[Child, int]:
    for _ in range(3):
        port = _free_port()
        with log.open("ab") as output:
            # `daphne ...` in a process forked from the zygote (tests/support/zygote.py).
            process = zygote.zygote.popen(
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "config.asgi:application",
                ],
                cwd=ROOT,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        if _wait_until_serving(process, port, log):
            return process, port
        _stop(process)
    raise RuntimeError(f"Daphne did not start serving within {SERVER_START_TIMEOUT:.0f} s; see {log}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The app under Daphne on a fresh database with the demo data and two reviewers."""
    with serving(tmp_path_factory) as served:
        yield served


@contextlib.contextmanager
def serving(tmp_path_factory: pytest.TempPathFactory, **settings: str) -> Iterator[Server]:
    """A server as ``server`` starts it, with these environment variables besides (a module that
    needs other settings overrides ``server`` with one of these)."""
    services.require_chromium()  # no server for tests that are about to be skipped
    tmp = tmp_path_factory.mktemp("e2e")
    log = tmp / "daphne.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": TEST_SETTINGS,
        "DATABASE_URL": f"sqlite:///{tmp / 'e2e.sqlite3'}",
        "AGENTS_RUNTIME": "demo.agents:runtime",
        "AGENTS_MODEL": "",  # blank: the deterministic scripted model, never a real one
        "REDIS_URL": "",  # the in-process channel layer
        "TASKS_BACKEND": "immediate",
        "DEBUG": "true",  # static files straight from static/, no collectstatic (config/static_files.py)
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
        **settings,
    }
    unstarted = Server(base_url="", env=env, log=log)
    templates.migrated(env["DATABASE_URL"], env)  # a copy of what `manage.py migrate` made once
    process: Child | None = None
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            # Seeding and the second login go on while Daphne starts (each is its own process).
            seeded = pool.submit(unstarted.manage, "demo_setup", "--no-history")
            reviewer = pool.submit(unstarted.manage, "shell", "--command", _CREATE_REVIEWER)
            process, port = _start_daphne(env, log)
            seeded.result()
            reviewer.result()
        yield Server(base_url=f"http://127.0.0.1:{port}", env=env, log=log)
    finally:
        if process is not None:
            _stop(process)
        if log.exists():
            SERVER_ARTIFACTS.mkdir(parents=True, exist_ok=True)
            # One server per pytest-xdist worker: one log each.
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            name = "-".join(["daphne", *([worker] if worker else []), *sorted(settings)]).lower()
            shutil.copyfile(log, SERVER_ARTIFACTS / f"{name}.log")


def screenshot(page: Page, path: Path) -> None:
    """A full-page screenshot that leaves the page as it was.

    With its default ``caret="hide"`` Playwright leaves an empty ``style=""`` on every input it
    touched; htmx copies such attributes when it settles a swap (and re-parses them when it restores
    history), which the strict CSP then reports as inline styles.
    """
    page.screenshot(path=path, full_page=True, caret="initial")


#: The screenshots the docs show: under test-artifacts/ on every run; into docs/screenshots/ only when
#: asked (``make screenshots``), so that running the tests leaves the checkout as it was.
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"


def docs_screenshot(page: Page, name: str) -> None:
    """``screenshot`` of one of the docs' pictures, ``name`` in docs/screenshots/."""
    updating = os.environ.get("UPDATE_DOCS_SCREENSHOTS") == "1"
    folder = DOCS_SCREENSHOTS if updating else ROOT / "test-artifacts" / "docs-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    screenshot(page, folder / name)


def log_in(page: Page, login: Login) -> None:
    """Log in through the login form (the page must show it)."""
    page.get_by_label("Username").fill(login.username)
    page.get_by_label("Password").fill(login.password)
    page.get_by_role("button", name="Log in").click()


#: ``login_states``' cookies, by server (its address and database: a port may be used again) and user.
#: Kept for the worker's whole run: tests that end a session end one of their own (``login=None``).
_LOGIN_STATES: dict[tuple[str, str, Login], dict[str, Any]] = {}


@pytest.fixture(scope="module")
def login_states(server: Server) -> Callable[[Login], dict[str, Any]]:
    """Each user's cookies after one real login on the server, so that tests start logged in without
    paying for it (once per server and user in a worker, whichever modules use them)."""

    def state_for(login: Login) -> dict[str, Any]:
        key = (server.base_url, server.env.get("DATABASE_URL", ""), login)
        if key not in _LOGIN_STATES:
            context = launcher.get().new_context(base_url=server.base_url)
            try:
                page = context.new_page()
                page.goto("/accounts/login/")
                log_in(page, login)
                page.wait_for_url(server.url("/"), timeout=TIMEOUT_MS)
                _LOGIN_STATES[key] = dict(context.storage_state())
            finally:
                context.close()
        return _LOGIN_STATES[key]

    return state_for


@dataclass
class Pages:
    """Opens watched pages in fresh browser contexts; ``problems`` collects what went wrong in them."""

    browser: Browser
    server: Server
    login_states: Callable[[Login], dict[str, Any]]
    contexts: list[BrowserContext] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def open(
        self,
        login: Login | None = ADMIN,
        *,
        javascript: bool = True,
        width: int = 1280,
        height: int = 1000,
        timezone_id: str | None = None,
        touch: bool = False,
    ) -> Page:
        """A new page in a context of its own, logged in as ``login`` (None: anonymous); the browser's
        time zone is ``timezone_id`` (None: the machine's); ``touch``: a phone's touch screen (no
        hover, a coarse pointer)."""
        context = self.browser.new_context(
            base_url=self.server.base_url,
            storage_state=self.login_states(login) if login else None,  # type: ignore[arg-type]
            java_script_enabled=javascript,
            viewport={"width": width, "height": height},
            timezone_id=timezone_id,
            has_touch=touch,
            is_mobile=touch,
        )
        context.set_default_timeout(TIMEOUT_MS)
        context.add_init_script(script=CSP_REPORTER)
        self.contexts.append(context)
        page = context.new_page()
        who = login.username if login else "anonymous"
        page.on("console", lambda message: self._console(who, page, message))
        page.on("pageerror", lambda error: self.problems.append(f"[{who}] uncaught on {page.url}: {error}"))
        return page

    def _console(self, who: str, page: Page, message: ConsoleMessage) -> None:
        if message.type == "error":
            where = message.location.get("url") or page.url
            self.problems.append(f"[{who}] console error on {where}: {message.text}")


_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


@pytest.fixture
def pages(
    browser: Browser,
    server: Server,
    login_states: Callable[[Login], dict[str, Any]],
    artifacts_dir: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Pages]:
    opened = Pages(browser=browser, server=server, login_states=login_states)
    yield opened
    call = request.node.stash.get(_REPORTS, {}).get("call")
    failed = call is not None and call.failed
    for number, context in enumerate(opened.contexts, start=1):
        for index, page in enumerate(context.pages, start=1):
            if failed:
                with contextlib.suppress(Error):  # a crashed page has no screenshot to give
                    screenshot(page, artifacts_dir / f"failure-{number}-{index}.png")
        context.close()
    if opened.problems:
        (artifacts_dir / "browser-problems.txt").write_text("\n".join(opened.problems) + "\n")
    if not failed:
        assert not opened.problems, "The browser reported problems:\n" + "\n".join(opened.problems)
