"""Text from a model shown so that nothing in it can hide or reorder what a reviewer reads.

Bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069) can show an account number
backwards; zero-width and other format characters can make two different values look the same. On a
card each such character is replaced by a visible mark that names it, e.g. ``⟦U+202E RIGHT-TO-LEFT
OVERRIDE⟧``. Only what is shown changes: stored values, the edit form's text and the CSV keep them.
"""

from __future__ import annotations

import unicodedata

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
