"""What a client reads off the wire from Daphne: status lines with their reason phrase, JSON refusals."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.e2e.conftest import ROOT, _start_daphne, _stop
from tests.support import templates
from tests.support.server import TEST_SETTINGS

# The module's tests share its server: one worker runs them all, so it is started once, not once per
# worker.
pytestmark = [pytest.mark.xdist_group("test_status_lines"), pytest.mark.own_sqlite]

_TOKEN = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from approvals.services.tokens import create_token
user = get_user_model().objects.create_user("wire", password=None)
user.groups.add(Group.objects.get(name="Reviewers"))
print(create_token(user, name="wire").plaintext)
"""


@pytest.fixture(scope="module")
def daphne(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], int]]:
    """The app under Daphne, one decision a minute per token; its address, a reviewer's header and
    the server's process id."""
    tmp = tmp_path_factory.mktemp("status-lines")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": TEST_SETTINGS,
        "DATABASE_URL": f"sqlite:///{tmp / 'wire.sqlite3'}",
        "AGENTS_RUNTIME": "tests.support.mastra_agents:runtime",
        "REDIS_URL": "",
        "TASKS_BACKEND": "immediate",
        "API_DECISION_RATE_LIMIT": "1/60",
        "DEBUG": "true",  # static files from static/, as `make run` serves them
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONPATH": str(ROOT),
    }
    templates.migrated(env["DATABASE_URL"], env)
    token = templates.run(env, "shell", "--command", _TOKEN, timeout=120).strip().splitlines()[-1]
    process, port = _start_daphne(env, tmp / "daphne.log")
    try:
        yield f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}, process.pid
    finally:
        _stop(process)


@pytest.fixture
def served(daphne: tuple[str, dict[str, str], int]) -> tuple[str, dict[str, str]]:
    """The server's address and a reviewer's header."""
    base, auth, _ = daphne
    return base, auth


def _cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used so far (its user and system time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_huge_form_costs_the_server_no_more_than_any_body_of_its_size(
    daphne: tuple[str, dict[str, str], int],
) -> None:
    """Twisted parsed a url-encoded body into arguments Daphne never reads, on the event loop, before
    Daphne passed it on: one anonymous 15 MB form held every page and socket of the process for
    seconds. Django refuses it on a thread, as it refuses any body over its limit. Counted in the
    server's CPU time, which a busy machine does not inflate as it does the wall clock."""
    base, _, pid = daphne
    body = "&".join(f"f{i}=1" for i in range(1_500_000)).encode()
    costs = {}
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        before = _cpu_seconds(pid)
        response = requests.post(
            f"{base}/accounts/login/", data=body, headers={"Content-Type": content_type}, timeout=120
        )
        costs[content_type] = _cpu_seconds(pid) - before
        assert response.status_code in (400, 403), content_type

    assert costs["application/x-www-form-urlencoded"] < costs["text/plain"] + 1.0, costs


def test_a_429_says_too_many_requests_with_retry_after(served: tuple[str, dict[str, str]]) -> None:
    base, auth = served
    decline = f"{base}/api/agents/approver/decline-tool-call"
    body = {"runId": "no-such-run", "toolCallId": "c1"}

    first = requests.post(decline, json=body, headers=auth, timeout=30)
    limited = requests.post(decline, json=body, headers=auth, timeout=30)

    assert first.status_code == 404
    assert (limited.status_code, limited.reason) == (429, "Too Many Requests")
    assert 55 <= int(limited.headers["Retry-After"]) <= 70
    assert limited.headers["Content-Type"] == "application/json"
    assert limited.json()["code"] == "rate_limited"


def test_an_unknown_path_under_api_is_a_json_404(served: tuple[str, dict[str, str]]) -> None:
    base, auth = served

    for method, path in (("GET", "/api/nope"), ("POST", "/api/v1/agents/approver/nope"), ("GET", "/api/v1/")):
        response = requests.request(method, f"{base}{path}", headers=auth, timeout=30)

        assert (response.status_code, response.reason) == (404, "Not Found"), path
        assert response.headers["Content-Type"] == "application/json", path
        assert response.json()["code"] == "no_route", path
    # The pages keep their HTML 404.
    page = requests.get(f"{base}/nope", timeout=30)
    assert page.status_code == 404 and page.headers["Content-Type"].startswith("text/html")
