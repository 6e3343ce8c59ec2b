"""The app run the way docs/deploy.md says, on this machine, and used through its HTTPS proxy.

DEBUG off with the production settings that pass ``check --deploy``; ``collectstatic`` into a fresh
STATIC_ROOT; two web processes and a ``db_worker`` started with the Procfile's commands; a scratch
PostgreSQL database and Redis; and in front, a TLS-terminating reverse proxy (tests/deploy/proxy.py,
standing in for the guide's nginx: it serves the collected static files, passes websockets through
and sets ``X-Forwarded-Proto: https``). A reviewer signs in through the proxy, watches a run on a
page served by process A, approves the call through process B, and A's page shows how the run ended.
"""

from __future__ import annotations

import secrets
import shlex
import string
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django_tasks_db.models import DBTaskResult
from playwright.sync_api import Browser, Page, expect

from approvals.tasks import continue_run
from tests.deploy.proxy import ReverseProxy, Upstream, self_signed_certificate
from tests.support import server, services
from tests.support.browsers import launcher
from tests.support.card_rows import expanded

# Its tests share Redis database REDIS_DB: one pytest-xdist worker runs them, one after the other.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.e2e,
    pytest.mark.xdist_group("redis-db-12"),
]

WAIT = 20_000
WORKER_ID = "production-way-worker"
#: A Redis database no other test uses, so that another run on this machine cannot mix its events in.
REDIS_DB = 12


def procfile_command(kind: str, **variables: str) -> list[str]:
    """The Procfile's command for ``kind``, as a runner would start it (with this test's virtualenv)."""
    for line in (server.ROOT / "Procfile").read_text().splitlines():
        name, colon, command = line.partition(":")
        if colon and name.strip() == kind:
            args = shlex.split(string.Template(command).substitute(variables))
            if args[0].startswith(".venv/bin/"):
                args[0] = str(Path(sys.executable).with_name(args[0].removeprefix(".venv/bin/")))
            return args
    raise AssertionError(f"The Procfile has no {kind!r} process")


@dataclass
class Deployment:
    proxy: ReverseProxy
    env: dict[str, str]
    database_url: str
    a: server.Daphne
    b: server.Daphne


def production_env(
    database_url: str, redis_url: str, public_origin: str, static_root: Path
) -> dict[str, str]:
    """The documented production set (docs/deploy.md), for a proxy at ``public_origin``."""
    env = server.env_for(database_url, redis_url=redis_url, tasks_backend="database")
    env.update(
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS=urlsplit(public_origin).hostname or "",
        CSRF_TRUSTED_ORIGINS=public_origin,
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO=https",
        SECURE_SSL_REDIRECT="true",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="true",
        SECURE_HSTS_PRELOAD="true",
        PROXY_COUNT="1",
        STATIC_ROOT=str(static_root),
        # Notifications need a mail server in production (nothing is sent in this test).
        EMAIL_HOST="smtp.example.com",
    )
    return env


@pytest.fixture
def deployment(artifacts_dir: Path, tmp_path: Path) -> Iterator[Deployment]:
    redis_url = urlunsplit(urlsplit(services.require_redis())._replace(path=f"/{REDIS_DB}"))
    with server.postgres_database(services.require_postgres()) as database_url:
        static_root = tmp_path / "static"
        a_port, b_port = server.free_port(), server.free_port()
        proxy = ReverseProxy(
            upstreams=[Upstream("A", a_port), Upstream("B", b_port)],
            static_root=static_root,
            certificate=self_signed_certificate(tmp_path),
        )
        proxy.start()
        try:
            env = production_env(database_url, redis_url, proxy.origin, static_root)
            server.manage(env, "check", "--deploy", "--fail-level", "WARNING")
            server.manage(env, "collectstatic", "--noinput", "--verbosity", "0")
            server.prepare_database(env)
            # The proxy's header: without it, SECURE_SSL_REDIRECT answers the probe with a redirect.
            probe = {"X-Forwarded-Proto": "https"}
            a = server.Daphne(env, artifacts_dir / "daphne-a.log", a_port, probe_headers=probe)
            b = server.Daphne(env, artifacts_dir / "daphne-b.log", b_port, probe_headers=probe)
            a.command = procfile_command("web", PORT=str(a_port))
            b.command = procfile_command("web", PORT=str(b_port))
            worker = server.Process(
                "worker",
                [*procfile_command("worker"), "--worker-id", WORKER_ID, "--interval", "0.1"],
                env,
                artifacts_dir / "worker.log",
            )
            with server.running(a, b, worker):
                yield Deployment(proxy, env, database_url, a, b)
        finally:
            proxy.stop()


def _watched(page: Page, problems: list[str]) -> Page:
    """Console errors (CSP violations among them) and failed static files become test failures."""
    page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
    # (Not a request the page itself gave up, or one cut short by closing the page: ERR_ABORTED.)
    page.on(
        "requestfailed",
        lambda r: (
            problems.append(f"failed: {r.method} {r.url} {r.failure}")
            if "ERR_ABORTED" not in (r.failure or "")
            else None
        ),
    )
    page.on(
        "response",
        lambda r: problems.append(f"{r.status} {r.url}") if "/static/" in r.url and r.status != 200 else None,
    )
    return page


@pytest.fixture
def trusting_browser(browser: Browser) -> Iterator[Browser]:
    """A Chromium of its own that takes the proxy's certificate (the test's own) as valid from the
    first connection, as a browser takes a real deployment's.

    Not Playwright's ``ignore_https_errors`` alone: with it each new connection fails on the certificate
    and Chromium restarts the request past the error (``RestartIgnoringLastError``), counting the
    restarts against the request's 32 (``ERR_TOO_MANY_RETRIES``). The proxy opens a connection per
    request, and on a loaded CI machine one stylesheet ran out of restarts. (Beside the ``browser``
    fixture's, whose Playwright it shares and whose teardown stops it after this one closed.)
    """
    trusting = launcher.another("--ignore-certificate-errors")
    yield trusting
    trusting.close()


def test_a_decision_through_one_server_reaches_a_page_served_by_the_other(
    trusting_browser: Browser, deployment: Deployment, artifacts_dir: Path
) -> None:
    proxy = deployment.proxy
    run_id = server.start_run(deployment.env, "support", "Refund $300 on A-1042", thread="production-way")
    # The certificate is the test's own; everything else is as a browser meets the real thing.
    # (ignore_https_errors for the context's request client, which is Playwright's, not Chromium's.)
    context = trusting_browser.new_context(base_url=proxy.origin, ignore_https_errors=True)
    context.set_default_timeout(WAIT)
    problems: list[str] = []

    # Unpinned, the proxy takes turns: both servers answer the same public address.
    for _ in range(2):
        assert context.request.get("/accounts/login/").status == 200
    assert proxy.served_by("/accounts/login/") == {"A", "B"}

    # Signing in through the HTTPS proxy: the CSRF origin check passes, the session cookie is Secure.
    proxy.pin = "A"
    page_a = _watched(context.new_page(), problems)
    page_a.goto(f"/accounts/login/?next=/runs/{run_id}/")
    page_a.get_by_label("Username").fill(server.USERNAME)
    page_a.get_by_label("Password").fill(server.PASSWORD)
    page_a.get_by_role("button", name="Log in").click()
    page_a.wait_for_url(f"{proxy.origin}/runs/{run_id}/")
    session = next(c for c in context.cookies() if c["name"] == "sessionid")
    assert session["secure"] and session["httpOnly"]
    # Process A serves the run page and holds its live socket.
    expect(page_a.locator("#live-status")).to_have_text("Live")
    assert proxy.served_by("/ws/", websocket=True) == {"A"}

    # The decision goes through process B (the same session: one database, one login).
    proxy.pin = "B"
    page_b = _watched(context.new_page(), problems)
    page_b.goto("/agents/support/")
    card_b = page_b.locator(f"#run-{run_id}")
    expanded(card_b).get_by_role("button", name="Approve").click()
    expect(card_b.locator(".outcome")).to_contain_text("Continuing")
    assert {f.upstream for f in proxy.log if f.method == "POST" and f.path.endswith("/approve")} == {"B"}

    # The worker continues the run; the event reaches A's socket through Redis and A's page follows.
    state_a = page_a.locator("#run-state")
    expect(state_a).to_contain_text("Completed")
    expect(state_a).to_contain_text("Refunded $300.00 on A-1042")
    expect(page_a.locator("#live-status")).to_have_text("Live")
    assert proxy.served_by("/ws/", websocket=True) == {"A", "B"}
    page_a.screenshot(path=str(artifacts_dir / "run-page-on-a.png"), full_page=True)

    with psycopg.connect(deployment.database_url) as conn:
        (worker_ids,) = conn.execute(
            f"SELECT worker_ids FROM {DBTaskResult._meta.db_table} "
            "WHERE task_path = %s AND args_kwargs -> 'args' ->> 1 = %s",
            (continue_run.module_path, run_id),
        ).fetchone() or (None,)
    assert worker_ids == [WORKER_ID]

    # Static files came from STATIC_ROOT through the proxy; no page hit a CSP violation or an error.
    assert "system-ui" in page_a.evaluate("getComputedStyle(document.body).fontFamily")
    context.close()
    assert not problems, (problems, proxy.errors)
    assert not proxy.errors, proxy.errors
