"""Run, agent and tool call ids where the web puts them: one URL path segment, an element id, a live
group name. Model output may hold anything in a call id; this is the one place that makes ids safe
for each of those places.

URL path converters (``approvals.urls``): junk is a 404, any tool call id round-trips.

- ``run_id`` / ``agent_id``: any text without ``/`` or NUL, at most 255 characters (what the store
  keeps). ``%00`` never reaches the database (PostgreSQL refuses NUL): the URL does not match.
- ``call_id``: a tool call id is model output and may hold anything printable, ``/`` and ``..``
  included. ``to_url`` percent-encodes ``/``, ``%``, ``?``, ``#`` and the like (and an id made only
  of dots), so the id is one path segment that no browser rewrites; Django quotes that once more, the
  server decodes it once, and ``to_python`` decodes the rest. Ids of letters, digits, ``_-.:@~``
  keep their URL as it was.

Links (``id_url``): ``reverse`` with the URL's shape reversed once and the ids put in their places,
for plain ids; a page of fifty cards links each run and call several times.

Element ids and live group names: views, templates (through the ``dom_id`` tag) and live updates all
build them here, so an htmx target
such as ``#run-<id>`` always matches the element the partial rendered. Run ids made only of ASCII
letters, digits, ``-`` and ``_`` stay as they are (``id="run-<run_id>"`` is part of the stable
surface); any other character (``:`` in a sub-agent's call id, ``.``, spaces...) becomes ``_x<hex>_``.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from django.conf import settings
from django.urls import get_script_prefix, get_urlconf, reverse

from agents_runtime.untrusted import text_problem

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: The longest id the store keeps (runs, calls, agents, threads).
MAX_ID_LENGTH = 255


def storable(value: object) -> bool:
    """Whether ``value`` is an id a database can compare, as posted in a form or a page link: text, at
    most ``MAX_ID_LENGTH`` characters, no NUL (PostgreSQL refuses it), no lone surrogate (no encoding
    holds it). Anything else names nothing stored."""
    return isinstance(value, str) and len(value) <= MAX_ID_LENGTH and text_problem(value) is None


def safe(value: object) -> str:
    """``value`` as a fragment usable in an element id and in an unescaped CSS ``#id`` selector."""
    return _UNSAFE.sub(lambda m: f"_x{ord(m.group()):x}_", str(value))


def dom_id(prefix: str, *parts: object) -> str:
    """``prefix-part1-part2...``, every part made safe: ``dom_id("run", run_id)`` is the run card's id."""
    return "-".join([prefix, *(safe(p) for p in parts)])


def run_card_id(run_id: str) -> str:
    return dom_id("run", run_id)


def call_block_id(run_id: str, tool_call_id: str) -> str:
    return dom_id("call", run_id, tool_call_id)


#: Characters a call id keeps as they are in its URL (RFC 3986 sub-delims, ``:``, ``@``; no ``%``).
_KEPT = "!$&'()*+,;=:@~"


class IdConverter:
    regex = "[^/\x00]{1,255}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class CallIdConverter:
    regex = "[^/\x00]+"

    def to_python(self, value: str) -> str:
        decoded = unquote(value)
        if "\x00" in decoded:
            raise ValueError("NUL in a tool call id")
        return decoded

    def to_url(self, value: str) -> str:
        # (A lone surrogate, which no store keeps, would otherwise fail the page: it finds nothing.)
        encoded = quote(value, safe=_KEPT, errors="surrogatepass")
        if encoded.strip(".") == "":
            # "." and ".." are path segments a browser would resolve away.
            encoded = encoded.replace(".", "%2E")
        return encoded


#: Ids that every converter above writes as they are and that Django's quoting leaves alone; any
#: other id goes through ``reverse`` itself.
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]{1,255}")
#: A URL's text around its ids, by URL name and the URLconf and script prefix it was reversed under.
_URL_SHAPES: dict[tuple[str, int, str, object], tuple[str, ...]] = {}


def id_url(name: str, *ids: str) -> str:
    """``reverse(name, args=ids)``, with the URL's shape reversed once and the ids put in their places."""
    if not all(isinstance(i, str) and _PLAIN_ID.fullmatch(i) for i in ids):
        return reverse(name, args=ids)
    key = (name, len(ids), get_script_prefix(), get_urlconf() or settings.ROOT_URLCONF)
    shape = _URL_SHAPES.get(key)
    if shape is None:
        marks = [f"csid{n}x" for n in range(len(ids))]
        url = reverse(name, args=marks)
        parts = []
        for mark in marks:
            before, found, url = url.partition(mark)
            if not found:
                return reverse(name, args=ids)
            parts.append(before)
        shape = _URL_SHAPES[key] = (*parts, url)
    return "".join(part + value for part, value in zip(shape, (*ids, ""), strict=True))
