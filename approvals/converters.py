"""Path converters for ids in the dashboard's URLs: junk is a 404, any tool call id round-trips.

- ``run_id`` / ``agent_id``: any text without ``/`` or NUL, at most 255 characters (what the store
  keeps). ``%00`` never reaches the database (PostgreSQL refuses NUL): the URL does not match.
- ``call_id``: a tool call id is model output and may hold anything printable, ``/`` and ``..``
  included. ``to_url`` percent-encodes ``/``, ``%``, ``?``, ``#`` and the like (and an id made only
  of dots), so the id is one path segment that no browser rewrites; Django quotes that once more, the
  server decodes it once, and ``to_python`` decodes the rest. Ids of letters, digits, ``_-.:@~``
  keep their URL as it was.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

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
