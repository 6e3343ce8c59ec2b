"""A gateway tool's effect preview, written in its configuration and filled in from each call's arguments.

```toml
[upstreams.notes.tools.delete_note]
preview = { sentence = "Deletes the note ${title}", items = ["${title}"] }
# changes = [{ label = "Title", before = "", after = "${title}" }]    diff = "..."
```

A placeholder is ``${name}``, or ``${name.key}`` into a nested object (``${paths.0}``: a list's
item); ``$$`` is a dollar sign, and any other ``$`` is itself. Filling one in only looks keys up in the
call's arguments (JSON data): no attribute, method or format spec is ever reached (``str.format``
would: ``{0.__class__}``), so a placeholder can show a value and nothing else. A value that is not
text is shown as JSON; a placeholder naming an argument the call lacks shows ``⟨name missing⟩``; an
item that is a single placeholder naming a list is one item per element. The filled-in preview is cut
and cleaned as any external agent's (``agents_runtime.previews``) before it goes with the request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents_runtime.previews import MAX_CHANGES, MAX_ITEMS, Preview

#: ``$$`` or ``${...}`` (what is between the braces is checked by ``_PATH``).
_PLACEHOLDER = re.compile(r"\$(?:(\$)|\{([^{}]*)\})")
#: An argument's name, then keys or list indexes; no segment may be a dunder name (not that one
#: could reach anything: the look-up is a dictionary's, but such a name is a mistake or a probe).
_SEGMENT = r"(?!__)[A-Za-z0-9_-]{1,64}"
_PATH = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT}){{0,7}}")
_KEYS = ("sentence", "changes", "diff", "items")
_CHANGE_KEYS = {"label", "before", "after"}


class InvalidPreview(ValueError):
    """The preview's configuration cannot be used; the message says which part and why."""


def _check_text(where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidPreview(f"{where}: text")
    for match in _PLACEHOLDER.finditer(value):
        path = match.group(2)
        if path is not None and not _PATH.fullmatch(path):
            raise InvalidPreview(
                f"{where}: ${{{path}}} is not a placeholder: ${{name}} or ${{name.key}}, an argument's "
                "name and keys (letters, digits, '_' or '-'; not a __dunder__)"
            )
    if "${" in _PLACEHOLDER.sub("", value):
        raise InvalidPreview(f"{where}: a '${{' without its '}}' (write $$ for a dollar sign)")
    return value


@dataclass(frozen=True)
class PreviewTemplate:
    """A preview whose texts hold placeholders (``render`` fills them in from a call's arguments)."""

    sentence: str = ""
    changes: tuple[tuple[str, str, str], ...] = ()
    diff: str = ""
    items: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: Any) -> PreviewTemplate:
        """The template of a ``preview`` table; ``InvalidPreview`` says what is wrong."""
        if not isinstance(spec, Mapping):
            raise InvalidPreview("a table of sentence, changes, diff, items")
        unknown = sorted(set(spec) - set(_KEYS))
        if unknown:
            raise InvalidPreview(f"unknown keys {', '.join(unknown)} (sentence, changes, diff, items)")
        changes, items = spec.get("changes", []), spec.get("items", [])
        if not isinstance(changes, list) or len(changes) > MAX_CHANGES:
            raise InvalidPreview(f"changes: a list of at most {MAX_CHANGES} tables of label, before, after")
        if not isinstance(items, list) or len(items) > MAX_ITEMS:
            raise InvalidPreview(f"items: a list of at most {MAX_ITEMS} texts")
        for i, change in enumerate(changes):
            if not isinstance(change, Mapping) or set(change) != _CHANGE_KEYS:
                raise InvalidPreview(f"changes[{i}]: a table of label, before, after")
        template = cls(
            sentence=_check_text("sentence", spec.get("sentence", "")),
            changes=tuple(
                (
                    _check_text(f"changes[{i}] label", c["label"]),
                    _check_text(f"changes[{i}] before", c["before"]),
                    _check_text(f"changes[{i}] after", c["after"]),
                )
                for i, c in enumerate(changes)
            ),
            diff=_check_text("diff", spec.get("diff", "")),
            items=tuple(_check_text(f"items[{i}]", item) for i, item in enumerate(items)),
        )
        if not (template.sentence or template.changes or template.diff or template.items):
            raise InvalidPreview("empty: give a sentence, changes, a diff or items")
        return template

    def render(self, args: Mapping[str, Any]) -> dict[str, Any] | None:
        """The call's preview (its JSON form, as an external agent sends one), cut to the previews'
        bounds; None when every part came out empty."""
        items: list[str] = []
        for item in self.items:
            whole = _PLACEHOLDER.fullmatch(item)
            value = _lookup(args, whole.group(2)) if whole is not None and whole.group(2) else None
            if isinstance(value, list):
                items += [_shown(v) for v in value]
            elif item:
                items.append(fill(item, args))
        preview = Preview.from_json(
            {
                "sentence": fill(self.sentence, args),
                "changes": [
                    {"label": fill(label, args), "before": fill(before, args), "after": fill(after, args)}
                    for label, before, after in self.changes
                ],
                "diff": fill(self.diff, args),
                "items": [item for item in items if item],
            }
        )
        if preview is None:
            return None
        data = preview.to_json()
        return {key: data[key] for key in _KEYS if data[key]}


_MISSING = object()


def _lookup(args: Mapping[str, Any], path: str) -> Any:
    """The value at ``path`` in the arguments (dictionary keys and list indexes only), else ``_MISSING``."""
    value: Any = args
    for key in path.split("."):
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return _MISSING
    return value


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def fill(text: str, args: Mapping[str, Any]) -> str:
    """``text`` with its placeholders filled in from ``args`` (see the module's docstring)."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return "$"
        path = match.group(2)
        value = _lookup(args, path) if _PATH.fullmatch(path) else _MISSING
        return f"⟨{path} missing⟩" if value is _MISSING else _shown(value)

    return _PLACEHOLDER.sub(one, text)
