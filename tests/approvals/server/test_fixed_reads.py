"""Fixed reads (approvals/server/database.py): a read every request or decision makes, compiled once.
``fixed_models`` gives the instances the ORM's own query gives, each field converted as the ORM
converts it (JSON, times), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from approvals.models import WebhookEndpoint
from approvals.server.database import fixed_models

pytestmark = pytest.mark.django_db


def _fields(endpoint: WebhookEndpoint) -> dict[str, object]:
    return {
        field.attname: getattr(endpoint, field.attname) for field in WebhookEndpoint._meta.concrete_fields
    }


def test_fixed_models_are_the_instances_the_orm_reads() -> None:
    WebhookEndpoint.objects.create(
        url="https://hooks.example/a",
        events=["run.failed", "call.decided"],
        agents=["helpdesk"],
        created_at=datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC),
    )
    WebhookEndpoint.objects.create(url="https://hooks.example/b", description="every agent", agents=[])
    WebhookEndpoint.objects.create(url="https://hooks.example/off", active=False)

    def active() -> list[WebhookEndpoint]:
        return fixed_models(
            "test endpoints", WebhookEndpoint, lambda: WebhookEndpoint.objects.filter(active=True)
        )

    for _ in range(2):  # compiled the first time, reused the second
        read = active()
        assert [_fields(e) for e in read] == [_fields(e) for e in WebhookEndpoint.objects.filter(active=True)]
    first, second = read
    assert first.events == ["run.failed", "call.decided"] and first.agents == ["helpdesk"]
    assert first.created_at == datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC)
    assert not first.wants("run.completed", "helpdesk") and not first.wants("call.decided", "help")
    assert first.wants("call.decided", "helpdesk") and second.wants("run.completed", "anyone")
    assert not first._state.adding and first._state.db == "default"
