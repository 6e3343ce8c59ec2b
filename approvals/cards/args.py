"""A call's arguments as a reviewer reads them: by type, from the tool's parameters schema and hints.

Money reads as money (``$890.00``, from the tool's ``Money`` hint or its schema's ``x-money``),
numbers with separators, multi-line text as text (the template keeps its line breaks), URLs as
text with their host shown apart (never a link: a reviewer should not navigate to what a model
wrote), enum values and values the tool marks risky as chips. Everything here is model output: the
template escapes it; invisible characters are shown as marks (``agents_runtime.untrusted.reveal_invisible``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from agents_runtime import Tool
from agents_runtime.presentation import Money, humanise
from agents_runtime.untrusted import reveal_invisible

#: Characters of one value shown before it is cut (the JSON view one click away has it all).
VALUE_CHARS = 2_000


@dataclass(frozen=True)
class ArgView:
    """One argument: its label and its value as text, and how the template shows it."""

    name: str
    label: str
    #: ``money``, ``number``, ``bool``, ``enum``, ``url``, ``multiline``, ``text``, ``json``, ``empty``.
    kind: str
    text: str
    #: A URL's host, shown apart so a look-alike address is seen for what it is.
    host: str = ""
    #: A value the tool marks risky (e.g. ``environment: production``): a chip that stands out.
    risky: bool = False

    @property
    def is_chip(self) -> bool:
        return self.kind in ("enum", "bool") or self.risky


def _shown(text: str) -> str:
    text = text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"
    return reveal_invisible(text)


def _url_host(text: str) -> str:
    if "\n" in text or " " in text.strip():
        return ""
    try:
        parts = urlsplit(text.strip())
    except ValueError:
        return ""
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return ""
    # The IDNA form shows a look-alike host (a Cyrillic letter among Latin ones) for what it is.
    try:
        return parts.hostname.encode("idna").decode("ascii")
    except UnicodeError:
        return parts.hostname


def _number(value: int | float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.10g}" if abs(value) < 1e16 else repr(value)


def arg_view(
    name: str,
    value: Any,
    *,
    schema: Mapping[str, Any] | None = None,
    hint: Any = None,
    risky_values: tuple[Any, ...] = (),
    json_text: Any = None,
) -> ArgView:
    """One argument by type; ``json_text(value)`` writes nested values (the card's JSON writer)."""
    schema = schema or {}
    title = schema.get("title")
    # pydantic's own title ("Amount Cents") reads as the name does elsewhere ("Amount cents").
    label = str(title) if title and title != name.replace("_", " ").title() else humanise(name)
    risky = bool(risky_values) and _is_in(value, risky_values)
    if value is None:
        return ArgView(name, label, "empty", "—", risky=risky)
    if isinstance(hint, Money):
        money = hint.format(value)
        if money is not None:
            return ArgView(name, label, "money", money, risky=risky)
    if isinstance(value, bool):
        return ArgView(name, label, "bool", "yes" if value else "no", risky=risky)
    if isinstance(value, int | float):
        kind = "enum" if "enum" in schema else "number"
        return ArgView(name, label, kind, _number(value), risky=risky)
    if isinstance(value, str):
        if "enum" in schema or "const" in schema:
            return ArgView(name, label, "enum", _shown(value), risky=risky)
        host = _url_host(value)
        if host:
            return ArgView(
                name, label, "url", _shown(value.strip()), host=reveal_invisible(host), risky=risky
            )
        kind = "multiline" if "\n" in value or "\r" in value else "text"
        return ArgView(name, label, kind, _shown(value), risky=risky)
    text = json_text(value) if json_text is not None else str(value)
    return ArgView(name, label, "json", _shown(text), risky=risky)


def _is_in(value: Any, values: tuple[Any, ...]) -> bool:
    try:
        # ``True == 1``: a boolean is risky only as a boolean.
        return any(value == v and type(value) is type(v) for v in values)
    except Exception:
        return False


def _properties(schema: Mapping[str, Any] | None) -> Mapping[str, Any]:
    props = (schema or {}).get("properties")
    return props if isinstance(props, Mapping) else {}


def _resolved(prop: Any, root: Mapping[str, Any]) -> Mapping[str, Any]:
    """A property's schema with a local ``$ref`` followed once (pydantic puts enums under ``$defs``)."""
    if not isinstance(prop, Mapping):
        return {}
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = (root.get("$defs") or {}).get(ref.rsplit("/", 1)[-1])
        if isinstance(target, Mapping):
            return {**target, **{k: v for k, v in prop.items() if k != "$ref"}}
    return prop


def arg_views(
    args: Any, tool: Tool | None, *, json_text: Any = None, risky_only: bool = False
) -> list[ArgView]:
    """Every top-level argument, in the order the tool declares its parameters (then any others);
    ``risky_only``: those holding a value the tool marks risky (a folded row's chips)."""
    if not isinstance(args, Mapping):
        return []
    risky = tool.risky if tool is not None else {}
    if risky_only and not any(name in args for name in risky):
        return []
    schema = tool.parameters_json_schema if tool is not None else {}
    props = _properties(schema)
    money = tool.money if tool is not None else {}
    order = [n for n in props if n in args] + [n for n in args if n not in props]
    if risky_only:
        order = [n for n in order if _is_in(args[n], tuple(risky.get(n, ())))]
    return [
        arg_view(
            str(name),
            args[name],
            schema=_resolved(props.get(name), schema),
            hint=money.get(name),
            risky_values=tuple(risky.get(name, ())),
            json_text=json_text,
        )
        for name in order
    ]


def values_view(values: Mapping[str, Any], tool: Tool | None, *, json_text: Any = None) -> list[ArgView]:
    """Fields of a result or an answer (key results, an earlier answer), shown as arguments are."""
    money = tool.money if tool is not None else {}
    return [
        arg_view(str(name), value, hint=money.get(name), json_text=json_text)
        for name, value in values.items()
    ]
