"""/healthz, /readyz and /metrics: no login, no session written, /metrics only with its token."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from approvals.models import AuditEntry, ParkedCallRecord, RunRecord

TOKEN = "s3cret-metrics-token"


@pytest.fixture(autouse=True)
def recount_pending(settings: Any) -> None:
    settings.HEALTH_PENDING_CACHE_SECONDS = 0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthz_is_ok_without_login_or_database(client: Client) -> None:
    # No database fixture: any query would raise.
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.content == b"ok\n"
    assert "sessionid" not in response.cookies


@pytest.mark.django_db(transaction=True)
def test_readyz_ok_when_the_database_and_the_channel_layer_answer(client: Client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "channel_layer": "ok"}}
    assert "sessionid" not in response.cookies
    assert Session.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_readyz_503_names_the_channel_layer_when_redis_is_unreachable(client: Client, settings: Any) -> None:
    settings.READYZ_TIMEOUT_SECONDS = 3
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{_closed_port()}/0"]},
        }
    }
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["channel_layer"] != "ok"
    assert [f.split(":")[0] for f in body["failed"]] == ["channel_layer"]


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_readyz_ok_over_redis(client: Client, settings: Any) -> None:
    import os

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/5")]},
        }
    }
    response = client.get("/readyz")
    assert response.status_code == 200, response.content


# -- /metrics ----------------------------------------------------------------------------------------


def test_metrics_is_404_without_a_configured_token(client: Client, settings: Any) -> None:
    settings.METRICS_TOKEN = ""
    settings.DEBUG = False
    assert client.get("/metrics").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_metrics_refuses_a_missing_or_wrong_token(client: Client, settings: Any) -> None:
    settings.METRICS_TOKEN = TOKEN
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401


def _seed() -> None:
    """Two pending calls of helpdesk (refund, transfer) and one of boss; four decisions."""
    # Now, not at import: the oldest call's age is read against the clock when the test runs.
    now = datetime.now(UTC).replace(microsecond=0)
    for i, (agent, tool, waited) in enumerate(
        [("helpdesk", "refund", 600), ("helpdesk", "transfer", 60), ("boss", "worker", 30)]
    ):
        run = RunRecord.objects.create(
            run_id=f"run-{i}",
            agent_id=agent,
            created_at=now - timedelta(seconds=waited),
            suspended_at=now - timedelta(seconds=waited),
            snapshot={},
        )
        ParkedCallRecord.objects.create(
            run=run, position=0, tool_call_id=f"c{i}", tool_name=tool, kind="approval"
        )
    rows: list[tuple[str, str, int | None, str, str]] = [
        # (action, outcome, waited seconds, username, channel)
        ("approve", "completed", 4, "rita", "dashboard"),
        ("decline", "continuing", 100, "rita", "api"),
        ("expire", "expired", 3000, "", "deadline"),
        ("approve", "lost_race", None, "ada", "dashboard"),
    ]
    for i, (action, outcome, wait, user, channel) in enumerate(rows):
        at = now - timedelta(minutes=10)
        AuditEntry.objects.create(
            created_at=at,
            parked_at=None if wait is None else at - timedelta(seconds=wait),
            username=user,
            agent_id="helpdesk",
            run_id=f"done-{i}",
            tool_call_id=f"d{i}",
            tool_name="refund",
            action=action,
            outcome=outcome,
            channel=channel,
        )


@pytest.mark.django_db(transaction=True)
def test_metrics_in_prometheus_format_match_the_data(client: Client, settings: Any) -> None:
    settings.METRICS_TOKEN = TOKEN
    _seed()
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
    }
    pending = {k[1]: v for k, v in samples.items() if k[0] == "countersign_pending_calls"}
    assert pending == {
        (("agent", "boss"), ("tool", "worker")): 1,
        (("agent", "helpdesk"), ("tool", "refund")): 1,
        (("agent", "helpdesk"), ("tool", "transfer")): 1,
    }
    oldest = {
        dict(k[1])["agent"]: v for k, v in samples.items() if k[0] == "countersign_oldest_pending_seconds"
    }
    assert 600 <= oldest["helpdesk"] < 660 and 30 <= oldest["boss"] < 90
    decisions = {k[1]: v for k, v in samples.items() if k[0] == "countersign_decisions_total"}
    assert decisions == {
        (("action", "approve"), ("agent", "helpdesk"), ("outcome", "took_effect")): 1,
        (("action", "decline"), ("agent", "helpdesk"), ("outcome", "took_effect")): 1,
        (("action", "expire"), ("agent", "helpdesk"), ("outcome", "expired")): 1,
        (("action", "approve"), ("agent", "helpdesk"), ("outcome", "lost_race")): 1,
    }
    helpdesk = (("agent", "helpdesk"),)
    buckets = {
        dict(k[1])["le"]: v
        for k, v in samples.items()
        if k[0] == "countersign_time_to_decision_seconds_bucket" and dict(k[1])["agent"] == "helpdesk"
    }
    assert buckets["1.0"] == 0 and buckets["5.0"] == 1 and buckets["60.0"] == 1
    assert (
        buckets["120.0"] == 2 and buckets["1800.0"] == 2 and buckets["3600.0"] == 3 and buckets["+Inf"] == 3
    )
    assert samples[("countersign_time_to_decision_seconds_count", helpdesk)] == 3
    assert samples[("countersign_time_to_decision_seconds_sum", helpdesk)] == 3104
    assert "countersign_grants_used" in families
    assert not [s for s in families["countersign_grants_used"].samples]
    assert Session.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_metrics_open_under_debug_without_a_token(client: Client, settings: Any) -> None:
    settings.METRICS_TOKEN = ""
    settings.DEBUG = True
    response = client.get("/metrics")
    assert response.status_code == 200
    assert b"countersign_pending_calls" in response.content
