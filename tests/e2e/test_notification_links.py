"""A notification's links go to the address the server is reached at, with COUNTERSIGN_BASE_URL unset
(as under ``make run PORT=9000``): the real server, on a port of its own, once a reviewer has loaded a
page from it; the message is built by another process (``manage.py``), as a worker would."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import ADMIN, Pages, Server

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.own_sqlite]

BUILD = """
from django.contrib.auth import get_user_model
from approvals.models import Notification, NotificationCall
from approvals.notifications import messages
user = get_user_model().objects.get(username={username!r})
notification = Notification.objects.create(recipient=user, channel="email", kind="parked")
NotificationCall.objects.create(
    notification=notification, agent_id="support", run_id="r-links", tool_call_id="c-1",
    tool_name="issue_refund", title="Refund $12.00 · A-1",
)
print(messages.build(notification).text)
notification.delete()
"""


def test_links_go_to_the_port_the_server_is_reached_at(pages: Pages, server: Server) -> None:
    assert not server.env.get("COUNTERSIGN_BASE_URL")
    page = pages.open(ADMIN)
    page.goto("/agents/", wait_until="networkidle")

    # The server's sweep (each second) writes the address down; the message is built elsewhere.
    for _ in range(10):
        text = server.manage("shell", "--command", BUILD.format(username=ADMIN.username))
        if f"Open: {server.base_url}/runs/r-links/" in text:
            break
        time.sleep(0.5)

    assert f"Open: {server.base_url}/runs/r-links/" in text, text
    assert "- Refund $12.00 · A-1 on " in text
