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
- has each ``default`` of the ``type`` it sits next to, and one of its ``enum`` / its ``const``;
- has only ``pattern`` / ``patternProperties`` regular expressions RE2 takes (no backreferences or
  lookarounds), and no ``patternProperties`` where ``unevaluatedProperties`` would read it.

**Validating** data against a schema (``validation_errors``; the schema and the data may both come from
someone else: an external agent brings both) is bounded: regular expressions run on RE2, which takes
linear time (Python's ``re`` backtracks: ``^(a+)+$`` on thirty characters runs for minutes);
``enum`` and ``uniqueItems`` compare by hashing (jsonschema compares every pair); and a validation
takes at most ``MAX_VALIDATION_STEPS`` steps (a keyword applied to a value), so neither a schema
whose ``$ref``s fan out (two refs to a definition that makes two refs ... : 2^30 checks in 2 KB) nor
a big schema over big data runs for long: past its budget it is refused (``TooCostlyToCheck``).
At most ``max_errors`` problems are collected.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast
from urllib.parse import unquote

import jsonschema
import re2
from jsonschema._utils import equal, uniq
from jsonschema.exceptions import ValidationError

from .untrusted import MAX_DEPTH, describe, problems

#: Schemas nest deeper than data (a property is ``properties`` then the property's schema).
MAX_SCHEMA_DEPTH = 2 * MAX_DEPTH
MAX_SCHEMA_BYTES = 256 * 1024
#: Most steps one validation takes (a step: a keyword applied to one value, or one item or key a
#: keyword reads): about a second of the slowest steps, far more than any real schema and data need.
MAX_VALIDATION_STEPS = 100_000
#: Most problems one validation reports.
MAX_ERRORS = 10

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
    found = _ref_problems(schema) or _pattern_problems(schema)
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


# -- patterns: RE2 (linear time), never a backtracking engine -----------------------------------------


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False
    return options


_RE2_OPTIONS = _re2_options()


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2; ``re2.error`` when RE2 does not take it."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _regex_problem(pattern: Any) -> str | None:
    if not isinstance(pattern, str):
        return None  # the metaschema says why
    try:
        _regex(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        return (
            f"{pattern!r} is not a regular expression this desk runs ({reason}): backreferences, "
            "lookarounds and repetitions over 1000 are not supported"
        )
    return None


def _pattern_problems(root: Mapping[str, Any]) -> list[str]:
    unevaluated = False
    pattern_properties: Pointer | None = None
    for at, node in _subschemas(root, ()):
        problem = _regex_problem(node.get("pattern")) if "pattern" in node else None
        if problem:
            return [f"{_where((*at, 'pattern'))}: {problem}"]
        if isinstance(node.get("patternProperties"), Mapping):
            pattern_properties = pattern_properties or (*at, "patternProperties")
            for name in node["patternProperties"]:
                problem = _regex_problem(name)
                if problem:
                    return [f"{_where((*at, 'patternProperties'))}: {problem}"]
        unevaluated = unevaluated or "unevaluatedProperties" in node
    if unevaluated and pattern_properties is not None:
        return [
            f"{_where(pattern_properties)}: patternProperties cannot be used with unevaluatedProperties "
            "(list the properties, or use additionalProperties)"
        ]
    return []


def _search(pattern: str, text: str) -> bool:
    try:
        return _regex(pattern).search(text) is not None
    except re2.error:
        raise ValueError(f"{pattern!r} is not a regular expression this desk runs") from None


# -- validation, bounded ----------------------------------------------------------------------------


class TooCostlyToCheck(ValueError):
    """A validation over its budget of steps (``MAX_VALIDATION_STEPS``)."""


_steps: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("schema_steps", default=None)


def _spend(steps: int) -> None:
    left = _steps.get()
    if left is None:
        return
    left[0] -= steps
    if left[0] < 0:
        raise TooCostlyToCheck(f"checking it takes more than {MAX_VALIDATION_STEPS:,} steps")


def _key(value: Any) -> Any:
    """A hashable key equal for values JSON Schema calls equal (``true`` is not ``1``; ``1`` is ``1.0``)."""
    if value is True or value is False:
        return ("b", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, Mapping):
        return ("o", frozenset((k, _key(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("a", tuple(_key(v) for v in value))
    if value is None:
        return ("z",)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _size(value: Any) -> int:
    """How many values ``value`` holds (itself included): what hashing it costs."""
    if isinstance(value, Mapping):
        return 1 + sum(_size(v) for v in value.values())
    if isinstance(value, list | tuple):
        return 1 + sum(_size(v) for v in value)
    return 1


def _short(values: Any) -> str:
    text = repr(values)
    return text if len(text) <= 200 else f"{text[:200]}… ({len(values)} values)"


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string"):
        _spend(1 + len(instance) // 64)
        if not _search(patrn, instance):
            yield ValidationError(f"{_short(instance)} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for k, v in instance.items():
            _spend(1)
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    for name in instance:
        _spend(1 + len(patterns))
        if name not in properties and not any(_search(p, name) for p in patterns):
            yield name


def _additional_properties(validator: Any, aP: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = set(_additional(instance, schema))
    if validator.is_type(aP, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], aP, path=extra)
    elif not aP and extras:
        shown = ", ".join(repr(each) for each in sorted(extras)[:20]) + (", …" if len(extras) > 20 else "")
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{shown} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({shown} {verb} unexpected)")


#: Each enum's keys, by the list's identity (the list is kept in the entry, so its id is not reused).
_ENUM_KEYS: dict[int, tuple[Any, frozenset[Any] | None]] = {}


def _enum_keys(enums: Any) -> frozenset[Any] | None:
    entry = _ENUM_KEYS.get(id(enums))
    if entry is not None and entry[0] is enums:
        return entry[1]
    _spend(_size(enums))
    try:
        keys: frozenset[Any] | None = frozenset(_key(v) for v in enums)
    except TypeError:
        keys = None
    if len(_ENUM_KEYS) >= 256:
        _ENUM_KEYS.clear()
    _ENUM_KEYS[id(enums)] = (enums, keys)
    return keys


def _enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    keys = _enum_keys(enums) if isinstance(enums, list) else None
    _spend(_size(instance) if keys is not None else _size(instance) * max(len(enums), 1))
    try:
        found = _key(instance) in keys if keys is not None else None
    except TypeError:
        found = None
    if found is None:
        found = any(equal(each, instance) for each in enums)
    if not found:
        yield ValidationError(f"{_short(instance)} is not one of {_short(enums)}")


def _unique_items(validator: Any, uI: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not (uI and validator.is_type(instance, "array")):
        return
    _spend(_size(instance))
    try:
        unique = len({_key(item) for item in instance}) == len(instance)
    except TypeError:
        unique = uniq(instance)
    if not unique:
        yield ValidationError(f"{_short(instance)} has non-unique elements")


_OWN: dict[str, Callable[..., Iterable[ValidationError]]] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "enum": _enum,
    "uniqueItems": _unique_items,
}


def _counted(check: Callable[..., Any]) -> Callable[..., Any]:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _spend(1)
        return check(validator, value, instance, schema)

    return counted


@functools.cache
def _bounded(validator: type[Any]) -> type[Any]:
    """``validator`` (a draft's class) with the keywords above, and every keyword counting its step."""
    keywords = {name: _counted(_OWN.get(name, check)) for name, check in validator.VALIDATORS.items()}
    return cast(type[Any], jsonschema.validators.extend(validator, keywords))  # type: ignore[no-untyped-call]


def validator_class(schema: Mapping[str, Any]) -> type[Any]:
    """The bounded validator class of ``schema``'s draft (2020-12 when it names none)."""
    found = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return _bounded(found)


def validation_errors(
    schema: Mapping[str, Any], data: Any, *, max_errors: int = MAX_ERRORS
) -> list[ValidationError]:
    """The first ``max_errors`` ways ``data`` breaks ``schema``, ordered by where they are.

    ``TooCostlyToCheck`` past ``MAX_VALIDATION_STEPS``; jsonschema's own errors (``SchemaError``,
    ``RecursionError``, ``LookupError`` ...) as they are, for the caller to say the schema cannot check.
    """
    validator = validator_class(schema)(dict(schema))
    token = _steps.set([MAX_VALIDATION_STEPS])
    try:
        found = list(itertools.islice(validator.iter_errors(data), max_errors))
    finally:
        _steps.reset(token)
    return sorted(found, key=lambda e: [(isinstance(p, str), p) for p in e.absolute_path])
