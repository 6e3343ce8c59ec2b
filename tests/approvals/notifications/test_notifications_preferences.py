"""The account's Notifications page: login, CSRF, a strict CSP, and the checks on what it saves."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from approvals.models import Notification, NotificationPreference
from approvals.notifications.preferences import check_chat_url

URL = "/account/notifications/"
GOOD = {
    "mode": "digest",
    "email": "on",
    "chat_url": "https://hooks.slack.com/services/T0/B0/x",
    "digest_minutes": "30",
}


def test_the_page_needs_a_login(transactional_db: None) -> None:
    assert reverse("approvals:notifications") == URL
    response = Client().get(URL)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert Client().post(URL, GOOD).status_code == 302
    assert not NotificationPreference.objects.exists()


def test_the_page_shows_the_defaults_under_a_strict_csp(
    reviewer: User, client_for: Callable[[User], Client]
) -> None:
    reviewer.email = "rita@example.com"
    reviewer.save()
    Notification.objects.create(
        recipient=reviewer, channel="email", kind="parked", status="failed", attempts=3,
        last_error="SMTPDataError: <b>554</b>",
    )  # fmt: skip
    response = client_for(reviewer).get(URL)

    assert response.status_code == 200
    page = response.content.decode()
    assert 'name="csrfmiddlewaretoken"' in page and "rita@example.com" in page
    # Who never chose gets a daily digest, and the page says so.
    assert re.search(r'<input[^>]*name="mode"[^>]*value="digest"[^>]*checked', page)
    assert re.search(r'<input[^>]*name="digest_minutes"[^>]*value="1440"', page)
    assert "SMTPDataError: &lt;b&gt;554&lt;/b&gt;" in page and "<b>554" not in page
    assert f'href="{URL}"' in page  # the account area's link
    csp = response["Content-Security-Policy"]
    assert "'unsafe-inline'" not in csp and "script-src 'self'" in csp
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page) and " style=" not in page


def test_saving_needs_the_csrf_token(reviewer: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    assert client.post(URL, GOOD).status_code == 403
    assert not NotificationPreference.objects.exists()


def test_a_preference_is_saved_and_checked(
    reviewer: User, client_for: Callable[[User], Client], settings: Any
) -> None:
    client = client_for(reviewer)
    saved = client.post(URL, GOOD)
    assert saved.status_code == 302 and saved["Location"] == URL
    preference = NotificationPreference.objects.get(user=reviewer)
    assert (preference.mode, preference.email, preference.chat_url, preference.digest_minutes) == (
        "digest", True, GOOD["chat_url"], 30,
    )  # fmt: skip

    plain = client.post(URL, {**GOOD, "chat_url": "http://hooks.slack.com/services/x"})
    assert plain.status_code == 400 and "Use an https:// address." in plain.content.decode()
    for bad in ({"digest_minutes": "0"}, {"mode": "loud"}, {"chat_url": "javascript:alert(1)"}):
        assert client.post(URL, {**GOOD, **bad}).status_code == 400, bad
    settings.NOTIFY_CHAT_HOSTS = ["hooks.slack.com"]
    elsewhere = client.post(URL, {**GOOD, "chat_url": "https://10.0.0.1/hook"})
    assert elsewhere.status_code == 400 and "may only go to: hooks.slack.com" in elsewhere.content.decode()

    off = client.post(URL, {"mode": "off", "chat_url": "", "digest_minutes": "15"})  # (unchecked: no email)
    assert off.status_code == 302
    preference.refresh_from_db()
    assert (preference.mode, preference.email, preference.chat_url) == ("off", False, "")
    assert NotificationPreference.objects.count() == 1


@pytest.mark.parametrize(
    "url",
    ["https://127.0.0.1/hook", "https://localhost/hook", "https://169.254.169.254/latest", "https://[::1]/x"],
)
def test_a_chat_hook_on_this_machine_or_a_private_network_is_refused(
    url: str, transactional_db: None
) -> None:
    with pytest.raises(ValidationError, match="private network"):
        check_chat_url(url)
