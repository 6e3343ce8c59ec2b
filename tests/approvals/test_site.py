"""Links that leave the site (notifications, webhooks) start with the address it is reached at:
``COUNTERSIGN_BASE_URL`` when set, else the address a signed-in person's browser loaded a page from
(as ``make run PORT=9000`` serves it), else ``http://localhost:8000``; and nobody outside can move it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from agents_runtime import RunEvent
from approvals import site
from approvals.models import Notification, NotificationCall, ServedAddress
from approvals.notifications import messages
from approvals.webhooks.events import payloads
from tests.support.runtime_fixtures import DashboardAgents

SERVED = "127.0.0.1:9000"


@pytest.fixture(autouse=True)
def unset(settings: Any) -> Iterator[None]:
    settings.COUNTERSIGN_BASE_URL = ""
    settings.ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
    yield


def message_links(reviewer: User, run_id: str) -> str:
    notification = Notification.objects.create(recipient=reviewer, channel="email", kind="parked")
    NotificationCall.objects.create(
        notification=notification, agent_id="helpdesk", run_id=run_id, tool_call_id="c1", tool_name="refund"
    )
    return messages.build(notification).text


def test_unset_and_never_visited_links_go_to_make_runs_default(reviewer: User) -> None:
    assert site.base_url() == "http://localhost:8000"
    assert "http://localhost:8000/runs/r-1/" in message_links(reviewer, "r-1")


def test_a_signed_in_page_at_another_port_moves_every_link_there(
    agents: DashboardAgents, reviewer: User, client_for: Callable[[User], Client]
) -> None:
    assert client_for(reviewer).get("/queue/", HTTP_HOST=SERVED).status_code == 200

    assert site.base_url() == f"http://{SERVED}"
    assert f"http://{SERVED}/runs/r-1/" in message_links(reviewer, "r-1")
    run = agents.start("helpdesk", "refund linked")
    event = RunEvent("run-suspended", "helpdesk", run.run_id, run.tool_calls[0].tool_call_id)
    assert payloads(event)[0]["links"]["dashboard"] == f"http://{SERVED}/runs/{run.run_id}/"
    # The sweep writes it down for the other processes (a worker, this server after a restart),
    # once: not again while pages are served at the same address.
    assert not ServedAddress.objects.exists()  # (nothing written on the request)
    assert site.save() and not site.save()
    client_for(reviewer).get(reverse("approvals:overview"), HTTP_HOST=SERVED)
    assert not site.save()
    site.forget()  # another process, or this one restarted
    assert site.base_url() == f"http://{SERVED}"
    assert list(ServedAddress.objects.values_list("url", flat=True)) == [f"http://{SERVED}"]


def test_the_setting_wins_over_the_address_pages_are_served_at(
    settings: Any, reviewer: User, client_for: Callable[[User], Client]
) -> None:
    settings.COUNTERSIGN_BASE_URL = "https://desk.example.com/"
    client_for(reviewer).get("/queue/", HTTP_HOST=SERVED)

    assert site.base_url() == "https://desk.example.com"
    assert "https://desk.example.com/runs/r-1/" in message_links(reviewer, "r-1")


def test_nobody_outside_moves_the_links(
    reviewer: User, client_for: Callable[[User], Client], settings: Any
) -> None:
    Client().get(reverse("login"), HTTP_HOST=SERVED)  # anonymous
    signed_in = client_for(reviewer)
    assert signed_in.get("/queue/", HTTP_HOST="evil.example").status_code == 400  # not an allowed host
    signed_in.get("/api/v1/agents", HTTP_HOST=SERVED)  # the API: an agent's view of the network
    signed_in.post(reverse("approvals:time_zone"), {"time_zone": "UTC"}, HTTP_HOST=SERVED)

    assert site.noted() is None and not site.save()
    assert site.base_url() == "http://localhost:8000"
