"""The form fields a schema's form is built of, beyond Django's own: enums of any JSON values, JSON a
reviewer types (parsed as untrusted), and dates and times in the browser's own inputs."""

from __future__ import annotations

import json
from datetime import date, datetime, time
from typing import Any

from django import forms
from django.forms.fields import InvalidJSONInput, JSONString
from django.forms.widgets import DateTimeBaseInput
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents_runtime import untrusted


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
