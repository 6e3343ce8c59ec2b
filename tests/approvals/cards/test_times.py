"""One time format everywhere: the viewer's zone, UTC on hover, relative times (approvals.times)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from approvals import times
from tests.support.runtime_fixtures import DashboardAgents

MOMENT = datetime(2026, 12, 1, 16, 44, 28, tzinfo=UTC)


def test_a_time_element_shows_the_current_zone_with_utc_on_hover() -> None:
    with timezone.override("America/New_York"):
        html = times.time_element(MOMENT)

    assert html == (
        '<time datetime="2026-12-01T16:44:28+00:00" title="UTC 2026-12-01 16:44:28">'
        "2026-12-01 11:44:28 EST</time>"
    )


@pytest.mark.parametrize(
    ("ago", "text"),
    [
        (timedelta(seconds=10), "just now"),
        (timedelta(seconds=50), "1 min"),
        (timedelta(minutes=3, seconds=20), "3 min"),
        (timedelta(hours=2), "2 h"),
        (timedelta(hours=2, minutes=5), "2 h 5 min"),
        (timedelta(days=3, hours=4), "3 d 4 h"),
        (timedelta(days=12, hours=4), "12 d"),
    ],
)
def test_relative_times_read_like_a_person_would_say_them(ago: timedelta, text: str) -> None:
    assert times.relative_text(MOMENT - ago, MOMENT) == text


def test_a_relative_time_ticks_and_names_both_zones_on_hover() -> None:
    with timezone.override("Asia/Tokyo"):
        html = times.time_element(MOMENT - timedelta(minutes=3), relative=True, now=MOMENT)

    assert "data-relative" in html and ">3 min</time>" in html
    assert 'title="2026-12-02 01:41:28 JST · UTC 2026-12-01 16:41:28"' in html


def _first_time(html: str) -> str:
    """The first call row's "waiting" time, as its title tells it: local time and zone, then UTC."""
    match = re.search(r'class="call-meta">.*?<time [^>]*title="([^"]*)" data-relative>', html, re.S)
    assert match, html
    return match.group(1)


def test_pages_show_times_in_the_browsers_zone_and_the_chosen_one_comes_first(
    agents: DashboardAgents, reviewer: User, reviewer_client: Client
) -> None:
    agents.start("helpdesk", "refund zones")

    default = reviewer_client.get("/agents/helpdesk/").content.decode()
    reviewer_client.cookies[times.BROWSER_ZONE_COOKIE] = "America%2FNew_York"  # as time.js writes it
    browser = reviewer_client.get("/agents/helpdesk/").content.decode()
    chosen = reviewer_client.post(
        "/profile/time-zone/", {"time_zone": "Asia/Tokyo", "next": "/agents/helpdesk/"}
    )
    tokyo = reviewer_client.get("/agents/helpdesk/").content.decode()
    reviewer_client.post("/profile/time-zone/", {"time_zone": "", "next": "/"})
    automatic = reviewer_client.get("/agents/helpdesk/").content.decode()

    assert _first_time(default).split(" · ")[0].endswith(" UTC")
    assert 'data-time-zone-source="default"' in default
    assert _first_time(browser).split(" · ")[0].endswith((" EST", " EDT"))
    assert _first_time(browser).split(" · ")[1].startswith("UTC ")
    assert chosen.status_code == 302 and chosen["Location"] == "/agents/helpdesk/"
    assert _first_time(tokyo).split(" · ")[0].endswith(" JST") and 'data-time-zone-source="chosen"' in tokyo
    assert "<option selected>Asia/Tokyo</option>" in tokyo
    assert _first_time(automatic).split(" · ")[0].endswith((" EST", " EDT"))


def test_a_cookie_that_is_no_zone_is_ignored_and_cannot_be_chosen(
    agents: DashboardAgents, reviewer: User, reviewer_client: Client
) -> None:
    agents.start("helpdesk", "refund zones")
    reviewer_client.cookies[times.BROWSER_ZONE_COOKIE] = "../../etc/passwd"
    response = reviewer_client.post(
        "/profile/time-zone/", {"time_zone": "Mars/Olympus", "next": "https://evil.example/"}
    )

    html = reviewer_client.get("/agents/helpdesk/").content.decode()

    assert response["Location"] == "/"  # not off-site
    assert times.CHOSEN_ZONE_COOKIE not in response.cookies
    # The page it goes back to says the name was refused (times are shown as before).
    assert "Times are shown as before: Choose a time zone from the list." in html
    assert _first_time(html).split(" · ")[0].endswith(" UTC")
