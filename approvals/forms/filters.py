"""The query strings of the dashboard's lists (inbox, audit log) and the viewer's time zone, as forms:
malformed input becomes field errors, never a 500."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django import forms
from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from agents_runtime.store import RECORDED_OUTCOMES, CallKind, DecisionAction, choices
from approvals import ids, times

_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")
DEFAULT_PER_PAGE = 20
MAX_PER_PAGE = 100


class IsoDateOrDateTimeField(forms.CharField):
    """An ISO date (``2026-11-30``) or datetime (``2026-11-30T14:05``, with or without an offset).

    A date stands for the whole day: as a lower bound its first instant, as an upper bound
    (``end_of_day=True``) its last one, so ``to=2026-11-30`` includes everything on that day. Naive
    values are in the site's time zone.
    """

    def __init__(self, *, end_of_day: bool = False, **kwargs: Any) -> None:
        self.end_of_day = end_of_day
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.TextInput(attrs={"placeholder": "YYYY-MM-DD"}))
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> datetime | None:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        moment: datetime | None = None
        day: date | None = None
        try:
            # A bare date first: parse_datetime would read "2026-11-30" as that day's midnight.
            if _DATE_ONLY.fullmatch(text):
                day = parse_date(text)
            else:
                moment = parse_datetime(text)
        except ValueError:
            moment = day = None
        if moment is None and day is None:
            raise forms.ValidationError(
                "Enter an ISO date (YYYY-MM-DD) or date and time (YYYY-MM-DDTHH:MM[:SS][+HH:MM]).",
                code="invalid",
            )
        if moment is None:
            assert isinstance(day, date)
            moment = datetime.combine(day, time.max if self.end_of_day else time.min)
        try:
            if timezone.is_naive(moment):
                moment = timezone.make_aware(moment)
            return moment.astimezone(UTC)
        except OverflowError:
            # Past the end (or before the start) of what a datetime holds once in UTC, e.g.
            # 9999-12-31 in a time zone west of UTC: as a bound that is simply the end of time.
            return datetime.max.replace(tzinfo=UTC) if moment.year > 1 else datetime.min.replace(tzinfo=UTC)


class _CreatedRangeForm(forms.Form):
    """A filter form with an inclusive ``from`` / ``to`` range; subclasses name their labels and order."""

    from_label = "From"
    to_label = "To"
    field_order_names: list[str] = []
    #: The browser's date pickers for ``from`` / ``to``; else text boxes, which also take a time.
    date_pickers = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # ``from`` is a Python keyword: add the date fields by name.
        self.fields["from"] = IsoDateOrDateTimeField(label=self.from_label)
        self.fields["to"] = IsoDateOrDateTimeField(label=self.to_label, end_of_day=True)
        if self.date_pickers:
            for name in ("from", "to"):
                self.fields[name].widget = forms.DateInput(attrs={"type": "date"})
        self.order_fields(self.field_order_names)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("from"), cleaned.get("to")
        if start is not None and end is not None and start > end:
            self.add_error("to", "“to” is before “from”.")
        return cleaned


class InboxFilterForm(_CreatedRangeForm):
    """The inbox's query string: ``thread resource from to tool kind sort page per_page``."""

    thread = forms.CharField(required=False, max_length=255, label="Thread")
    resource = forms.CharField(required=False, max_length=255, label="Resource")
    tool = forms.CharField(required=False, max_length=255, label="Tool")
    kind = forms.ChoiceField(
        required=False,
        label="Kind",
        choices=[("", "Any"), *choices(CallKind)],
    )
    sort = forms.ChoiceField(
        required=False,
        label="Order",
        # Oldest first: a queue is worked from the call that has waited longest.
        choices=[
            ("oldest", "Oldest suspension first"),
            ("newest", "Newest suspension first"),
            ("deadline", "Deadline, soonest first"),
        ],
    )
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    per_page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PER_PAGE, label="Per page")

    from_label, to_label = "Created from", "Created to"
    field_order_names = ["thread", "resource", "tool", "kind", "from", "to", "sort", "per_page", "page"]

    def filters(self) -> dict[str, Any]:
        """Keyword arguments for ``queries.inbox_page`` (call after ``is_valid()``)."""
        data = self.cleaned_data
        return {
            "thread_id": data.get("thread") or None,
            "resource_id": data.get("resource") or None,
            "from_date": data.get("from"),
            "to_date": data.get("to"),
            "tool_name": data.get("tool") or None,
            "kind": CallKind(data["kind"]) if data.get("kind") else None,
            "order": data.get("sort") or "oldest",
            "page": data.get("page") or 1,
            "per_page": data.get("per_page") or DEFAULT_PER_PAGE,
        }


def _token(place: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(place).encode()).decode().rstrip("=")


def _untoken(text: str) -> Any:
    """What ``_token`` wrote; raises ``binascii.Error``, ``UnicodeDecodeError`` or ``ValueError``."""
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _moment(text: Any) -> datetime:
    """A page link's time: with its offset, and one a datetime holds once in UTC, where the database
    compares it (``0001-01-01T00:00+14:00`` is not); raises ``ValueError`` or ``TypeError``."""
    moment = datetime.fromisoformat(text)
    if timezone.is_naive(moment):
        raise ValueError("a page link's time carries its offset")
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError("a page link's time is out of range") from None


#: The largest row id a page link may name (PostgreSQL's ``bigint``).
_MOST_ROW_ID = 2**63 - 1


class AuditPositionField(forms.CharField):
    """Where a page of the audit log starts: below a row (``audit_token``: its time and id), as the
    "Next" link says it. A page starts where the last one ended, so page 100 costs what page 1 does
    (an offset would read the 4,950 rows above it first)."""

    widget = forms.HiddenInput

    def to_python(self, value: Any) -> tuple[datetime, int] | None:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        try:
            created_at, row_id = _untoken(text)
            place = (_moment(created_at), row_id)
        except (binascii.Error, UnicodeDecodeError, ValueError, TypeError):
            place = None
        if place is None or type(place[1]) is not int or not 0 < place[1] <= _MOST_ROW_ID:
            raise forms.ValidationError(
                "This page link is damaged: start again from the newest records.", code="invalid"
            )
        return place


def audit_token(created_at: datetime, row_id: int) -> str:
    """An audit row's place in the log as the query string carries it (``after``)."""
    return _token([created_at.isoformat(), row_id])


#: The argument search's bounds: under three characters a trigram index cannot narrow the rows
#: (PostgreSQL would read all of it), and no argument worth finding is longer than this.
ARGS_SEARCH_MIN = 3
ARGS_SEARCH_MAX = 200


class AuditFilterForm(_CreatedRangeForm):
    """The audit log's query string: ``agent user tool action outcome q args from to invalid after``.

    Agent, user and tool are choices built from the registry and the log (``queries.audit_choices``),
    not free text; ``q`` searches run, thread and resource ids, ``args`` the call's arguments (as
    shown, as edited, or the request of an input call). Invalid attempts are left out unless
    ``invalid`` is ticked (or the outcome filter asks for them). ``after`` is the row the page starts below.
    """

    agent = forms.ChoiceField(required=False, label="Agent")
    user = forms.ChoiceField(required=False, label="User")
    tool = forms.ChoiceField(required=False, label="Tool")
    action = forms.ChoiceField(
        required=False, choices=[("", "Any"), *choices(DecisionAction)], label="Decision"
    )
    outcome = forms.ChoiceField(
        required=False, choices=[("", "Any"), *choices(RECORDED_OUTCOMES)], label="Outcome"
    )
    q = forms.CharField(
        required=False,
        max_length=255,
        label="Run, thread or resource",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "id or part of one"}),
    )
    args = forms.CharField(
        required=False,
        min_length=ARGS_SEARCH_MIN,
        max_length=ARGS_SEARCH_MAX,
        label="In the arguments",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "an order, an amount, a name"}),
        error_messages={
            "min_length": f"Search the arguments for at least {ARGS_SEARCH_MIN} characters.",
            "max_length": f"Search the arguments for at most {ARGS_SEARCH_MAX} characters.",
        },
    )
    invalid = forms.BooleanField(required=False, label="Include invalid attempts")
    after = AuditPositionField(required=False)

    field_order_names = [
        "agent", "user", "tool", "action", "outcome", "q", "args", "from", "to", "invalid", "after",
    ]  # fmt: skip
    date_pickers = True

    def __init__(
        self,
        *args: Any,
        agents: Sequence[tuple[str, str]] = (),
        users: Sequence[str] = (),
        tools: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "Any"), *agents]  # type: ignore[attr-defined]
        self.fields["user"].choices = [("", "Anyone"), *((u, u) for u in users)]  # type: ignore[attr-defined]
        self.fields["tool"].choices = [("", "Any"), *((t, t) for t in tools)]  # type: ignore[attr-defined]

    def filters(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "agent_id": data.get("agent") or None,
            "username": data.get("user") or None,
            "tool_name": data.get("tool") or None,
            "action": data.get("action") or None,
            "outcome": data.get("outcome") or None,
            "search": (data.get("q") or "").strip() or None,
            "in_args": data.get("args") or None,
            "start": data.get("from"),
            "end": data.get("to"),
            "include_invalid": bool(data.get("invalid")),
        }


class SuggestingInput(forms.TextInput):
    """A text box that suggests values (an HTML ``datalist``) and takes any part of one."""

    template_name = "approvals/widgets/suggesting_input.html"

    def __init__(self, suggestions: Sequence[str] = (), attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.suggestions = list(suggestions)

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        widget = context["widget"]
        widget["suggestions"] = self.suggestions
        if self.suggestions:
            widget["attrs"]["list"] = f"{widget['attrs'].get('id') or name}-suggestions"
        return context


class QueuePositionField(forms.CharField):
    """Where a page of the queue starts: after a run's place (``queue_token``), as the "Next" link
    says it; anything else is an error, never a guess."""

    widget = forms.HiddenInput

    def to_python(self, value: Any) -> tuple[datetime | None, datetime, str] | None:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        try:
            deadline, suspended_at, run_id = _untoken(text)
            place = (None if deadline is None else _moment(deadline), _moment(suspended_at), run_id)
        except (binascii.Error, UnicodeDecodeError, ValueError, TypeError):
            place = None
        if place is None or not ids.storable(place[2]):
            raise forms.ValidationError(
                "This page link is damaged: start again from the top of the queue.", code="invalid"
            )
        return place


def queue_token(deadline: datetime | None, suspended_at: datetime, run_id: str) -> str:
    """A run's place in the queue as the query string carries it (``after``; ``QueuePositionField``)."""
    return _token([None if deadline is None else deadline.isoformat(), suspended_at.isoformat(), run_id])


class QueueFilterForm(_CreatedRangeForm):
    """The queue's query string: ``agent tool thread resource from to after per_page``.

    The agent is one of the user's (a choice); tool, thread and end user take any part of a name,
    any case, and suggest the names there are (``queries.queue_suggestions``); ``after`` is where the
    page starts (the "Next" link's).
    """

    agent = forms.ChoiceField(required=False, label="Agent")
    tool = forms.CharField(required=False, max_length=255, label="Tool")
    thread = forms.CharField(required=False, max_length=255, label="Thread")
    resource = forms.CharField(required=False, max_length=255, label="End user")
    after = QueuePositionField(required=False)
    per_page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PER_PAGE, label="Per page")

    from_label, to_label = "Created from", "Created to"
    field_order_names = ["agent", "tool", "thread", "resource", "from", "to", "per_page", "after"]
    date_pickers = True

    def __init__(
        self,
        *args: Any,
        agents: Sequence[tuple[str, str]] = (),
        tools: Sequence[str] = (),
        threads: Sequence[str] = (),
        resources: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "All my agents"), *agents]  # type: ignore[attr-defined]
        for name, suggestions in (("tool", tools), ("thread", threads), ("resource", resources)):
            hint = {"placeholder": "name or part of one"}
            self.fields[name].widget = SuggestingInput(suggestions, attrs=hint)

    def filters(self) -> dict[str, Any]:
        """Keyword arguments for ``queries.queue_page`` (call after ``is_valid()``)."""
        data = self.cleaned_data
        return {
            "agent_id": data.get("agent") or None,
            "tool": (data.get("tool") or "").strip() or None,
            "thread": (data.get("thread") or "").strip() or None,
            "resource": (data.get("resource") or "").strip() or None,
            "created_from": data.get("from"),
            "created_to": data.get("to"),
            "after": data.get("after"),
            "per_page": data.get("per_page") or DEFAULT_PER_PAGE,
        }


@dataclass(frozen=True)
class DatePreset:
    label: str
    #: ISO dates, as the ``from`` and ``to`` of the query string.
    start: str
    end: str
    active: bool


def date_presets(data: QueryDict) -> list[DatePreset]:
    """Today, the last 7 and the last 30 days, in the viewer's time zone, as ``from``/``to`` dates."""
    today = timezone.localdate()
    spans = (("Today", 0), ("Last 7 days", 6), ("Last 30 days", 29))
    end = today.isoformat()
    presets = []
    for label, back in spans:
        start = (today - timedelta(days=back)).isoformat()
        presets.append(DatePreset(label, start, end, data.get("from") == start and data.get("to") == end))
    return presets


class TimeZoneForm(forms.Form):
    """The profile menu's time zone: empty for automatic (the browser's), else an IANA name."""

    time_zone = forms.CharField(required=False, max_length=64, label="Time zone")

    def clean_time_zone(self) -> str:
        name: str = self.cleaned_data["time_zone"]
        if name and times.zone(name) is None:
            raise forms.ValidationError("Choose a time zone from the list.", code="unknown_zone")
        return name
