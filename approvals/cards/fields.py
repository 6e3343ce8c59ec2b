"""Form fields as plain markup: what a card shows of its forms, without Django's widget templates.

An inbox page has a hundred form fields (a decline reason per card, the resume forms' fields), and
rendering them through the widget templates was a third of its time. Django forms still validate
every post and carry their errors back into the views; ``bound_fields`` shows such a form, and
``unbound_fields`` an empty one from data computed once per form class. The markup itself is the
``form-field`` partial of ``approvals/run.html``; ids, values and attributes match what Django's
widgets would write.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django import forms
from django.forms.utils import pretty_name
from django.forms.widgets import ChoiceWidget, Input

from approvals.forms.schema import FORM_CLASS_CACHE_SIZE, MoneyField


@dataclass(frozen=True)
class OptionView:
    value: str
    label: str
    selected: bool


@dataclass(frozen=True)
class FieldView:
    """One form field as the card's markup shows it: label, control, help and errors.

    Ids follow Django's: the control's is the form's ``auto_id`` applied to the prefixed name, its
    help text's and errors' are that id with ``_helptext`` and ``_error``, and the control is
    described by both (``aria-describedby``).
    """

    #: The control's ``name`` (the form's prefix included).
    name: str
    id: str
    label: str
    #: ``input``, ``checkbox``, ``textarea`` or ``select``.
    control: str
    #: The ``type`` of an ``input`` (``text``, ``number``...).
    input_type: str
    #: The field must be answered (the label's mark); ``required_attr``: the control says so too.
    required: bool
    required_attr: bool
    #: The widget's own attributes (``min``, ``max``, ``step``, ``maxlength``, ``rows``...).
    attrs: tuple[tuple[str, str], ...]
    #: The text of an ``input`` or ``textarea`` (None: no ``value`` attribute).
    value: str | None
    checked: bool
    options: tuple[OptionView, ...]
    help_text: str
    errors: tuple[str, ...]
    help_id: str
    error_id: str
    #: The ids of the help text (if any) and of the errors (if any): the control's description.
    describedby: str
    #: Shown before an ``input``: an amount's currency (``$``), its help text says it in words.
    unit: str = ""


#: Attributes the markup writes itself; a widget's own value for them is not repeated.
_MARKUP_ATTRS = {"id", "name", "type", "value", "checked", "selected", "required"}


@dataclass(frozen=True)
class _Control:
    """How one form field is shown, whatever its value and wherever it is (one per form class)."""

    name: str
    label: str
    help_text: str
    control: str
    input_type: str
    required: bool
    required_attr: bool
    attrs: tuple[tuple[str, str], ...]
    choices: tuple[tuple[str, str], ...]
    widget: forms.Widget
    #: Turns a value given as ``initial`` into what the control shows (money in major units).
    prepare: Any
    unit: str = ""

    @classmethod
    def of(cls, name: str, form_field: forms.Field) -> _Control:
        widget = form_field.widget
        input_type = ""
        choices: tuple[tuple[str, str], ...] = ()
        if isinstance(widget, forms.CheckboxInput):
            control = input_type = "checkbox"
        elif isinstance(widget, forms.Select) and not widget.allow_multiple_selected:
            control = "select"
            choices = tuple(_flat_choices(widget.choices))
        elif isinstance(widget, forms.Textarea):
            control = "textarea"
        elif isinstance(widget, Input) and not isinstance(widget, ChoiceWidget):
            control, input_type = "input", str(widget.input_type)
        else:
            raise TypeError(f"No plain markup for the {type(widget).__name__} of field {name!r}.")
        attrs = tuple(
            (key, "" if value is True else str(value))
            for key, value in widget.attrs.items()
            if key not in _MARKUP_ATTRS and value is not None and value is not False
        )
        return cls(
            name=name,
            label=pretty_name(name) if form_field.label is None else str(form_field.label),
            help_text=str(form_field.help_text or ""),
            control=control,
            input_type=input_type,
            required=form_field.required,
            required_attr=form_field.required and widget.use_required_attribute(form_field.initial),
            attrs=attrs,
            choices=choices,
            widget=widget,
            prepare=form_field.prepare_value,
            unit=form_field.money.sign if isinstance(form_field, MoneyField) else "",
        )

    def view(self, *, html_name: str, auto_id: str, value: Any, errors: Iterable[Any] = ()) -> FieldView:
        """The field with ``value`` (as ``BoundField.value()`` gives it) and its errors."""
        shown: str | None = None
        checked = False
        options: tuple[OptionView, ...] = ()
        if self.control == "select":
            wanted = self.widget.format_value(value)
            # As Django's Select: only the first option with a wanted value is selected.
            first = next((v for v, _ in self.choices if v in wanted), None)
            options = tuple(OptionView(v, label, v == first) for v, label in self.choices)
        elif self.control == "checkbox":
            assert isinstance(self.widget, forms.CheckboxInput)
            checked = bool(self.widget.check_test(value))
            shown = self.widget.format_value(value)
        else:
            shown = self.widget.format_value(value)
        # Computed here, not in properties: a page reads them for a hundred fields.
        control_id = auto_id % html_name if "%s" in auto_id else (html_name if auto_id else "")
        messages = tuple(str(e) for e in errors)
        help_id, error_id = f"{control_id}_helptext", f"{control_id}_error"
        described = [help_id] if self.help_text else []
        if messages:
            described.append(error_id)
        return FieldView(
            name=html_name,
            id=control_id,
            label=self.label,
            control=self.control,
            input_type=self.input_type,
            required=self.required,
            required_attr=self.required_attr,
            attrs=self.attrs,
            value=shown,
            checked=checked,
            options=options,
            help_text=self.help_text,
            errors=messages,
            help_id=help_id,
            error_id=error_id,
            describedby=" ".join(described),
            unit=self.unit,
        )


def _flat_choices(choices: Iterable[Any]) -> Iterable[tuple[str, str]]:
    for value, label in choices:
        if isinstance(label, (list, tuple)):
            raise TypeError("Option groups have no plain markup.")
        yield ("" if value is None else str(value)), str(label)


@functools.lru_cache(maxsize=FORM_CLASS_CACHE_SIZE + 16)
def _controls(form_class: type[forms.Form]) -> tuple[tuple[_Control, Any], ...]:
    """Each field of a form class with the value it shows when unbound (its prepared initial)."""
    return tuple(
        (_Control.of(name, form_field), form_field.prepare_value(form_field.initial))
        for name, form_field in form_class.base_fields.items()
    )


def _html_name(prefix: str | None, name: str) -> str:
    return f"{prefix}-{name}" if prefix else name


def unbound_fields(
    form_class: type[forms.Form],
    *,
    auto_id: str,
    prefix: str | None = None,
    initial: Mapping[str, Any] | None = None,
) -> list[FieldView]:
    """The fields of an empty form of ``form_class`` (its fields as declared, no instance needed).

    Only for form classes whose instances keep the class's fields as they are (``DeclineForm``, the
    resume forms); an empty form shows each field's initial value, or the one in ``initial`` (by
    field name, as ``Form(initial=...)`` would show it).
    """
    initial = initial or {}
    return [
        control.view(
            html_name=_html_name(prefix, control.name),
            auto_id=auto_id,
            value=control.prepare(initial[control.name]) if control.name in initial else default,
        )
        for control, default in _controls(form_class)
    ]


def bound_fields(form: forms.Form) -> list[FieldView]:
    """The fields of a form instance (posted data and errors included), as Django would show them."""
    auto_id = str(form.auto_id) if form.auto_id else ""
    views = []
    for name, form_field in form.fields.items():
        bound = form[name]
        views.append(
            _Control.of(name, form_field).view(
                html_name=bound.html_name, auto_id=auto_id, value=bound.value(), errors=bound.errors
            )
        )
    return views
