"""A live desk for the Python client's tests: Daphne on a fresh database, an external agent with its
token, and a reviewer deciding over the v1 API (real HTTP both ways; nothing of ours is mocked)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ROOT, _start_daphne, _stop
from tests.support import templates
from tests.support.server import TEST_SETTINGS

AGENT = "billing-scripts"
RELEASES = "release-bot"

_REVIEWER = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from approvals.services.tokens import create_token
user = get_user_model().objects.create_user("rita", password=None)
user.groups.add(Group.objects.get(name="Reviewers"))
print(create_token(user, name="desk").plaintext)
"""


@dataclass(frozen=True)
class Desk:
    url: str
    #: Each external agent's token (may create and read that agent's requests only).
    tokens: dict[str, str]
    #: A reviewer's API token, to decide as a person at the desk would.
    reviewer: httpx.Client
    env: dict[str, str]

    def approve(
        self, request_id: str, *, agent: str = AGENT, edited_args: dict[str, Any] | None = None
    ) -> None:
        body = {"editedArgs": edited_args} if edited_args is not None else {}
        response = self.reviewer.post(
            f"/api/v1/agents/{agent}/runs/{request_id}/calls/request/approve", json=body
        )
        assert response.status_code == 200, response.text

    def decline(self, request_id: str, reason: str, *, agent: str = AGENT) -> None:
        response = self.reviewer.post(
            f"/api/v1/agents/{agent}/runs/{request_id}/calls/request/decline", json={"reason": reason}
        )
        assert response.status_code == 200, response.text


def _token(printed: str) -> str:
    return printed.strip().splitlines()[-1].strip()


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    tmp = tmp_path_factory.mktemp("client-desk")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": TEST_SETTINGS,
        "DATABASE_URL": f"sqlite:///{tmp / 'desk.sqlite3'}",
        "AGENTS_RUNTIME": "demo.agents:runtime",
        "AGENTS_MODEL": "",
        "REDIS_URL": "",
        "TASKS_BACKEND": "immediate",
        "DEBUG": "true",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONPATH": str(ROOT),
    }
    templates.migrated(env["DATABASE_URL"], env)
    for agent in (AGENT, RELEASES):
        templates.run(env, "external_agent", "register", agent, "--name", agent.replace("-", " ").title())
    tokens = {
        agent: _token(templates.run(env, "external_agent", "token", agent, "--name", "client tests"))
        for agent in (AGENT, RELEASES)
    }
    reviewer_token = _token(templates.run(env, "shell", "--command", _REVIEWER, timeout=120))
    process, port = _start_daphne(env, tmp / "daphne.log")
    url = f"http://127.0.0.1:{port}"
    reviewer = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {reviewer_token}"}, timeout=30)
    try:
        yield Desk(url, tokens, reviewer, env)
    finally:
        reviewer.close()
        _stop(process)
