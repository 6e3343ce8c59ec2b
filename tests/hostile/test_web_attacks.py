"""A web attacker's view of the dashboard: what a crafted link makes the site's own pages link to.

Each test fails on the code before its fix, as the reviewer who followed the attacker's link sees it.
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

from django.test import Client

from tests.support.markup import elements

#: Where the attacker wants the reviewer to go: their look-alike login page.
PHISH = "evil.example"
#: Attributes whose value the browser follows as a URL (a link, a form, an htmx request).
URL_ATTRIBUTES = ("href", "action", "formaction", "hx-get", "hx-post")


def test_a_path_that_starts_with_two_slashes_gives_no_link_off_the_site(reviewer_client: Client) -> None:
    # https://countersign.example//evil.example/login is this site's address (a 404 page, served
    # whole, with the signed-in header). Its "Sign in again" link, revealed once the session ends,
    # was the page's own path: //evil.example/login, a link to another host.
    path = f"//{PHISH}/login"
    page_url = f"http://testserver{path}"
    response = reviewer_client.get("/", PATH_INFO=path)

    assert response.status_code == 404
    followed = [
        (tag, name, urljoin(page_url, value))
        for tag, attrs, _ in elements(response.content.decode())
        for name, value in attrs.items()
        if name in URL_ATTRIBUTES and value is not None
    ]
    assert followed  # (the header's links, the profile and logout forms...)
    off_site = [(tag, name, url) for tag, name, url in followed if urlsplit(url).hostname != "testserver"]
    assert off_site == []
