"""Fixtures for the API tests: the recording's agents served as ``AGENTS_RUNTIME``, users and tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from agents_runtime import Runtime
from approvals import agents as served
from approvals.apps import compose
from approvals.services.tokens import create_token
from tests.api import mastra_agents
from tests.approvals.conftest import _user


@pytest.fixture
def mastra(settings: Any, transactional_db: None) -> Iterator[Runtime]:
    """``approver``, ``asker`` and ``nomem``, served by the app (fresh call counters per test)."""
    built = mastra_agents.build()
    previous = served.runtime()
    mastra_agents.runtime = built
    settings.AGENTS_RUNTIME = "tests.api.mastra_agents:runtime"
    compose(built)
    yield built
    served.install(previous)


@pytest.fixture
def reviewer(transactional_db: None) -> User:
    return _user("rita", "Reviewers")


@pytest.fixture
def token_for() -> Callable[[User], str]:
    def make(user: User) -> str:
        return create_token(user, name="test").plaintext

    return make


@pytest.fixture
def reviewer_token(reviewer: User, token_for: Callable[[User], str]) -> str:
    return token_for(reviewer)


@pytest.fixture
def designated(transactional_db: None) -> User:
    """A reviewer of ``asker`` only (group ``agent:asker`` with the decide permission via Reviewers)."""
    Group.objects.get_or_create(name="agent:asker")
    return _user("dora", "Reviewers", "agent:asker")


class Api:
    """Django's async test client with a Bearer token on every request (its ``headers=`` argument
    to the constructor does not reach ASGI requests)."""

    def __init__(self, token: str | None, **headers: str) -> None:
        from django.test import AsyncClient

        # As a browser's request would be checked: a Bearer request must not need a CSRF token.
        self.client = AsyncClient(enforce_csrf_checks=True)
        self.headers = dict(headers)
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"

    async def get(self, path: str, data: dict[str, Any] | None = None) -> Any:
        return await self.client.get(path, data, headers=self.headers)

    async def post(self, path: str, body: Any = None, *, raw: bytes | None = None) -> Any:
        import json

        content = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
        return await self.client.post(path, content, content_type="application/json", headers=self.headers)


async def read(response: Any) -> bytes:
    """The whole body of a response, streamed or not."""
    if response.streaming:
        return b"".join([part async for part in response.streaming_content])
    return bytes(response.content)


def events(body: bytes) -> list[Any]:
    """The data of each server-sent event (``[DONE]`` as the string)."""
    import json

    out: list[Any] = []
    for block in body.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block.removeprefix("data: ")
            out.append(data if data == "[DONE]" else json.loads(data))
    return out
