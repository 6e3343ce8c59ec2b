"""The Django admin for the Admins group: they sign in with their password (not only staff), use the
rights the group gives them, and read what concerns agents as the desk's policy shows it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.utils import timezone

from approvals.models import ApiToken, AuditEntry, GrantRecord, WebhookDelivery, WebhookEndpoint
from approvals.services.tokens import create_token
from tests.support.runtime_fixtures import DashboardAgents
from tests.support.users import PASSWORD, make_user


def _sign_in(username: str) -> tuple[Client, Any]:
    client = Client()
    form = {"username": username, "password": PASSWORD, "next": "/admin/"}
    return client, client.post("/admin/login/?next=/admin/", form)


def test_an_admin_who_is_not_staff_signs_in_to_the_django_admin_with_their_password(
    agents: DashboardAgents, admin_member: User
) -> None:
    assert not admin_member.is_staff

    client, signed_in = _sign_in("ada")

    assert signed_in.status_code == 302 and signed_in["Location"] == "/admin/"
    index = client.get("/admin/").content.decode()
    assert "Standing grants" in index and "Users" in index and "Audit log" in index


def test_a_reviewer_cannot_sign_in_to_the_django_admin(agents: DashboardAgents, reviewer: User) -> None:
    client, refused = _sign_in("rita")

    assert refused.status_code == 200
    assert "an account that may use the admin (staff, or the Admins group)" in refused.content.decode()
    assert client.get("/admin/").status_code == 302


def _grant(agent_id: str, tool_name: str, by: str) -> GrantRecord:
    return GrantRecord.objects.create(
        agent_id=agent_id,
        tool_name=tool_name,
        scope="everyone",
        created_by_name=by,
        max_uses=3,
        expires_at=timezone.now() + timedelta(hours=1),
    )


def test_an_admin_revokes_a_grant_in_the_django_admin_and_it_is_audited(
    agents: DashboardAgents, admin_member: User, reviewer: User
) -> None:
    client, _ = _sign_in("ada")
    first = agents.start("helpdesk", "refund first", thread="t-1")
    data = {"agent": "helpdesk", "grant-scope": "thread", "grant-lasts": "1h"}
    rita = Client()
    rita.force_login(reviewer)
    rita.post(
        f"/runs/{first.run_id}/calls/{first.tool_calls[0].tool_call_id}/approve", data, HTTP_HX_REQUEST="true"
    )
    grant = GrantRecord.objects.get()

    listing = client.get("/admin/approvals/grantrecord/").content.decode()
    assert f"/admin/approvals/grantrecord/{grant.pk}/" in listing
    done = client.post(
        "/admin/approvals/grantrecord/",
        {"action": "revoke", "_selected_action": [grant.pk]},
        follow=True,
    )

    assert "1 grant(s) revoked." in done.content.decode()
    grant.refresh_from_db()
    assert grant.revoked_by_name == "ada" and grant.revoked_at is not None
    assert AuditEntry.objects.filter(action="revoke", username="ada", grant=grant).count() == 1
    assert client.get("/admin/approvals/grantrecord/add/").status_code == 403


def test_an_admin_designated_for_one_agent_sees_only_its_grants_and_tokens(
    agents: DashboardAgents, reviewer: User
) -> None:
    Group.objects.get_or_create(name="agent:helpdesk")
    Group.objects.get_or_create(name="agent:boss")
    admin = make_user("dana", "Admins", "agent:helpdesk")
    # (Admins do not hold it; a staff member who does still sees only their agents' users' tokens.)
    admin.user_permissions.add(Permission.objects.get(codename="view_apitoken"))
    mine, theirs = _grant("helpdesk", "refund", "rita"), _grant("boss", "wipe_disk", "rita")
    helpdesk_only = make_user("hal", "agent:helpdesk")
    boss_only = make_user("bo", "agent:boss")
    create_token(helpdesk_only, name="hal's key")
    create_token(boss_only, name="bo's key")
    create_token(reviewer, name="rita's key")  # rita sees every agent: more than dana does
    client, _ = _sign_in("dana")

    grants = client.get("/admin/approvals/grantrecord/").content.decode()
    tokens = client.get("/admin/approvals/apitoken/").content.decode()

    assert f"/admin/approvals/grantrecord/{mine.pk}/" in grants
    assert f"/admin/approvals/grantrecord/{theirs.pk}/" not in grants
    assert client.get(f"/admin/approvals/grantrecord/{theirs.pk}/change/").status_code in (302, 404)
    assert "hal&#x27;s key" in tokens
    assert "bo&#x27;s key" not in tokens and "rita&#x27;s key" not in tokens
    hal_token = ApiToken.objects.get(user=helpdesk_only)
    assert "digest" not in client.get(f"/admin/approvals/apitoken/{hal_token.pk}/change/").content.decode()


def test_an_admin_designated_for_one_agent_manages_no_account_that_sees_more_nor_widens_one(
    agents: DashboardAgents, reviewer: User
) -> None:
    """Setting the password of an account that sees every agent would be becoming it, and taking
    one's own ``agent:`` group away would be seeing every agent: both are refused, with reasons;
    the accounts of their own agent stay theirs to manage."""
    Group.objects.get_or_create(name="agent:helpdesk")
    dana = make_user("dana", "Admins", "agent:helpdesk")
    hal = make_user("hal", "agent:helpdesk")
    client, _ = _sign_in("dana")
    new = {"password1": "a new Passw0rd for rita!", "password2": "a new Passw0rd for rita!"}

    users = client.get("/admin/auth/user/").content.decode()
    assert (
        f"/admin/auth/user/{hal.pk}/change/" in users
        and f"/admin/auth/user/{reviewer.pk}/change/" not in users
    )
    assert client.post(f"/admin/auth/user/{reviewer.pk}/password/", new).status_code in (403, 404)
    reviewer.refresh_from_db()
    assert not reviewer.check_password(new["password1"])
    assert client.post(f"/admin/auth/user/{hal.pk}/password/", new).status_code == 302  # hers

    widened = _change(client, dana, groups=["Admins"])  # agent:helpdesk dropped
    assert "These groups would let the account see agents you do not see" in widened
    assert set(dana.groups.values_list("name", flat=True)) == {"Admins", "agent:helpdesk"}
    _change(client, hal, groups=["agent:helpdesk", "Auditors"])  # within her sight: taken
    assert set(hal.groups.values_list("name", flat=True)) == {"agent:helpdesk", "Auditors"}


def _change(client: Client, user: User, *, groups: list[str]) -> str:
    """The user's change form posted as shown, with ``groups``; the answer's text."""
    form = client.get(f"/admin/auth/user/{user.pk}/change/").context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k not in ("password", "groups")}
    data.pop("date_joined", None)
    data.pop("last_login", None)
    data |= {
        "groups": [Group.objects.get(name=name).pk for name in groups],
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "is_active": "on",
    }
    return client.post(f"/admin/auth/user/{user.pk}/change/", data).content.decode()


def test_an_admin_designated_for_one_agent_reads_no_url_of_an_endpoint_they_do_not_see(
    agents: DashboardAgents,
) -> None:
    """Deliveries' endpoint filter and column name only the endpoints the endpoint admin shows them
    (a URL often carries a secret)."""
    Group.objects.get_or_create(name="agent:helpdesk")
    make_user("dana", "Admins", "agent:helpdesk")
    for path in ("helpdesk", "helpdesk-2"):  # (two: a filter of one choice is not shown)
        WebhookEndpoint.objects.create(url=f"https://hooks.example.com/{path}", agents=["helpdesk"])
    WebhookEndpoint.objects.create(url="https://hooks.example.com/boss-T0KEN", agents=["boss"])
    everyone = WebhookEndpoint.objects.create(url="https://hooks.example.com/all-T0KEN", agents=[])
    WebhookDelivery.objects.create(
        endpoint=everyone,
        event_type="call.decided",
        message_id="msg-1",
        payload={"data": {"agentId": "helpdesk"}},
    )
    client, _ = _sign_in("dana")

    listing = client.get("/admin/approvals/webhookdelivery/").content.decode()
    (delivery,) = WebhookDelivery.objects.all()
    detail = client.get(f"/admin/approvals/webhookdelivery/{delivery.pk}/change/").content.decode()

    assert "https://hooks.example.com/helpdesk-2" in listing  # hers, in the filter
    for page in (listing, detail):
        assert "T0KEN" not in page
        assert "an endpoint of agents you do not all see" in page


def test_an_admin_designated_for_one_agent_reads_no_token_of_an_external_agent_they_do_not_see(
    agents: DashboardAgents,
) -> None:
    from approvals.services import requests as request_services

    Group.objects.get_or_create(name="agent:helpdesk")
    dana = make_user("dana", "Admins", "agent:helpdesk")
    dana.user_permissions.add(Permission.objects.get(codename="view_apitoken"))
    request_services.register("billing-bot", name="Billing bot", tools={})
    request_services.agent_token("billing-bot", name="billing-bot prod key")
    client, _ = _sign_in("dana")

    assert "billing-bot prod key" not in client.get("/admin/approvals/apitoken/").content.decode()
