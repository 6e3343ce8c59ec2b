"""Effect previews: what a call would do, as its tool says before anyone decides.

A tool may declare ``tool(preview=fn)``: ``fn(args)`` or ``fn(args, ctx)`` (``ctx`` a ``ToolContext``
of the parked call), sync or async, returns a ``Preview`` (or its JSON form, or a sentence). It runs
when the call parks, bounded in time (``tool(preview_timeout=...)``; a sync function runs off the
event loop); an exception or a timeout is recorded as the preview's ``error`` and never keeps the call
from parking or being decided. The preview is stored with the call (its context's ``preview``), shown
wherever the call is, and is part of what a decision is bound to (``policy.fingerprint``).

A preview is the tool's (or an external agent's) output: it is cut to the sizes below, and an
external agent's is refused past them (``preview_problems``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .untrusted import clean_text, text_problem

logger = logging.getLogger("agents_runtime")

MAX_SENTENCE = 500
MAX_CHANGES = 20
MAX_LABEL = 100
MAX_VALUE = 200
MAX_DIFF = 20_000
MAX_ITEMS = 50
MAX_ITEM = 200
MAX_ERROR = 500
#: How long a preview may take by default (seconds).
PREVIEW_TIMEOUT = 5.0

#: ``fn(args)`` or ``fn(args, ctx)``, sync or async: a ``Preview``, its JSON form, or a sentence.
PreviewSpec = Callable[..., Any]

_LIMITS = {"sentence": MAX_SENTENCE, "diff": MAX_DIFF, "error": MAX_ERROR}


def _cut(value: Any, limit: int) -> str:
    text = clean_text(value if isinstance(value, str) else "" if value is None else str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Change:
    """One value the call changes: ``label``, from ``before`` to ``after`` (as text)."""

    label: str
    before: str
    after: str


@dataclass(frozen=True)
class Preview:
    """What a call would do: a sentence, before → after values, a text diff, the items it touches.

    ``error`` says why the tool could not tell (its preview raised or took too long)."""

    sentence: str = ""
    changes: tuple[Change, ...] = ()
    diff: str = ""
    items: tuple[str, ...] = ()
    error: str = ""

    def __bool__(self) -> bool:
        return bool(self.sentence or self.changes or self.diff or self.items or self.error)

    def summary(self) -> str:
        """One line of it (a notification's): the sentence, else the changes, else the items."""
        if self.sentence:
            return self.sentence
        if self.changes:
            return "; ".join(f"{c.label}: {c.before} → {c.after}" for c in self.changes)
        if self.items:
            return f"{len(self.items)} item(s): " + ", ".join(self.items)
        return f"No preview: {self.error}" if self.error else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "sentence": self.sentence or None,
            "changes": [{"label": c.label, "before": c.before, "after": c.after} for c in self.changes],
            "diff": self.diff or None,
            "items": list(self.items),
            "error": self.error or None,
        }

    @classmethod
    def from_json(cls, data: Any) -> Preview | None:
        """Tolerant: what cannot be read is left out, long texts are cut; None when nothing is left."""
        if isinstance(data, Preview):
            return data or None
        if isinstance(data, str):
            data = {"sentence": data}
        if not isinstance(data, Mapping):
            return None
        changes = data.get("changes")
        items = data.get("items")
        preview = cls(
            sentence=_cut(data.get("sentence"), MAX_SENTENCE),
            changes=tuple(
                Change(
                    _cut(c.get("label"), MAX_LABEL),
                    _cut(c.get("before"), MAX_VALUE),
                    _cut(c.get("after"), MAX_VALUE),
                )
                for c in (changes if isinstance(changes, list | tuple) else [])[:MAX_CHANGES]
                if isinstance(c, Mapping)
            ),
            diff=_cut(data.get("diff"), MAX_DIFF),
            items=tuple(
                _cut(i, MAX_ITEM) for i in (items if isinstance(items, list | tuple) else [])[:MAX_ITEMS]
            ),
            error=_cut(data.get("error"), MAX_ERROR),
        )
        return preview or None


def preview_problems(data: Any) -> list[dict[str, Any]]:
    """Why an external agent's ``preview`` cannot be taken (empty: it can); one ``{"loc", "msg"}`` each."""
    found: list[dict[str, Any]] = []

    def text(loc: tuple[Any, ...], value: Any, limit: int) -> None:
        if value is None:
            return
        problem = text_problem(value) if isinstance(value, str) else "It is not text."
        if problem or len(value) > limit:
            found.append({"loc": ("preview", *loc), "msg": problem or f"at most {limit} characters"})

    if not isinstance(data, Mapping):
        return [{"loc": ("preview",), "msg": "an object: sentence, changes, diff, items"}]
    unknown = set(data) - {"sentence", "changes", "diff", "items"}
    if unknown:
        found.append({"loc": ("preview",), "msg": f"unknown fields: {', '.join(sorted(map(str, unknown)))}"})
    text(("sentence",), data.get("sentence"), MAX_SENTENCE)
    text(("diff",), data.get("diff"), MAX_DIFF)
    # (The entries of a list over its limit are not looked at: one problem each, for a list of any
    # length, was as long a walk and as long an answer.)
    listed: dict[str, list[Any]] = {}
    for key, limit in (("changes", MAX_CHANGES), ("items", MAX_ITEMS)):
        value = data.get(key)
        if value is not None and (not isinstance(value, list) or len(value) > limit):
            found.append({"loc": ("preview", key), "msg": f"a list of at most {limit}"})
        listed[key] = value if isinstance(value, list) and len(value) <= limit else []
    for i, entry in enumerate(listed["changes"]):
        if not isinstance(entry, Mapping) or set(entry) != {"label", "before", "after"}:
            found.append({"loc": ("preview", "changes", i), "msg": "an object of label, before, after"})
            continue
        text(("changes", i, "label"), entry["label"], MAX_LABEL)
        for side in ("before", "after"):
            value = entry[side]
            text(("changes", i, side), value if isinstance(value, str) else str(value), MAX_VALUE)
    for i, entry in enumerate(listed["items"]):
        text(("items", i), entry if isinstance(entry, str) else 0, MAX_ITEM)
    return found


def _takes_context(fn: PreviewSpec) -> bool:
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


async def run_preview(
    fn: PreviewSpec, args: dict[str, Any], ctx: Any, *, seconds: float = PREVIEW_TIMEOUT
) -> Preview | None:
    """``fn``'s preview of a call with ``args``; its failure or timeout as the preview's ``error``.
    ``ctx`` is the call's ``tools.ToolContext`` (not imported here: ``tools`` imports this module)."""
    call_args: tuple[Any, ...] = (dict(args), ctx) if _takes_context(fn) else (dict(args),)
    try:
        async with asyncio.timeout(seconds):
            if inspect.iscoroutinefunction(fn):
                made: Any = await fn(*call_args)
            else:
                made = await asyncio.to_thread(fn, *call_args)
                if inspect.isawaitable(made):
                    made = await _awaited(made)
    except TimeoutError:
        logger.info("The preview of %s took longer than %ss", ctx.tool_call_id, seconds)
        return Preview(
            error=f"The preview took longer than {seconds:g}s: what this call would do is unknown."
        )
    except Exception as exc:
        logger.info("The preview of %s failed", ctx.tool_call_id, exc_info=True)
        return Preview(error=_cut(f"The preview failed ({type(exc).__name__}: {exc})", MAX_ERROR))
    if made is None:
        return None
    preview = Preview.from_json(made.to_json() if isinstance(made, Preview) else made)
    if preview is None and not isinstance(made, Preview | Mapping | str):
        return Preview(error=f"The preview returned {type(made).__name__}, not a Preview")
    return preview


async def _awaited(made: Awaitable[Any]) -> Any:
    return await made
