"""An htmx request of a session that has ended goes to the login page as a page, and decides nothing.

Without JavaScript the login redirect stays a plain 302 (see test_views_access); htmx would follow it
inside the request and swap the login page into the card, so for htmx it becomes ``HX-Redirect``.
"""

from __future__ import annotations

import pytest
from django.test import Client

from approvals.middleware import SIGNED_OUT, SIGNED_OUT_READING
from approvals.models import AuditEntry
from tests.support.runtime_fixtures import DashboardAgents

DECISIONS = [
    "/runs/some-run/calls/call_1/approve",
    "/runs/some-run/calls/call_1/decline",
    "/runs/some-run/calls/call_1/resume",
]
INBOX = "http://testserver/agents/helpdesk/?thread=t-1"


@pytest.mark.parametrize("path", DECISIONS)
def test_an_htmx_decision_without_a_session_goes_to_the_login_page_and_back_to_the_inbox(
    agents: DashboardAgents, client: Client, path: str
) -> None:
    response = client.post(path, {"agent": "helpdesk"}, HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL=INBOX)

    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=/agents/helpdesk/%3Fthread%3Dt-1"
    assert not AuditEntry.objects.exists()
    login_page = client.get(response["HX-Redirect"]).content.decode()
    assert SIGNED_OUT in login_page
    assert 'name="next" value="/agents/helpdesk/?thread=t-1"' in login_page


def test_an_htmx_refetch_without_a_session_goes_to_the_login_page(
    agents: DashboardAgents, client: Client
) -> None:
    response = client.get("/agents/helpdesk/?thread=t-1", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL=INBOX)

    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=/agents/helpdesk/%3Fthread%3Dt-1"
    login_page = client.get(response["HX-Redirect"]).content.decode()
    assert SIGNED_OUT_READING in login_page and SIGNED_OUT not in login_page


def test_next_never_leads_to_another_site(agents: DashboardAgents, client: Client) -> None:
    response = client.post(
        DECISIONS[0], HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="https://evil.example/agents/helpdesk/"
    )

    assert response["HX-Redirect"] == "/accounts/login/?next=/"
