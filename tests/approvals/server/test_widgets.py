"""The form renderer's inputs and selects (``approvals.server.widgets``) write the markup Django's own
templates write, byte for byte: every kind of value and attribute, and every field of the app's forms."""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Any

import pytest
from django import forms
from django.forms.renderers import DjangoTemplates
from django.http import QueryDict
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy

from approvals.forms.filters import AuditFilterForm, InboxFilterForm, QueueFilterForm, TimeZoneForm
from approvals.server.widgets import FormRenderer

DJANGO = DjangoTemplates()
OURS = FormRenderer()

ATTRS: list[dict[str, Any]] = [
    {},
    {"maxlength": 255, "placeholder": "YYYY-MM-DD", "required": True, "disabled": False},
    {
        "aria-describedby": 'a"b<c>&d',
        "data-x": mark_safe("<b>kept</b>"),
        "min": 1.5,
        "label": gettext_lazy("Tool"),
    },
]
INPUTS: list[forms.Widget] = [
    forms.TextInput(),
    forms.NumberInput(),
    forms.HiddenInput(),
    forms.EmailInput(),
    forms.URLInput(),
    forms.PasswordInput(render_value=True),
    forms.DateInput(),
    forms.DateTimeInput(),
    forms.TimeInput(),
    forms.SearchInput(),
    forms.TelInput(),
    forms.ColorInput(),
]
VALUES: list[Any] = [
    None,
    "",
    "plain",
    "<script>alert('x')</script> & \"quotes\"",
    mark_safe("<i>safe</i>"),
    7,
    0,
    2.5,
    date(2026, 12, 6),
    datetime(2026, 12, 6, 14, 5),
    time(9, 30),
    ("a", "b"),
]


def both(widget: forms.Widget, value: Any, attrs: dict[str, Any] | None = None) -> tuple[str, str]:
    return (
        widget.render("field", value, attrs=attrs, renderer=DJANGO),
        widget.render("field", value, attrs=attrs, renderer=OURS),
    )


@pytest.mark.parametrize("widget", INPUTS, ids=lambda w: type(w).__name__)
@pytest.mark.parametrize("attrs", ATTRS, ids=["none", "typical", "escaped"])
def test_an_input_is_written_as_djangos_template_writes_it(
    widget: forms.Widget, attrs: dict[str, Any]
) -> None:
    for value in VALUES:
        django, ours = both(widget, value, attrs)
        assert ours == django, value


@pytest.mark.parametrize("value", [None, True, False, "", "yes", "on"])
def test_a_checkbox_is_written_as_djangos_template_writes_it(value: Any) -> None:
    django, ours = both(forms.CheckboxInput(), value, {"required": True})
    assert ours == django


CHOICES: list[Any] = [
    [("", "Any"), ("approval", "Approval"), ("input", "Input")],
    [(1, "One"), (2, mark_safe("<b>Two</b>")), (3, "<Three> & 'four'")],
    [("Fruit", [("apple", "Apple"), ("pear", gettext_lazy("Pear"))]), ("other", "Other")],
]


@pytest.mark.parametrize("choices", CHOICES, ids=["flat", "escaped", "grouped"])
@pytest.mark.parametrize("widget", [forms.Select, forms.SelectMultiple, forms.NullBooleanSelect])
def test_a_select_is_written_as_djangos_template_writes_it(
    choices: list[Any], widget: type[forms.Select]
) -> None:
    select = widget() if widget is forms.NullBooleanSelect else widget(choices=choices)
    values: list[Any] = [None, "", "approval", 2, "2", "pear", True, "unknown"]
    for value in [*values, ["apple", "other"]] if widget is not forms.NullBooleanSelect else values:
        for attrs in ATTRS:
            django, ours = both(select, value, attrs)
            assert ours == django, (value, attrs)


def test_other_widgets_are_left_to_their_templates() -> None:
    for widget in [forms.Textarea(), forms.RadioSelect(choices=[("a", "A")]), forms.CheckboxSelectMultiple()]:
        django, ours = both(widget, "a")
        assert ours == django
    # A value the engine would call (a callable) is left to it too.
    django, ours = both(forms.TextInput(), lambda: "called")
    assert ours == django


def test_the_sites_forms_are_rendered_with_it() -> None:
    assert isinstance(InboxFilterForm().renderer, FormRenderer)


QUERIES = [
    "",
    "thread=t-1&resource=%3Cb%3E&tool=refund&kind=input&from=2026-12-01&to=2026-11-30&sort=newest&per_page=50",
    "kind=vote&per_page=0&from=yesterday&page=x",
]


SUGGESTED: dict[type[forms.Form], dict[str, Any]] = {
    AuditFilterForm: {"agents": [("ops", "Ops <release>")], "users": ["rita"], "tools": ["deploy"]},
    QueueFilterForm: {
        "agents": [("ops", "Ops")],
        "tools": ["deploy"],
        "threads": ["t-1"],
        "resources": ["r&d"],
    },
}


@pytest.mark.django_db
@pytest.mark.parametrize("form_class", [InboxFilterForm, AuditFilterForm, QueueFilterForm, TimeZoneForm])
@pytest.mark.parametrize("query", QUERIES, ids=["empty", "filled", "invalid"])
def test_the_apps_forms_render_as_with_djangos_templates(form_class: type[forms.Form], query: str) -> None:
    suggested = SUGGESTED.get(form_class, {})
    ours = form_class(QueryDict(query), renderer=OURS, **suggested)
    django = form_class(QueryDict(query), renderer=DJANGO, **suggested)
    ours.is_valid()
    django.is_valid()

    for field in django:
        assert str(ours[field.name]) == str(field), field.name
