"""Untrusted data at the runtime's edges: model and tool output normalised, decisions checked.

Stores cannot keep everything Python can hold: PostgreSQL refuses NUL in text and NaN in JSON, a lone
surrogate cannot be encoded as UTF-8, Python will not print an integer of more than 4,300 digits, and
deep JSON exhausts the recursion limit of whoever reads it next. So:

**Model and tool output** (tool call ids, arguments, text, tool results, suspend payloads, snapshots)
is put in a *normal form* before it is stored or emitted, identically for every store: made JSON data
(``to_jsonable``: pydantic models dumped, the rest through pydantic), then:

- text: NUL and lone surrogates become U+FFFD (a surrogate pair is joined into its character);
- numbers: NaN, +inf and -inf become the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``; an
  integer of more than ``MAX_INT_DIGITS`` digits becomes its digits as a string, or
  ``"<integer of N digits>"`` past what Python prints;
- object keys are text (normalised the same way); anything that is not JSON becomes its text;
- containers nested deeper than ``MAX_DEPTH`` levels become ``"<nested deeper than 32 levels>"``;
- a tool call id that is empty, longer than ``MAX_ID_LENGTH`` or not printable (NUL, controls,
  surrogates) becomes its printable start (at most 64 characters, others as ``_``), ``~`` and 24 hex
  digits of its SHA-256: short, stable (the same id always maps to the same one) and left unchanged
  when normalised again.

Each normalisation that changed something is logged as a warning.

**Shown** (``reveal_invisible``): bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069)
can show an account number backwards, and zero-width and other format characters make two different
values look the same, so wherever such text is displayed each of these characters is replaced by a
visible mark that names it, e.g. ``⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧``. Only what is shown changes.

**Decisions** (resume data, edited arguments, decline reasons) come from people and are never
altered: anything outside these limits is refused before anything runs (``problems`` lists why):
no NUL, no lone surrogates, no NaN or infinities, no integers of more than ``MAX_INT_DIGITS`` digits,
nesting at most ``MAX_DEPTH`` levels, at most ``MAX_DECISION_BYTES`` of JSON, JSON types only; a
decline's reason at most ``MAX_REASON_LENGTH`` characters (``reason_problem``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pydantic

from .errors import InvalidResumeData, InvalidToolArgs
from .store import DecisionAction, ParkedCall

logger = logging.getLogger("agents_runtime")

#: Containers nested deeper than this are cut (output) or refused (decisions).
MAX_DEPTH = 32
#: Integers with more digits are text (output) or refused (decisions).
MAX_INT_DIGITS = 100
#: Tool call ids longer than this are mapped to a short stable one.
MAX_ID_LENGTH = 128
#: The readable start kept in a mapped id.
_ID_START = 64
#: The most a decision's data may weigh as compact JSON (UTF-8 bytes).
MAX_DECISION_BYTES = 64 * 1024
#: The longest decline reason taken (the model reads it as the tool's result; every refused attempt
#: is an audit row).
MAX_REASON_LENGTH = 2000
#: How deep a snapshot (a conversation: its own structure plus arguments and results) may nest.
SNAPSHOT_MAX_DEPTH = 4 * MAX_DEPTH

REPLACEMENT = "\ufffd"
TOO_DEEP = f"<nested deeper than {MAX_DEPTH} levels>"
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_INT_LIMIT = 10**MAX_INT_DIGITS
#: Python's default limit on converting integers to and from text.
_PRINTABLE_DIGITS = 4300


class UntrustedJSONError(ValueError):
    """JSON text that cannot be taken as a decision; the message says why, for a form field."""


# -- normal form of output --------------------------------------------------------------------------


def clean_text(text: str) -> str:
    """``text`` with NUL and lone surrogates replaced by U+FFFD (surrogate pairs are joined)."""
    if text.isascii():
        return text.replace("\x00", REPLACEMENT) if "\x00" in text else text
    if _UNSTORABLE.search(text) is None:
        return text
    if any("\ud800" <= c <= "\udfff" for c in text):
        # UTF-16 round trip: a pair becomes its character, a lone half the replacement character.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\x00", REPLACEMENT)


#: Characters with no glyph that are not Unicode "format" characters (category Cf) but still
#: render as nothing: Hangul fillers, the Mongolian vowel separator, the braille blank.
_ALSO_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u180e\u2800")


def _hidden(char: str) -> bool:
    return unicodedata.category(char) == "Cf" or char in _ALSO_INVISIBLE


def _mark(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"⟦U+{ord(char):04X}{' ' + name if name else ''}⟧"


def reveal_invisible(text: object) -> str:
    """``text`` (None: empty) with each bidi control, zero-width or other invisible character shown
    as a mark that names it. The marks hold no HTML: text already escaped stays escaped."""
    text = "" if text is None else str(text)
    if text.isascii():
        return text
    return "".join(_mark(c) if _hidden(c) else c for c in text)


def _int_text(value: int) -> str:
    sign = "-" if value < 0 else ""
    try:
        return str(value)
    except ValueError:  # more digits than Python prints
        digits = int(abs(value).bit_length() * math.log10(2)) + 1
        if abs(value) < 10 ** (digits - 1):
            digits -= 1
        return f"<{'negative ' if sign else ''}integer of {digits} digits>"


def _clean(value: Any, depth: int, max_depth: int, notes: list[str]) -> Any:
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    # The common case first, by exact type (a snapshot has thousands of values; every one comes here).
    if (
        (kind is str and value.isascii() and "\x00" not in value)
        or (kind is int and -_INT_LIMIT < value < _INT_LIMIT)
        or (kind is float and math.isfinite(value))
    ):
        return value
    if isinstance(value, dict | list | tuple):
        if depth >= max_depth:
            notes.append(f"nesting deeper than {max_depth} levels")
            return TOO_DEEP
        if isinstance(value, dict):
            return _clean_object(value, depth, max_depth, notes)
        items = [_clean(item, depth + 1, max_depth, notes) for item in value]
        if isinstance(value, list) and all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items
    return _clean_scalar(value, notes)


def _clean_scalar(value: Any, notes: list[str]) -> Any:
    if isinstance(value, str):
        cleaned = clean_text(value)
        if cleaned is not value:
            notes.append("NUL or lone surrogates in text")
        return cleaned
    if isinstance(value, int):
        if -_INT_LIMIT < value < _INT_LIMIT:
            return value
        notes.append("an integer too long to keep as a number")
        return _int_text(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        notes.append("a non-finite number")
        return _NON_FINITE[repr(value)]
    notes.append(f"a {type(value).__name__}, which is not JSON")
    return clean_text(str(value))


def _clean_object(value: dict[Any, Any], depth: int, max_depth: int, notes: list[str]) -> dict[str, Any]:
    changed = False
    out: dict[str, Any] = {}
    for key, item in value.items():
        if type(key) is str and key.isascii() and "\x00" not in key:
            new_key = key
        else:
            new_key = clean_text(key) if isinstance(key, str) else clean_text(str(key))
        new_item = _clean(item, depth + 1, max_depth, notes)
        changed = changed or new_key is not key or new_item is not item
        out[new_key] = new_item
    return out if changed or len(out) != len(value) else value


def to_jsonable(value: Any) -> Any:
    """A tool's or a model's value as plain JSON data, the first step of the normal form (``clean_json``
    is the next): pydantic models are dumped, the rest goes through pydantic."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    return _ANY.dump_python(value, mode="json")


#: Built once: a TypeAdapter builds its serializer when made, which cost more than the dump itself.
_ANY: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)


def clean_json(
    value: Any, *, max_depth: int = MAX_DEPTH, what: str = "", notes: list[str] | None = None
) -> Any:
    """``value`` (JSON data) in the normal form; the very object when it already was.

    ``what`` names the value in the warning logged when something changed (none when empty and
    ``notes`` is given: the caller collects the notes).
    """
    found: list[str] = [] if notes is None else notes
    before = len(found)
    cleaned = _clean(value, 0, max_depth, found)
    if len(found) > before and what:
        logger.warning("Normalised %s: %s", what, ", ".join(sorted(set(found[before:]))))
    return cleaned


def _lenient_int(text: str) -> int | str:
    digits = len(text.lstrip("-"))
    if digits <= MAX_INT_DIGITS:
        return int(text)
    if digits <= _PRINTABLE_DIGITS:
        return text
    return f"<{'negative ' if text[0] == '-' else ''}integer of {digits} digits>"


def parse_model_json(text: str) -> Any:
    """JSON text a model wrote (tool arguments), in the normal form; ``ValueError`` if it is not JSON.

    More lenient than pydantic's parser, which refuses lone surrogate escapes, integers of more than
    4,300 digits and nesting past 200 levels: such arguments are kept, normalised, rather than sent
    back to the model as invalid.
    """
    try:
        value = json.loads(text, parse_int=_lenient_int)
    except RecursionError:
        raise ValueError("nested too deeply to parse") from None
    return clean_json(value)


def clean_id(raw: str) -> str:
    """A tool call id in its normal form (see the module's documentation)."""
    text = raw if isinstance(raw, str) else str(raw)
    if text and len(text) <= MAX_ID_LENGTH and text.isprintable():
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    start = "".join(c if c.isprintable() else "_" for c in text[:_ID_START])
    return f"{start}~{digest}"


def clean_call(call: ParkedCall) -> ParkedCall:
    """A parked call with its id, arguments, payload and schemas in the normal form."""
    delegation = call.delegation
    if delegation is not None:
        delegation = replace(delegation, tool_call_id=clean_id(delegation.tool_call_id))
    notes: list[str] = []
    cleaned = replace(
        call,
        tool_call_id=clean_id(call.tool_call_id),
        tool_name=clean_text(call.tool_name),
        args=clean_json(call.args, notes=notes),
        suspend_payload=clean_json(call.suspend_payload, notes=notes),
        # Schemas nest deeper than data; tool() checked them (a Tool built past it may not be).
        suspend_schema=clean_json(call.suspend_schema, max_depth=2 * MAX_DEPTH, notes=notes),
        resume_schema=clean_json(call.resume_schema, max_depth=2 * MAX_DEPTH, notes=notes),
        context=clean_json(call.context, notes=notes),
        delegation=delegation,
    )
    if cleaned.tool_call_id != call.tool_call_id:
        notes.append("a tool call id that is too long or not printable")
    if notes:
        logger.warning(
            "Normalised the parked call %r (%s): %s",
            cleaned.tool_call_id,
            call.tool_name,
            ", ".join(sorted(set(notes))),
        )
    return cleaned


# -- decisions: refused, never altered --------------------------------------------------------------


def _problem(loc: tuple[Any, ...], msg: str) -> dict[str, Any]:
    return {"loc": loc, "msg": msg}


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (U+0000), which cannot be stored"
    if not text.isascii() and any("\ud800" <= c <= "\udfff" for c in text):
        return "contains a lone surrogate (U+D800-U+DFFF), which is not valid Unicode text"
    return None


class _TooLarge(Exception):
    """The data walked so far already takes more JSON than the limit: the rest is not looked at."""


def _spend(left: list[float], size: int) -> None:
    """Count ``size`` more bytes of JSON against ``left`` (the bytes the data may still take, counted
    from below: never more than ``json.dumps`` writes); ``_TooLarge`` once they are spent."""
    left[0] -= size
    if left[0] < 0:
        raise _TooLarge


def _walk(
    value: Any,
    loc: tuple[Any, ...],
    depth: int,
    max_depth: int,
    found: list[dict[str, Any]],
    only_json: bool,
    left: list[float],
) -> None:
    # At least: a text its length and quotes, a key its length, quotes and colon, any other value a
    # byte, a container its brackets and commas (``_spend``).
    if len(found) >= 10:
        return
    _spend(left, 1)  # (its first byte: a number's digit, a text's quote, a bracket)
    if value is None or value is True or value is False:
        return
    if not isinstance(value, dict | list | tuple):
        _walk_scalar(value, loc, found, only_json, left)
        return
    if depth >= max_depth:
        found.append(_problem(loc, f"This is nested too deeply (at most {max_depth} levels)."))
        return
    _spend(left, max(len(value), 1))  # (its commas and closing bracket)
    if not isinstance(value, dict):
        for index, item in enumerate(value):
            _walk(item, (*loc, index), depth + 1, max_depth, found, only_json, left)
        return
    for key, item in value.items():
        if not isinstance(key, str):
            found.append(_problem(loc, f"Object keys must be text, not {type(key).__name__}."))
            continue
        _spend(left, len(key) + 3)
        problem = _text_problem(key)
        if problem:
            found.append(_problem(loc, f"The key {key!r} {problem}."))
        _walk(item, (*loc, key), depth + 1, max_depth, found, only_json, left)


def _walk_scalar(
    value: Any, loc: tuple[Any, ...], found: list[dict[str, Any]], only_json: bool, left: list[float]
) -> None:
    if isinstance(value, str):
        _spend(left, len(value) + 1)
    problem = _scalar_problem(value, only_json)
    if problem:
        found.append(_problem(loc, problem))


def _scalar_problem(value: Any, only_json: bool) -> str | None:
    if isinstance(value, str):
        problem = _text_problem(value)
        return f"This text {problem}." if problem else None
    if isinstance(value, int):
        limited = -_INT_LIMIT < value < _INT_LIMIT
        return None if limited else f"Integers may have at most {MAX_INT_DIGITS} digits."
    if isinstance(value, float):
        finite = math.isfinite(value)
        return None if finite else "NaN and infinite numbers are not JSON and cannot be stored."
    return f"A {type(value).__name__} is not JSON." if only_json else None


def problems(
    value: Any,
    *,
    max_depth: int = MAX_DEPTH,
    max_bytes: int | None = MAX_DECISION_BYTES,
    only_json: bool = True,
) -> list[dict[str, Any]]:
    """Why ``value`` cannot be taken as a decision's data: ``[{"loc": (...), "msg": ...}]`` (at most 10).

    Empty when it is JSON within the limits of the module's documentation. With ``only_json=False``
    other objects (a pydantic model a caller passes, to be validated) are let through, unmeasured (a
    byte each); the JSON around them is measured, and refused once it alone is over ``max_bytes``.
    """
    found: list[dict[str, Any]] = []
    try:
        # (With ``max_bytes`` the walk stops once the data is known to be larger: the work is bounded by
        # the limit, not by what was posted.)
        _walk(value, (), 0, max_depth, found, only_json, [max_bytes if max_bytes is not None else math.inf])
    except _TooLarge:
        assert max_bytes is not None
        return [
            _problem(
                (), f"This is too large (over {max_bytes // 1024} KiB; at most {max_bytes // 1024} KiB)."
            )
        ]
    if not found and max_bytes is not None and only_json:
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
        if size > max_bytes:
            found.append(
                _problem((), f"This is too large ({-(-size // 1024)} KiB; at most {max_bytes // 1024} KiB).")
            )
    return found


def text_problem(text: str) -> str | None:
    """Why ``text`` (a reason, an id) cannot be stored, or None."""
    problem = _text_problem(text)
    return f"It {problem}." if problem else None


def reason_problem(reason: str) -> str | None:
    """Why a decline's ``reason`` is refused (too long, or text that cannot be stored), or None."""
    if len(reason) > MAX_REASON_LENGTH:
        return f"It is {len(reason):,} characters long; a reason may have at most {MAX_REASON_LENGTH:,}."
    return text_problem(reason)


def check_decision(
    action: str, *, reason: str | None = None, resume_data: Any = None, edited_args: Any = None
) -> None:
    """Refuse (``InvalidToolArgs`` / ``InvalidResumeData``) a decision whose data cannot be stored.

    Checked before the data is validated (deep or odd data must not reach a validator); objects that
    are not JSON are left to the validation, whose JSON result ``checked_json`` checks again.
    """
    if edited_args is not None:
        found = problems(edited_args, only_json=False)
        if found:
            raise InvalidToolArgs(f"Edited arguments cannot be taken: {describe(found)}", errors=found)
    if action == DecisionAction.RESUME:
        found = problems(resume_data, only_json=False)
        if found:
            raise InvalidResumeData(f"Invalid resume data: {describe(found)}", errors=found)
    if isinstance(reason, str):
        problem = reason_problem(reason)
        if problem:
            raise InvalidResumeData(f"Invalid reason: {problem}", errors=[_problem(("reason",), problem)])


def checked_json(value: Any, jsonable: Callable[[Any], Any], what: str) -> Any:
    """``jsonable(value)`` (validated decision data as it will be stored), refused if it cannot be."""
    try:
        stored = jsonable(value)
    except Exception as exc:
        message = f"Invalid {what}: it cannot be stored as JSON ({type(exc).__name__})"
        raise InvalidResumeData(message, errors=[_problem((), message)]) from None
    found = problems(stored)
    if found:
        raise InvalidResumeData(f"Invalid {what}: {describe(found)}", errors=found)
    return stored


def _refuse_constant(name: str) -> Any:
    raise UntrustedJSONError(f"{name} is not a JSON number")


def finite_float(text: str) -> float:
    """``json.loads``'s ``parse_float`` for decisions: ``1e999`` would be infinity; refused."""
    number = float(text)
    if not math.isfinite(number):
        raise UntrustedJSONError(f"the number {text[:40]} is out of range")
    return number


def parse_json(text: str, *, max_bytes: int | None = MAX_DECISION_BYTES) -> Any:
    """JSON text a person posted, as data within the decision limits; ``UntrustedJSONError`` if not.

    Refuses what ``json.loads`` takes but is not JSON or cannot be stored (``NaN``, ``Infinity``,
    ``1e999``), what it fails on without a ``JSONDecodeError`` (integers of more than 4,300 digits,
    nesting that exhausts the recursion limit), and everything ``problems`` lists.
    """
    if max_bytes is not None and len(text) > max_bytes and len(text.encode()) > max_bytes:
        size = len(text.encode())
        raise UntrustedJSONError(
            f"This is too large ({-(-size // 1024)} KiB; at most {max_bytes // 1024} KiB)."
        )
    constant: Callable[[str], Any] = _refuse_constant
    try:
        value = json.loads(text, parse_constant=constant, parse_float=finite_float)
    except RecursionError:
        raise UntrustedJSONError(f"This is nested too deeply (at most {MAX_DEPTH} levels).") from None
    except json.JSONDecodeError as exc:
        raise UntrustedJSONError(
            f"This is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
        ) from None
    except UntrustedJSONError as exc:
        raise UntrustedJSONError(f"This is not valid JSON: {exc}.") from None
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        if "digits" in str(exc):
            raise UntrustedJSONError(f"Integers may have at most {MAX_INT_DIGITS} digits.") from None
        raise UntrustedJSONError(f"This is not valid JSON: {exc}.") from None
    found = problems(value, max_bytes=max_bytes)
    if found:
        raise UntrustedJSONError(describe(found))
    return value


def describe(found: list[dict[str, Any]]) -> str:
    """The problems as one sentence each, with where they are (``steps[0].owner: ...``)."""
    lines = []
    for problem in found:
        where = _path(tuple(problem.get("loc") or ()))
        lines.append(f"{where}: {problem['msg']}" if where else str(problem["msg"]))
    return " ".join(lines)


def _path(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return clean_text(text)
