"""Text as a database can hold it."""

from __future__ import annotations

import re

# What PostgreSQL refuses in text (NUL) or no UTF-8 codec can encode (lone surrogates).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` with what a database cannot hold replaced by U+FFFD (it is shown, never dropped)."""
    return _UNSTORABLE.sub("\ufffd", text)
