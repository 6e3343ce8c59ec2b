"""A Django form built from a tool's ``resume_schema`` (JSON Schema), validated on the server.

Renders what a reviewer can fill in reliably: strings, numbers, integers, booleans (a checkbox), enums
(a select), with required marks, defaults, descriptions and labels (the property's ``title`` or its
name). Anything else (nested objects, arrays, unions, a schema that is not an object of properties)
gets a JSON textarea, so every schema can still be answered. ``clean()`` builds the resume data and
checks it against the whole schema with ``jsonschema`` before the runtime is ever called.

A page shows many cards asking the same question, so the form class of a schema is built once and
kept (``resume_form_class``, keyed by the schema's JSON); each card's form is an instance of it.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

import jsonschema
from django import forms
from django.forms.fields import InvalidJSONInput, JSONString
from django.forms.widgets import DateTimeBaseInput
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents_runtime import untrusted
from agents_runtime.presentation import Money, money_of
from agents_runtime.schema_check import TooCostlyToCheck, schema_problems, validation_errors

# -- the fields a schema's form is built of, beyond Django's own: enums of any JSON values, JSON a
# reviewer types (parsed as untrusted), dates and times in the browser's own inputs -----------------


class EnumField(forms.TypedChoiceField):
    """A select over JSON values of any type; the posted string maps back to the original value."""

    def __init__(
        self, *, values: list[Any], required: bool, has_default: bool = False, **kwargs: Any
    ) -> None:
        # String enums post their own text; other values (numbers, null, mixed) post their JSON.
        self._plain = all(isinstance(v, str) for v in values)
        self._values = {self._key(v): v for v in values}
        choices = [(key, str(v) if not isinstance(v, str) else v) for key, v in self._values.items()]
        if not required:
            choices = [("", "—"), *choices]
        elif not has_default:
            # No preselected first value: a reviewer who skips the field is told, not guessed for.
            choices = [("", "Choose…"), *choices]
        super().__init__(
            choices=choices, coerce=self._values.__getitem__, empty_value=None, required=required, **kwargs
        )

    def _key(self, value: Any) -> str:
        return value if self._plain else json.dumps(value, sort_keys=True)

    def prepare_value(self, value: Any) -> Any:
        if value is None or value == "":
            return ""
        try:
            key = self._key(value)
            return key if key in self._values else value
        except TypeError:
            return value


class _DateInput(forms.DateInput):
    input_type = "date"


class _DateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"


class _TimeInput(forms.TimeInput):
    input_type = "time"


#: JSON Schema string formats that get the browser's own date / time inputs.
TEMPORAL_INPUTS: dict[str, type[DateTimeBaseInput]] = {
    "date": _DateInput,
    "date-time": _DateTimeInput,
    "time": _TimeInput,
}


class TemporalField(forms.CharField):
    """A JSON Schema ``date``, ``date-time`` or ``time`` string, typed in the browser's own input.

    A ``date-time`` is typed in the viewer's time zone (the current one: the card names it) and
    answered as ISO 8601 with its offset, so the tool never has to guess what "22:00" meant.
    """

    def __init__(self, *, fmt: str, **kwargs: Any) -> None:
        self.fmt = fmt
        super().__init__(widget=TEMPORAL_INPUTS[fmt](), strip=True, empty_value=None, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        # A default or an earlier value written with its offset, as the local input shows it.
        if self.fmt == "date-time" and isinstance(value, str):
            moment = _parse_datetime(value)
            if moment is not None and timezone.is_aware(moment):
                return timezone.localtime(moment).strftime("%Y-%m-%dT%H:%M")
        return value

    def clean(self, value: Any) -> Any:
        text = super().clean(value)
        if text is None:
            return None
        try:
            if self.fmt == "date":
                return date.fromisoformat(text).isoformat()
            if self.fmt == "time":
                return time.fromisoformat(text).isoformat()
        except ValueError:
            raise forms.ValidationError(
                f"Enter a valid {self.fmt.replace('-', ' and ')}.", code="invalid"
            ) from None
        moment = _parse_datetime(text)
        if moment is None:
            raise forms.ValidationError("Enter a valid date and time.", code="invalid")
        if timezone.is_naive(moment):
            moment = timezone.make_aware(moment)
        return moment.isoformat()


def _parse_datetime(text: str) -> datetime | None:
    try:
        return parse_datetime(text.strip())
    except ValueError:
        return None


class UntrustedJSONField(forms.JSONField):
    """JSON a reviewer types: anything the runtime could not store is a field error, never a 500.

    Django's ``JSONField`` takes ``NaN`` and ``1e999`` and fails on huge integers and deep nesting
    with exceptions other than ``JSONDecodeError``; this one parses with ``untrusted.parse_json``.
    """

    def to_python(self, value: Any) -> Any:
        if self.disabled:
            return value
        if value in self.empty_values:
            return None
        if isinstance(value, list | dict | int | float | JSONString):
            return value
        try:
            converted = untrusted.parse_json(str(value))
        except untrusted.UntrustedJSONError as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None
        return JSONString(converted) if isinstance(converted, str) else converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        if self.disabled:
            return initial
        if data is None:
            return None
        try:
            return untrusted.parse_json(str(data))
        except untrusted.UntrustedJSONError:
            return InvalidJSONInput(data)


def json_field(*, required: bool, **kwargs: Any) -> forms.JSONField:
    help_text = kwargs.pop("help_text", "") or ""
    hint = "Enter JSON."
    return UntrustedJSONField(
        required=required,
        help_text=f"{help_text} {hint}".strip(),
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "json"}),
        **kwargs,
    )


#: An amount as people type it: ``40``, ``40.5``, ``-12.00``, ``1,250.50`` (commas only between
#: groups of three digits: "40,50" is refused, never read as 4,050).
_MINOR_SUFFIX = re.compile(r"[\s_-]*(cents|minor|minor units)$", re.IGNORECASE)
_AMOUNT = re.compile(r"([+-]?)(\d+|\d{1,3}(?:,\d{3})+)(?:\.(\d+))?")
#: Digits of an amount's whole part (major units): a larger one is a typo, and past Decimal's precision.
MAX_WHOLE_DIGITS = 15


class MoneyField(forms.CharField):
    """An amount of money (``x-money``) typed in major units with its currency ("$ 40.50"), answered
    as the tool holds it: 4050 when it counts cents. Decimal throughout; a JSON number at the end.

    ``schema``: the property's (its ``type``, ``minimum``... in the tool's own units).
    """

    def __init__(self, *, money: Money, schema: Mapping[str, Any], **kwargs: Any) -> None:
        self.money = money
        self.json_type = schema.get("type")
        self.bounds = {k: schema[k] for k in _BOUNDS if _is_number(schema.get(k))}
        example = "40" if money.digits == 0 else f"40 or 40.{'5'.ljust(money.digits, '0')}"
        said = kwargs.pop("help_text", "")
        help_text = " ".join(t for t in (said, f"In {money.code}, e.g. {example}.") if t)
        widget = forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off", "class": "money"})
        if money.cents and kwargs.get("label"):
            # "Amount cents" would ask for cents in a field that takes dollars: the help names the unit.
            kwargs["label"] = _MINOR_SUFFIX.sub("", str(kwargs["label"])) or kwargs["label"]
        super().__init__(strip=True, empty_value=None, widget=widget, help_text=help_text, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        # The tool's value (a number: 4050) reads in major units; what was typed (text) as typed.
        if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
            return self.money.plain(value) or value
        return value

    def clean(self, value: Any) -> Any:
        text = super().clean(value)
        if text is None:
            return None
        major = self._parse(text)
        try:
            stored = self.money.stored(major)
        except ValueError as exc:
            message = f"{exc}: enter e.g. {self._example(major)}."
            raise forms.ValidationError(message, code="decimals") from None
        self._check_bounds(stored)
        return self._as_json(stored)

    def _parse(self, text: str) -> Decimal:
        sign = self.money.sign
        for mark in (sign, self.money.code):
            text = text.removeprefix(mark).removesuffix(mark).strip()
        match = _AMOUNT.fullmatch(text)
        if match is None:
            raise forms.ValidationError(
                "Enter an amount in %(code)s, such as %(example)s.",
                code="invalid",
                params={"code": self.money.code, "example": self._example(Decimal(40))},
            )
        if len(match.group(2).replace(",", "").lstrip("0")) > MAX_WHOLE_DIGITS:
            raise forms.ValidationError("This amount is too large.", code="too_large")
        try:
            return Decimal(match.group(0).replace(",", ""))
        except InvalidOperation:  # pragma: no cover - the pattern only lets digits through
            raise forms.ValidationError("Enter an amount.", code="invalid") from None

    def _example(self, major: Decimal) -> str:
        """``major`` (an amount in major units) as its currency writes it: "$40.50"."""
        in_major = Money(currency=self.money.code)
        return in_major.format(major.quantize(Decimal(1).scaleb(-self.money.digits))) or ""

    def _check_bounds(self, stored: Decimal) -> None:
        for key, (fails, words) in _BOUNDS.items():
            limit = self.bounds.get(key)
            if limit is not None and fails(stored, Decimal(str(limit))):
                shown = self.money.format(limit) or str(limit)
                raise forms.ValidationError(f"Enter an amount {words} {shown}.", code=key)

    def _as_json(self, stored: Decimal) -> Any:
        """The amount as the schema's type wants it: a whole amount is an ``int`` (cents always are),
        a fraction of a major unit a ``float`` (only a tool in major units takes one), text as text."""
        if self.json_type == "string":
            return str(stored)
        if stored == stored.to_integral_value():
            return int(stored)
        if self.json_type == "integer":
            raise forms.ValidationError(
                f"Enter a whole amount of {self.money.code}: this tool takes no fractions.", code="whole"
            )
        return float(stored)


#: JSON Schema's bounds of a number: when a stored value breaks one, and how its error reads.
_BOUNDS: dict[str, tuple[Any, str]] = {
    "minimum": (lambda v, limit: v < limit, "of at least"),
    "exclusiveMinimum": (lambda v, limit: v <= limit, "of more than"),
    "maximum": (lambda v, limit: v > limit, "of at most"),
    "exclusiveMaximum": (lambda v, limit: v >= limit, "of less than"),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# -- the form ----------------------------------------------------------------------------------------

logger = logging.getLogger(__name__)

#: The field name used when the whole answer is one JSON document.
WHOLE_ANSWER = "__json__"
#: Distinct resume schemas whose form class is kept (a runtime has a handful: one per suspending tool).
FORM_CLASS_CACHE_SIZE = 256

_Schema = Mapping[str, Any]


def _resolve(schema: _Schema, root: _Schema) -> _Schema:
    """Follow local ``$ref``s (pydantic puts enums and nested models under ``$defs``)."""
    seen = 0
    while "$ref" in schema and seen < 20:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        if not isinstance(target, Mapping):
            return schema
        # Keywords next to the $ref (title, description, default) win over the target's.
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        seen += 1
    if "allOf" in schema and isinstance(schema["allOf"], list) and len(schema["allOf"]) == 1:
        merged = {**_resolve(schema["allOf"][0], root), **{k: v for k, v in schema.items() if k != "allOf"}}
        return merged
    return schema


def _unwrap_nullable(schema: _Schema, root: _Schema) -> tuple[_Schema, bool]:
    """``Optional[X]`` as pydantic writes it (``anyOf: [X, {type: null}]``) → (X, nullable)."""
    schema = _resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            rest = [o for o in options if not (isinstance(o, Mapping) and o.get("type") == "null")]
            if len(rest) == 1 and len(rest) < len(options):
                inner = _resolve(rest[0], root)
                merged = {**inner, **{k: v for k, v in schema.items() if k != key}}
                return merged, True
    kind = schema.get("type")
    if isinstance(kind, list) and "null" in kind:
        others = [k for k in kind if k != "null"]
        if len(others) == 1:
            return {**schema, "type": others[0]}, True
    return schema, False


def _field_for(schema: _Schema, root: _Schema, *, name: str, required: bool) -> forms.Field:
    schema, nullable = _unwrap_nullable(schema, root)
    required = required and not nullable
    label = str(schema.get("title") or name)
    common: dict[str, Any] = {"label": label, "help_text": str(schema.get("description") or "")}
    has_default = "default" in schema
    if has_default:
        common["initial"] = schema["default"]
        # A property with a default may be left out: the schema (or the tool) fills it in.
        required = False
    kind = schema.get("type")
    money = money_of(name, schema, {}) if kind in ("integer", "number", "string") else None
    if money is not None and "enum" not in schema and "const" not in schema:
        return MoneyField(money=money, schema=schema, required=required, **common)
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return EnumField(values=list(schema["enum"]), required=required, has_default=has_default, **common)
    if "const" in schema:
        return EnumField(values=[schema["const"]], required=required, **common)
    if kind == "boolean":
        # An unchecked checkbox is ``False``, never "missing": the answer always has the key.
        return forms.BooleanField(required=False, **common)
    if kind == "integer":
        return forms.IntegerField(
            required=required,
            min_value=schema.get("minimum"),
            max_value=schema.get("maximum"),
            **common,
        )
    if kind == "number":
        return forms.FloatField(
            required=required,
            min_value=schema.get("minimum"),
            max_value=schema.get("maximum"),
            **common,
        )
    if kind == "string" and schema.get("format") in TEMPORAL_INPUTS:
        return TemporalField(fmt=str(schema["format"]), required=required, **common)
    if kind == "string":
        max_length = schema.get("maxLength")
        widget = forms.Textarea(attrs={"rows": 3}) if (max_length or 0) > 200 else forms.TextInput()
        return forms.CharField(
            required=required,
            min_length=schema.get("minLength"),
            max_length=max_length,
            strip=False,
            empty_value=None,
            widget=widget,
            **common,
        )
    return json_field(required=required, **common)


def _path(loc: tuple[Any, ...]) -> str:
    """``("steps", 0, "owner")`` → ``steps[0].owner``: where inside a JSON value the problem is."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _fields_for_schema(schema: _Schema) -> tuple[dict[str, forms.Field], bool]:
    """The form fields of a resume schema, and whether the answer is one JSON document."""
    root = schema
    top = _resolve(root, root) if root else {}
    properties = top.get("properties")
    if not (top.get("type", "object") == "object" and isinstance(properties, Mapping)):
        field = json_field(
            required=True,
            label=str(top.get("title") or "Answer"),
            help_text=str(top.get("description") or ""),
            initial=top.get("default"),
        )
        return {WHOLE_ANSWER: field}, True
    required = set(top.get("required") or ())
    fields = {
        name: _field_for(prop, root, name=name, required=name in required)
        for name, prop in properties.items()
        if isinstance(prop, Mapping)
    }
    if not fields:
        # An object with no listed properties: let the reviewer write the whole answer.
        return {WHOLE_ANSWER: json_field(required=True, label="Answer", initial={})}, True
    return fields, False


class ResumeForm(forms.Form):
    """The answer to one ``suspend()``-ed call. After ``is_valid()``, ``resume_data`` is the answer.

    One subclass per schema, from ``resume_form_class``; ``schema`` and ``whole_json`` are its own.
    """

    schema: ClassVar[dict[str, Any]] = {}
    #: The answer is one JSON document (field ``WHOLE_ANSWER``), not one field per property.
    whole_json: ClassVar[bool] = True
    #: Why the schema cannot be used (stored by an older version): the call cannot be answered here.
    broken: ClassVar[str] = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resume_data: Any = None

    @property
    def is_json_fallback(self) -> bool:
        return self.whole_json

    @classmethod
    def broken_notice(cls) -> str:
        """What a card says of a call whose resume schema cannot be used ("" when it can)."""
        if not cls.broken:
            return ""
        return (
            f"This tool's resume schema is invalid ({cls.broken}), so this call cannot be answered here. "
            "Decline it, or fix the tool."
        )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.broken:
            self.add_error(None, self.broken_notice())
            return cleaned
        if self.errors:
            return cleaned
        if self.whole_json:
            data: Any = cleaned.get(WHOLE_ANSWER)
        else:
            data = {}
            for name, field in self.fields.items():
                value = cleaned.get(name)
                if isinstance(field, forms.BooleanField):
                    data[name] = bool(value)
                elif value is not None and value != "":
                    data[name] = value
        unstorable = untrusted.problems(data)
        if unstorable:
            self.add_field_errors(unstorable)
            return cleaned
        if self.schema:
            self._check_schema(data)
        if not self.errors:
            self.resume_data = data
        return cleaned

    def _check_schema(self, data: Any) -> None:
        try:
            errors = validation_errors(self.schema, data)
        except TooCostlyToCheck as exc:
            self.add_error(None, f"The tool's resume schema cannot check this answer: {exc}.")
            return
        except jsonschema.SchemaError as exc:
            self.add_error(None, f"The tool's resume schema is invalid: {exc.message}")
            return
        except (RecursionError, ValueError, TypeError, LookupError) as exc:
            self.add_error(None, f"The tool's resume schema cannot check this answer ({type(exc).__name__}).")
            return
        for error in errors:
            self.add_field_errors([{"loc": tuple(error.absolute_path), "msg": error.message}])

    def add_field_errors(self, errors: Sequence[Mapping[str, Any]]) -> None:
        """Attach ``[{"loc": (...), "msg": ...}]`` errors (jsonschema's or the runtime's) to fields."""
        for error in errors:
            loc = tuple(error.get("loc") or ())
            message = str(error.get("msg") or "Invalid value")
            first = str(loc[0]) if loc else None
            if first is not None and first in self.fields and not self.whole_json:
                where = _path(loc[1:])
                self.add_error(first, f"{where}: {message}" if where else message)
            elif self.whole_json:
                where = _path(loc)
                self.add_error(WHOLE_ANSWER, f"{where}: {message}" if where else message)
            else:
                self.add_error(None, message)


def resume_form_class(schema: _Schema | None) -> type[ResumeForm]:
    """The form class of a resume schema: built once per distinct schema, then reused.

    The key is the schema's JSON with its keys in their own order (the order of ``properties`` is the
    order of the fields), so equal schemas share a class. Instances copy the class's fields, as any
    Django form does: a bound form never changes the class.
    """
    try:
        key = json.dumps(schema or {}, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        # Not JSON (only a schema built in code could be): build it without caching.
        return _build_form_class(dict(schema or {}))
    return _cached_form_class(key)


@functools.lru_cache(maxsize=FORM_CLASS_CACHE_SIZE)
def _cached_form_class(key: str) -> type[ResumeForm]:
    return _build_form_class(json.loads(key))


def _build_form_class(schema: dict[str, Any]) -> type[ResumeForm]:
    broken = "; ".join(schema_problems(schema)) if schema else ""
    fields: dict[str, forms.Field] = {}
    whole_json = True
    if not broken:
        try:
            fields, whole_json = _fields_for_schema(schema)
            for form_field in fields.values():
                form_field.prepare_value(form_field.initial)  # what showing the empty form does
        except Exception as exc:  # a schema the checks let through but the form cannot show
            logger.warning("Resume schema cannot be shown as a form: %r", exc)
            broken, fields = f"it cannot be shown as a form: {type(exc).__name__}", {}

    class SchemaResumeForm(ResumeForm):
        pass

    SchemaResumeForm.schema = {} if broken else schema
    SchemaResumeForm.whole_json = whole_json
    SchemaResumeForm.broken = untrusted.clean_text(broken)
    # Set on the class, not declared in its body: a property named "clean" must not hide the method.
    SchemaResumeForm.base_fields = fields
    SchemaResumeForm.declared_fields = dict(fields)
    return SchemaResumeForm


def resume_form(schema: _Schema | None, **kwargs: Any) -> ResumeForm:
    """A form for one answer to ``schema`` (``data``, ``prefix``, ``auto_id``: as for any form)."""
    return resume_form_class(schema)(**kwargs)
