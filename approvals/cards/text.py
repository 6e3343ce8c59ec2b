"""Model output and stored values as text a reviewer can trust: JSON text for the cards, the audit log
and its CSV (never failing on an odd value), and every invisible character shown as a visible mark.

Bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069) can show an account number
backwards; zero-width and other format characters can make two different values look the same. On a
card each such character is replaced by a visible mark that names it, e.g. ``⟦U+202E RIGHT-TO-LEFT
OVERRIDE⟧``. Only what is shown changes: stored values, the edit form's text and the CSV keep them.
"""

from __future__ import annotations

import json
import logging
import reprlib
import unicodedata
from typing import Any

from agents_runtime.untrusted import clean_text

#: JSON longer than this (lines or characters) is folded into a <details>.
LONG_JSON_LINES = 12
LONG_JSON_CHARS = 600


logger = logging.getLogger(__name__)
#: What a value that is not JSON (or too deep for it) is shown as: its escaped, shortened repr.
SHORT_REPR = reprlib.Repr(maxlevel=8, maxlist=20, maxdict=20, maxstring=200, maxother=200)
NOT_JSON_NOTE = "[cannot be shown as JSON, shown escaped]"


def _json_text(value: Any, **options: Any) -> str:
    """JSON text that can always be sent as UTF-8; a value stored before values were normalised
    (lone surrogates, NaN, deep nesting) is shown escaped with a note instead of failing the page."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str, **options)
        if clean_text(text) is not text:
            # Lone surrogates: written as JSON escapes (\ud800) they are shown as they are.
            text = json.dumps(value, ensure_ascii=True, default=str, **options)
        return text
    except (ValueError, TypeError, RecursionError) as exc:
        logger.warning("A stored value cannot be shown as JSON: %s", type(exc).__name__)
        return f"{NOT_JSON_NOTE} {clean_text(SHORT_REPR.repr(value))}"


def pretty_json(value: Any) -> str:
    """Indented JSON text; the template escapes it (it is untrusted model output)."""
    return _json_text(value, indent=2)


def compact_json(value: Any) -> str:
    """One-line JSON for CSV cells; empty for None."""
    return "" if value is None else _json_text(value)


def is_long(text: str) -> bool:
    return text.count("\n") + 1 > LONG_JSON_LINES or len(text) > LONG_JSON_CHARS


# -- invisible characters, shown ----------------------------------------------------------------

#: Characters with no glyph that are not Unicode "format" characters (category Cf) but still
#: render as nothing: Hangul fillers, the Mongolian vowel separator, the braille blank.
_ALSO_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u180e\u2800")


def _hidden(char: str) -> bool:
    return unicodedata.category(char) == "Cf" or char in _ALSO_INVISIBLE


def _mark(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"⟦U+{ord(char):04X}{' ' + name if name else ''}⟧"


def reveal_invisible(text: str) -> str:
    """``text`` with each bidi control, zero-width or other invisible character shown as a mark."""
    if text.isascii():
        return text
    return "".join(_mark(c) if _hidden(c) else c for c in text)
