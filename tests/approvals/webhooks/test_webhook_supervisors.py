"""Webhooks for a supervisor's delegated call: announced once, on the run where it is decided."""

from __future__ import annotations

from typing import Any

from approvals.models import WebhookDelivery, WebhookEndpoint
from tests.support.runtime_fixtures import DashboardAgents


def test_a_sub_agents_call_is_announced_once_on_its_supervisors_run(
    agents: DashboardAgents, settings: Any
) -> None:
    # Nobody listens: the deliveries stay recorded, which is what this test reads.
    settings.WEBHOOK_RETRY_SECONDS = [3600]
    WebhookEndpoint.objects.create(url="https://hooks.example.com/in", events=["call.suspended"])

    run = agents.start("boss", "wipe")

    suspended = list(
        WebhookDelivery.objects.filter(event_type="call.suspended").values_list("payload", flat=True)
    )
    assert [(p["data"]["agentId"], p["data"]["runId"]) for p in suspended] == [("boss", run.run_id)]
    assert suspended[0]["data"]["toolName"] == "wipe_disk"
