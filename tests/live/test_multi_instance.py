"""Scale-out: two Daphne instances on one PostgreSQL database and Redis, plus a task worker.

A run started through instance A appears live on a page served by instance B; a decision taken on B
is continued by the ``db_worker`` process (not by B), and A's pages follow: the run page streams the
worker's output and shows how the run ended, the inbox drops the card. A logout on A signs that
session's pages out on B too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django_tasks_db.models import DBTaskResult
from playwright.sync_api import expect

from approvals.tasks import continue_run
from tests.live.conftest import log_in
from tests.support import server, services
from tests.support.card_rows import expanded

# Its tests share Redis database REDIS_DB: one pytest-xdist worker runs them, one after the other.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.e2e,
    pytest.mark.xdist_group("redis-db-11"),
]

WAIT = 20_000
WORKER_ID = "live-test-worker"
#: Not the suite's default Redis database: another test run on this machine cannot mix its events in.
REDIS_DB = 11


@dataclass
class Cluster:
    database_url: str
    redis_url: str
    a: server.Daphne
    b: server.Daphne
    worker: server.Process


@pytest.fixture
def cluster(artifacts_dir: Path) -> Iterator[Cluster]:
    redis_url = urlunsplit(urlsplit(services.require_redis())._replace(path=f"/{REDIS_DB}"))
    with server.postgres_database(services.require_postgres()) as database_url:
        env = server.env_for(database_url, redis_url=redis_url, tasks_backend="database")
        server.prepare_database(env)
        a = server.Daphne(env, artifacts_dir / "daphne-a.log")
        b = server.Daphne(env, artifacts_dir / "daphne-b.log")
        worker = server.db_worker(env, artifacts_dir / "worker.log", WORKER_ID)
        with server.running(a, b, worker):
            yield Cluster(database_url, redis_url, a, b, worker)


def _query(database_url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql, params).fetchall()


def test_two_instances_and_a_worker_stay_in_sync(cluster: Cluster, browser: Any) -> None:
    # Reviewer pages on B (the inbox) and A (starts the run, then watches it).
    inbox_b = log_in(
        browser, cluster.b.url, server.OTHER_USERNAME, server.OTHER_PASSWORD, next_path="/agents/support/"
    )
    expect(inbox_b.locator("#live-status")).to_have_text("Live", timeout=WAIT)
    page_a = log_in(browser, cluster.a.url, server.USERNAME, server.PASSWORD, next_path="/runs/new/")
    inbox_a = page_a.context.new_page()
    inbox_a.goto("/agents/support/")
    expect(inbox_a.locator("#live-status")).to_have_text("Live", timeout=WAIT)

    # A suspension created through instance A...
    page_a.get_by_label("Agent").select_option("support")
    page_a.get_by_label("Prompt").fill("Refund $300 on A-1042")
    page_a.get_by_label("Thread").fill("T-multi")
    page_a.get_by_role("button", name="Start run").click()
    page_a.wait_for_url("**/runs/*/")
    run_id = page_a.url.rstrip("/").rsplit("/", 1)[-1]
    expect(page_a.locator("#live-status")).to_have_text("Live", timeout=WAIT)

    # ...appears live on the page served by instance B.
    card_b = inbox_b.locator(f"#run-{run_id}")
    expect(card_b).to_be_visible(timeout=WAIT)
    expect(card_b).to_contain_text("issue_refund")

    # Decided on B: B only records it and queues the continuation.
    expanded(card_b).get_by_role("button", name="Approve").click()
    expect(card_b.locator(".outcome")).to_contain_text("Continuing", timeout=WAIT)

    # The worker continues it; A's pages follow without a reload.
    output_a = page_a.locator(f"[data-live-output='{run_id}']")
    expect(output_a).to_contain_text("issue_refund", timeout=WAIT)
    expect(output_a).to_contain_text("Run success.", timeout=WAIT)
    state_a = page_a.locator("#run-state")
    expect(state_a).to_contain_text("This run is no longer waiting", timeout=WAIT)
    expect(state_a).to_contain_text("Completed")
    expect(state_a).to_contain_text("Refunded $300.00 on A-1042")
    expect(state_a).to_contain_text(server.OTHER_USERNAME)
    expect(inbox_a.locator(f"#run-{run_id}")).to_have_count(0, timeout=WAIT)
    # B's reviewer keeps what their decision did, though the run left B's list meanwhile.
    expect(card_b.locator(".outcome")).to_contain_text("Continuing")
    page_a.screenshot(path=str(cluster.a.log_path.parent / "instance-a-run-page.png"), full_page=True)

    # The worker ran it, once, and the run is gone from the store (it ended).
    tasks = _query(
        cluster.database_url,
        f"SELECT status, worker_ids, return_value FROM {DBTaskResult._meta.db_table} "
        "WHERE task_path = %s AND args_kwargs -> 'args' ->> 1 = %s",
        continue_run.module_path,
        run_id,
    )
    assert len(tasks) == 1
    status, worker_ids, return_value = tasks[0]
    assert (status, worker_ids, return_value["status"]) == ("SUCCESSFUL", [WORKER_ID], "success")
    left = _query(cluster.database_url, "SELECT count(*) FROM approvals_run WHERE run_id = %s", run_id)
    assert left == [(0,)]
    assert cluster.a.running and cluster.b.running and cluster.worker.running


def test_logging_out_on_one_instance_signs_that_session_out_on_every_instance(
    cluster: Cluster, browser: Any
) -> None:
    on_a = log_in(browser, cluster.a.url, server.USERNAME, server.PASSWORD, next_path="/agents/support/")
    # The same browser on instance B (cookies do not care about the port): the same session.
    on_b = on_a.context.new_page()
    on_b.goto(f"{cluster.b.url}/agents/support/")
    someone_else = log_in(
        browser, cluster.b.url, server.OTHER_USERNAME, server.OTHER_PASSWORD, next_path="/agents/support/"
    )
    for page in (on_a, on_b, someone_else):
        expect(page.locator("#live-status")).to_have_text("Live", timeout=WAIT)

    logout_page = on_a.context.new_page()
    logout_page.goto(f"{cluster.a.url}/")
    logout_page.get_by_role("button", name="Log out").click()
    logout_page.wait_for_url("**/accounts/login/")

    for page in (on_a, on_b):
        expect(page.locator("#live-status")).to_have_attribute("data-state", "signed-out", timeout=WAIT)
        expect(page.get_by_role("link", name="Sign in again")).to_be_visible()
    # Another login is not touched: its page still gets events.
    env = server.env_for(cluster.database_url, redis_url=cluster.redis_url)
    run_id = server.start_run(env, "support", "Refund $300 on A-1042", thread="after-logout")
    expect(someone_else.locator(f"#run-{run_id}")).to_be_visible(timeout=WAIT)
    expect(someone_else.locator("#live-status")).to_have_text("Live")
