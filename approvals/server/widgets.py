"""Django's form renderer, with the templates of its plain inputs and selects written in Python.

Replaces: ``django.forms.renderers.DjangoTemplates`` (the default ``FORM_RENDERER``) for
``django/forms/widgets/input.html``, the widgets whose template only includes it (text, number,
hidden, date, time, checkbox...), ``select.html`` with its ``select_option.html`` options, and the
``attrs.html`` each of them includes. Every other template (textareas, radios, our own widgets) is
rendered by the engine as before.

Why: a list's filter form is rendered field by field on every page of the inbox, the queue and the
audit log, and each field was three templates, each with a context of its own: the inbox's eight
visible fields cost its page more than all of its fifty cards' rows did (``bench/inbox_page.py``,
``docs/scaling.md``). The markup is the templates', byte for byte (each is checked against Django's
own rendering: ``tests/approvals/server/test_widgets.py``), escaped as ``{{ value }}`` escapes.

Delete it when Django renders these widgets without the template engine; a change to those templates
fails the test first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.forms.renderers import DjangoTemplates
from django.utils.functional import Promise
from django.utils.html import conditional_escape, escape
from django.utils.safestring import SafeData

_WIDGETS = "django/forms/widgets/"
#: The widgets whose template is ``{% include "django/forms/widgets/input.html" %}`` and nothing else.
_INPUTS = frozenset(
    f"{_WIDGETS}{name}.html"
    for name in (
        "input",
        "text",
        "number",
        "email",
        "url",
        "password",
        "hidden",
        "date",
        "datetime",
        "time",
        "search",
        "tel",
        "color",
        "checkbox",
    )
)
_OPTION = f"{_WIDGETS}select_option.html"
#: Values written as the templates write them; any other kind (a callable, which the engine would
#: call) is left to the templates.
_PLAIN = (str, int, float, Promise)


def _formatted(value: Any) -> str:
    """``{{ value|stringformat:'s' }}``: safe markup as it is (the filter keeps it safe), else escaped."""
    shown = "%s" % (str(value) if isinstance(value, tuple) else value)
    return shown if isinstance(value, SafeData) else str(escape(shown))


def _attrs(attrs: Mapping[str, Any]) -> str:
    """``attrs.html``: `` name="value"`` each, a bare `` name`` for True, nothing for False."""
    written = []
    for name, value in attrs.items():
        if value is False:
            continue
        written.append(
            f" {conditional_escape(name)}"
            if value is True
            else f' {conditional_escape(name)}="{_formatted(value)}"'
        )
    return "".join(written)


def _plain(widget: Mapping[str, Any], *names: str) -> bool:
    values = [widget[name] for name in names]
    values += [v for v in widget["attrs"].values() if not isinstance(v, bool)]
    return all(v is None or isinstance(v, _PLAIN) for v in values)


def _input(widget: Mapping[str, Any]) -> str | None:
    if not _plain(widget, "type", "name", "value"):
        return None
    value = widget["value"]
    shown = "" if value is None else f' value="{_formatted(value)}"'
    kind, name = conditional_escape(widget["type"]), conditional_escape(widget["name"])
    return f'<input type="{kind}" name="{name}"{shown}{_attrs(widget["attrs"])}>'


def _select(widget: Mapping[str, Any]) -> str | None:
    if not _plain(widget, "name"):
        return None
    parts = [f'<select name="{conditional_escape(widget["name"])}"{_attrs(widget["attrs"])}>']
    for group_name, options, _index in widget["optgroups"]:
        if group_name:
            parts.append(f'\n  <optgroup label="{conditional_escape(group_name)}">')
        for option in options:
            if option["template_name"] != _OPTION or not _plain(option, "value", "label"):
                return None
            # (The option's template ends with a newline, which its include keeps.)
            parts.append(
                f'\n  <option value="{_formatted(option["value"])}"{_attrs(option["attrs"])}>'
                f"{conditional_escape(option['label'])}</option>\n"
            )
        if group_name:
            parts.append("\n  </optgroup>")
    parts.append("\n</select>")
    return "".join(parts)


_WRITERS: dict[str, Callable[[Mapping[str, Any]], str | None]] = {
    **dict.fromkeys(_INPUTS, _input),
    f"{_WIDGETS}select.html": _select,
}


class FormRenderer(DjangoTemplates):
    """``FORM_RENDERER``: Django's, but the widgets above written without their templates."""

    def render(self, template_name: str, context: dict[str, Any], request: Any = None) -> str:
        write = _WRITERS.get(template_name)
        written = None if write is None else write(context["widget"])
        if written is None:
            return str(super().render(template_name, context, request))
        return written
