"""Reading the app's HTML in tests: its elements, form controls and cards."""

from __future__ import annotations

import re
from html.parser import HTMLParser


class _Elements(HTMLParser):
    """Every element: tag, attributes, and the text directly inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None], list[str]]] = []
        self.open: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        text: list[str] = []
        self.found.append((tag, dict(attrs), text))
        if tag not in {"input", "br", "img", "meta", "link"}:
            self.open.append(text)

    def handle_endtag(self, tag: str) -> None:
        if self.open:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        if self.open:
            self.open[-1].append(data)


def elements(html: str) -> list[tuple[str, dict[str, str | None], str]]:
    parser = _Elements()
    parser.feed(html)
    return [(tag, attrs, "".join(text)) for tag, attrs, text in parser.found]


def controls(html: str) -> list[tuple[str, dict[str, str | None], str]]:
    """Form controls; the text of options and textareas (a select's own is only layout)."""
    found = [e for e in elements(html) if e[0] in {"input", "select", "option", "textarea"}]
    return [(tag, attrs, text if tag in {"option", "textarea"} else "") for tag, attrs, text in found]


def by_id(html: str, element_id: str) -> tuple[str, dict[str, str | None], str]:
    (found,) = [e for e in elements(html) if e[1].get("id") == element_id]
    return found


def card_ids(html: str) -> list[str]:
    return re.findall(r'<article id="run-([^"]+)"', html)


def main_of(html: str) -> str:
    """The page's ``<main>``: what it shows, without the header's attributes (the live notes' words)."""
    start = html.index('<main id="main"')
    return html[start : html.index("</main>", start)]
