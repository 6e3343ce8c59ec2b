"""With PostgreSQL out of reach a server says so at once: ``/readyz`` and the API answer 503 within
2 s (the API in JSON, with ``Retry-After``), the pages with a plain 503 page; once the database is back
the same server answers as before.

A real Daphne on a real PostgreSQL, reached through a proxy the test owns (``pg_proxy``): cutting it
closes the server's connections and leaves new ones unanswered, the way a database host that went
away looks (or, refused, closes new ones at once, as a stopped server does). Every request is made
with a 2 s client timeout: one that takes longer fails the test.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from tests.support import burst, server, services
from tests.support.pg_proxy import proxied

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: What the issue asks of every answer while the database is down.
WITHIN = 2.0

_TOKEN = """
from django.contrib.auth.models import Group, User
from approvals.services.tokens import create_token
user = User.objects.create_user("outage", password=None)
user.groups.add(Group.objects.get(name="Reviewers"))
print(create_token(user, name="outage").plaintext)
"""


@pytest.mark.parametrize("down", ["unanswered", "refused"])
def test_with_the_database_down_readyz_and_the_api_answer_503_within_2_s(
    artifacts_dir: Path, down: str
) -> None:
    with server.postgres_database(services.require_postgres()) as direct_url, proxied(direct_url) as proxy:
        direct = server.env_for(direct_url)
        server.prepare_database(direct)
        token = server.manage(direct, "shell", "-c", _TOKEN).strip().splitlines()[-1]
        env = server.env_for(proxy.url_for(direct_url)) | {"DATABASE_UNREACHABLE_SECONDS": "1"}
        api = {"Authorization": f"Bearer {token}"}
        with burst.served(env, artifacts_dir / "daphne.log") as daphne:
            reviewer = burst.Browser(daphne.url, timeout=30)
            assert [s.status for s in reviewer.log_in(server.USERNAME, server.PASSWORD)] == [200, 302]
            assert requests.get(f"{daphne.url}/readyz", timeout=30).status_code == 200
            assert requests.get(f"{daphne.url}/api/v1/agents", headers=api, timeout=30).status_code == 200

            proxy.cut(refuse=down == "refused")

            for _ in range(3):  # a client retrying is answered as fast each time
                ready = requests.get(f"{daphne.url}/readyz", timeout=WITHIN)
                assert ready.status_code == 503 and "database" in ready.json()["checks"]
                assert ready.json()["checks"]["database"] != "ok"
                for method, path, body in (
                    ("GET", "/api/v1/agents", None),
                    ("GET", "/api/agents/support/suspended-runs", None),
                    ("POST", "/api/agents/support/decline-tool-call", {"runId": "r1", "toolCallId": "c1"}),
                ):
                    answer = requests.request(
                        method, f"{daphne.url}{path}", json=body, headers=api, timeout=WITHIN
                    )
                    assert answer.status_code == 503, (path, answer.text[:300])
                    assert answer.headers["Content-Type"] == "application/json", path
                    assert answer.json()["code"] == "database_unavailable", path
                    assert int(answer.headers["Retry-After"]) >= 1, path
            reviewer.timeout = WITHIN
            page, html = reviewer.request("inbox", "GET", burst.INBOX)
            assert page.status == 503, page
            assert "The database is not answering" in html
            # The outage's page keeps every page's policy (it is answered through the middlewares).
            cookies = reviewer.cookies
            outage = requests.get(f"{daphne.url}{burst.INBOX}", cookies=cookies, timeout=WITHIN)
            assert outage.status_code == 503
            assert "script-src 'self'" in outage.headers["Content-Security-Policy"]
            assert outage.headers["X-Frame-Options"] == "DENY"

            proxy.restore()

            deadline = time.monotonic() + 60
            while requests.get(f"{daphne.url}/readyz", timeout=30).status_code != 200:
                assert time.monotonic() < deadline, "still not ready a minute after the database came back"
                time.sleep(0.5)
            assert requests.get(f"{daphne.url}/api/v1/agents", headers=api, timeout=30).status_code == 200
            reviewer.timeout = 30
            assert reviewer.request("inbox", "GET", burst.INBOX)[0].status == 200
            reviewer.close()
