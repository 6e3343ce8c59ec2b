"""Checks of the JSON Schema dicts tool authors give (``suspend_schema`` / ``resume_schema``).

A schema is checked when its tool is defined (``tool()`` raises naming the field), and the dashboard
checks a stored one again before it builds a form from it (an older version may have stored it). A
usable schema:

- is an object that can be stored (``untrusted.problems``: no NUL, lone surrogates, NaN or
  infinities, at most ``MAX_SCHEMA_DEPTH`` levels);
- names a known draft in ``$schema``, if any, and passes that draft's metaschema (2020-12 when
  there is none), formats included: ``maxLength: "10"``, ``minimum: "abc"``, an unknown ``type`` or
  an invalid ``pattern`` are refused;
- has only local ``$ref``s (``#`` or ``#/...`` JSON pointers) that point into it, and no ``$ref``
  loop: a chain of ``$ref`` / ``allOf`` / ``anyOf`` / ``oneOf`` / ``not`` / ``if`` ... that comes back
  to where it started without going into a property or an item would make validation recurse
  forever. Recursion through ``properties`` or ``items`` (a tree) is fine;
- has each ``default`` of the ``type`` it sits next to, and one of its ``enum`` / its ``const``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from typing import Any, cast
from urllib.parse import unquote

import jsonschema

from .untrusted import MAX_DEPTH, describe, problems

#: Schemas nest deeper than data (a property is ``properties`` then the property's schema).
MAX_SCHEMA_DEPTH = 2 * MAX_DEPTH
MAX_SCHEMA_BYTES = 256 * 1024

_ONE = (
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
#: Keywords whose subschemas apply to the same value (no step into the data): a loop of these recurses.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
_IN_PLACE_NAMED = ("dependentSchemas",)
_REFS = ("$ref", "$dynamicRef")

Pointer = tuple[str, ...]


def schema_problems(schema: Any) -> list[str]:
    """Why ``schema`` cannot be used as a tool's JSON Schema (one sentence each); empty if it can.

    Remembered per distinct schema (a check is milliseconds, and a resume decision makes one).
    """
    if not isinstance(schema, Mapping):
        return [f"it must be a JSON object (a dict), not {type(schema).__name__}"]
    try:
        key = json.dumps(schema, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return _schema_problems(schema)  # not JSON: says why, uncached
    return list(_remembered(key))


@functools.lru_cache(maxsize=256)
def _remembered(key: str) -> tuple[str, ...]:
    return tuple(_schema_problems(json.loads(key)))


def _schema_problems(schema: Mapping[str, Any]) -> list[str]:
    stored = problems(schema, max_depth=MAX_SCHEMA_DEPTH, max_bytes=MAX_SCHEMA_BYTES)
    if stored:
        return [describe(stored)]
    schema = dict(schema)
    declared = schema.get("$schema")
    if declared is not None and not isinstance(declared, str):
        return ["$schema must be the URI of a JSON Schema draft"]
    validator = jsonschema.validators.validator_for(schema, default=cast(Any, None))
    if validator is None:
        if declared is not None:
            return [f"$schema {declared!r} is not a JSON Schema draft this runtime knows"]
        validator = jsonschema.Draft202012Validator
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = _where(tuple(str(p) for p in exc.absolute_path))
        return [f"{where}: {exc.message}" if where else exc.message]
    found = _ref_problems(schema)
    if found:
        return found
    return _default_problems(schema, validator)


def _where(pointer: Pointer) -> str:
    return ".".join(pointer)


def _subschemas(schema: Any, at: Pointer) -> Iterator[tuple[Pointer, Mapping[str, Any]]]:
    """Every subschema that is an object, with its JSON pointer (the schema itself first)."""
    if not isinstance(schema, Mapping):
        return
    yield at, schema
    for key in _ONE:
        if key in schema:
            yield from _subschemas(schema[key], (*at, key))
    for key in _MANY:
        if isinstance(schema.get(key), list):
            for index, item in enumerate(schema[key]):
                yield from _subschemas(item, (*at, key, str(index)))
    for key in _NAMED:
        if isinstance(schema.get(key), Mapping):
            for name, item in schema[key].items():
                yield from _subschemas(item, (*at, key, name))


def _resolve(root: Mapping[str, Any], ref: str) -> Pointer | None:
    """The pointer a local ``$ref`` names, if it points at an object or boolean schema in ``root``."""
    if ref in ("#", ""):
        return ()
    if not ref.startswith("#/"):
        return None
    parts = tuple(unquote(p).replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/"))
    target: Any = root
    for part in parts:
        if isinstance(target, Mapping) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            return None
    return parts if isinstance(target, Mapping | bool) else None


def _ref_problems(root: Mapping[str, Any]) -> list[str]:
    nodes = dict(_subschemas(root, ()))
    edges: dict[Pointer, list[Pointer]] = {}
    for at, node in nodes.items():
        if at and "$id" in node:
            return [f"{_where((*at, '$id'))}: a nested $id is not supported (refs resolve against the root)"]
        targets: list[Pointer] = []
        for key in _REFS:
            if key not in node:
                continue
            ref = node[key]
            target = _resolve(root, ref) if isinstance(ref, str) else None
            if target is None:
                return [
                    f"{_where((*at, key))}: {ref!r} does not point into this schema "
                    "(only local references such as '#/$defs/Name' are supported)"
                ]
            targets.append(target)
        targets += [(*at, k) for k in _IN_PLACE_ONE if isinstance(node.get(k), Mapping)]
        for key in _IN_PLACE_MANY:
            if isinstance(node.get(key), list):
                targets += [(*at, key, str(i)) for i, s in enumerate(node[key]) if isinstance(s, Mapping)]
        for key in _IN_PLACE_NAMED:
            if isinstance(node.get(key), Mapping):
                targets += [(*at, key, n) for n, s in node[key].items() if isinstance(s, Mapping)]
        edges[at] = targets
    loop = _find_loop(edges)
    if loop is not None:
        chain = " -> ".join("#/" + "/".join(p) if p else "#" for p in loop)
        return [f"$ref loop: {chain} comes back to itself without going into a property or an item"]
    return []


def _find_loop(edges: dict[Pointer, list[Pointer]]) -> list[Pointer] | None:
    """A cycle in the in-place graph, as the pointers along it, or None (iterative DFS)."""
    state: dict[Pointer, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        if state.get(start):
            continue
        path: list[Pointer] = [start]
        stack: list[Iterator[Pointer]] = [iter(edges.get(start, ()))]
        state[start] = 1
        while stack:
            following = next(stack[-1], None)
            if following is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(following) == 1:
                return [*path[path.index(following) :], following]
            if not state.get(following):
                state[following] = 1
                path.append(following)
                stack.append(iter(edges.get(following, ())))
    return None


def _json_equal(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_json_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    return type(left) is type(right) and bool(left == right)


def _default_problems(root: Mapping[str, Any], validator: Any) -> list[str]:
    checker = validator.TYPE_CHECKER
    for at, node in _subschemas(root, ()):
        if "default" not in node:
            continue
        default, where = node["default"], _where((*at, "default"))
        kinds = node.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else []
        if kinds and not any(checker.is_type(default, kind) for kind in kinds):
            return [f"{where}: {default!r} is not of type {' or '.join(map(repr, kinds))}"]
        if isinstance(node.get("enum"), list) and not any(_json_equal(default, v) for v in node["enum"]):
            return [f"{where}: {default!r} is not one of {node['enum']!r}"]
        if "const" in node and not _json_equal(default, node["const"]):
            return [f"{where}: {default!r} is not {node['const']!r}"]
    return []
