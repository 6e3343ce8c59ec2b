"""The inbox as a reviewer reads it: folded rows carry only their summary, and each row's body (why
the call waits, its arguments, its forms) comes from its own URL when the row opens
(``approvals/partials/run_card.html``). ``opened`` fetches every folded body as htmx does and puts
it in place, so a test reads the page a reviewer reads after opening every row."""

from __future__ import annotations

import html as html_lib
import re

from django.test import Client

HX = {"HTTP_HX_REQUEST": "true"}

#: A folded row's body: fetched (hx-get) when the row opens.
FOLDED_BODY = re.compile(
    r'<div class="call-body call-body-lazy"[^>]*?hx-get="(?P<url>[^"]+)"[^>]*>.*?</div>', re.DOTALL
)


def opened(client: Client, page: str) -> str:
    """``page`` with every folded row's body fetched and put in place."""

    def body(match: re.Match[str]) -> str:
        response = client.get(html_lib.unescape(match["url"]), **HX)
        assert response.status_code == 200, response
        return response.content.decode()

    return FOLDED_BODY.sub(body, page)


def inbox(client: Client, url: str, **headers: str) -> str:
    """The inbox at ``url`` (a page, or with ``HX`` its list), every row opened."""
    return opened(client, client.get(url, **headers).content.decode())
