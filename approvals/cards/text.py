"""Model output and stored values as JSON text a reviewer can trust: for the cards, the audit log and
its CSV (never failing on an odd value). Invisible characters are shown as marks by
``agents_runtime.untrusted.reveal_invisible`` (the ``visible`` template filter): stored values, the edit
form's text and the CSV keep them.
"""

from __future__ import annotations

import json
import logging
import reprlib
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
