"""Fixtures for the hostile-input tests: the hostile runtime served by the dashboard, and users."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from approvals import agents as served
from approvals.apps import compose
from tests.approvals.conftest import (  # noqa: F401 - fixtures shared with the dashboard tests
    admin_member,
    admin_member_client,
    client_for,
    reviewer,
    reviewer_client,
)
from tests.support import hostile_runtime as hostile_runtime
from tests.support.hostile_runtime import Hostile

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def serve(settings: Any, transactional_db: None) -> Iterator[Any]:
    """``serve(fill_schema=None)``: a fresh hostile runtime, served by the dashboard."""

    previous = served.runtime()

    def build(fill_schema: Any = None) -> Hostile:
        built = hostile_runtime.build_runtime(fill_schema)
        settings.AGENTS_RUNTIME = "tests.support.hostile_runtime:runtime"
        compose(built.runtime)
        return built

    yield build
    served.install(previous)


@pytest.fixture
def hostile(serve: Any) -> Hostile:
    built: Hostile = serve()
    return built


@pytest.fixture
def postgres() -> bool:
    return connection.vendor == "postgresql"


def assert_no_5xx(client: Client, url: str, **extra: Any) -> Any:
    response = client.get(url, **extra)
    assert response.status_code < 500, (url, response.status_code)
    if hasattr(response, "streaming_content"):
        b"".join(response.streaming_content)
    return response
