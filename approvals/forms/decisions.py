"""What a decision, a grant, a batch or a new run posts, as forms: shapes checked here, rules checked
by the one door (``services.decisions``). Malformed input becomes field errors, never a 500."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.core import signing

from agents_runtime import Confirmation, untrusted
from agents_runtime.grants import MAX_CONDITION_LENGTH, InvalidGrant, compile_condition
from agents_runtime.store import DecisionAction
from approvals import ids


class DeclineForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=untrusted.MAX_REASON_LENGTH,
        label="Reason for declining (sent to the agent)",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional. The model receives it as the tool's result.",
    )


class ExtendDeadlineForm(forms.Form):
    """A reviewer gives a waiting call more time (audited with the reason)."""

    by_minutes = forms.TypedChoiceField(
        coerce=int,
        choices=[(15, "15 minutes"), (60, "1 hour"), (240, "4 hours"), (1440, "1 day")],
        initial=60,
        label="Extend by",
    )
    reason = forms.CharField(max_length=500, label="Reason (kept in the audit log)", strip=True)


#: How long a grant made from a card lasts ("" : until its uses run out).
GRANT_DURATIONS = {"1h": timedelta(hours=1), "1d": timedelta(days=1), "7d": timedelta(days=7)}


class GrantForm(forms.Form):
    """ "Approve and allow": the terms of the standing grant made with the approval.

    ``scopes``: the scopes this run offers (a thread's or an end user's only when it has one).
    """

    prefix = "grant"

    scope = forms.ChoiceField(label="Allow this tool for", choices=())
    lasts = forms.ChoiceField(
        label="For",
        choices=[("1h", "1 hour"), ("1d", "1 day"), ("7d", "7 days"), ("", "until its uses run out")],
        initial="1h",
        required=False,
    )
    uses = forms.IntegerField(
        label="At most this many calls",
        required=False,
        min_value=1,
        max_value=100_000,
        help_text="Optional with a time limit; needed without one.",
    )
    condition = forms.CharField(
        label="Only when the arguments match",
        required=False,
        max_length=MAX_CONDITION_LENGTH,
        strip=True,
        help_text='Optional. A CEL expression, e.g. amount_cents <= 10000 && environment == "staging".',
    )
    risky = forms.BooleanField(
        label="Also for calls marked risky",
        required=False,
        help_text="Without it the grant never approves a call the tool marks risky: those wait for a person.",
    )

    def __init__(self, *args: Any, scopes: Sequence[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        scope_field = self.fields["scope"]
        assert isinstance(scope_field, forms.ChoiceField)
        scope_field.choices = list(scopes)
        scope_field.initial = scopes[0][0] if scopes else None

    def clean_condition(self) -> str:
        condition: str = self.cleaned_data["condition"]
        try:
            compile_condition(condition)
        except InvalidGrant as exc:
            raise forms.ValidationError(str(exc)) from None
        return condition

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not cleaned.get("lasts") and cleaned.get("uses") is None and "uses" not in self.errors:
            self.add_error("uses", "A grant needs an end: choose how long it lasts, or how many calls.")
        return cleaned

    def terms(self) -> tuple[str, timedelta | None, int | None, str]:
        data = self.cleaned_data
        return data["scope"], GRANT_DURATIONS.get(data["lasts"] or ""), data["uses"], data["condition"]

    @property
    def covers_risky(self) -> bool:
        return bool(self.cleaned_data.get("risky"))


class NewRunForm(forms.Form):
    agent = forms.ChoiceField(label="Agent")
    prompt = forms.CharField(label="Prompt", max_length=8000, widget=forms.Textarea(attrs={"rows": 4}))
    thread = forms.CharField(required=False, max_length=255, label="Thread")
    resource = forms.CharField(required=False, max_length=255, label="Resource")

    def __init__(self, *args: Any, agents: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = agents  # type: ignore[attr-defined]


#: The most an edited argument object may weigh (UTF-8 bytes of the posted JSON text).
EDITED_ARGS_MAX_BYTES = 64 * 1024


def _no_constant(name: str) -> Any:
    # ``json.loads`` takes NaN and Infinity, which are not JSON (and no tool's argument).
    raise ValueError(f"{name} is not JSON")


class EditedArgsForm(forms.Form):
    """The arguments a reviewer approves instead of the model's: the JSON text of one object.

    Here only the shape is checked (JSON, an object, not too large); the runtime validates the
    arguments against the tool's parameters.
    """

    edited_args = forms.CharField(
        label="Edited arguments (JSON)",
        widget=forms.Textarea(attrs={"rows": 8, "class": "json", "spellcheck": "false"}),
        help_text="The tool runs once with these arguments instead of the model's.",
        error_messages={"required": "Enter the arguments as a JSON object."},
    )

    def clean_edited_args(self) -> dict[str, Any]:
        text: str = self.cleaned_data["edited_args"]
        size = len(text.encode())
        if size > EDITED_ARGS_MAX_BYTES:
            raise forms.ValidationError(
                "These arguments are too large (%(size)s KiB; at most %(limit)s KiB).",
                code="too_large",
                params={"size": -(-size // 1024), "limit": EDITED_ARGS_MAX_BYTES // 1024},
            )
        try:
            value = json.loads(text, parse_constant=_no_constant, parse_float=untrusted.finite_float)
        except RecursionError:
            raise forms.ValidationError("These arguments are nested too deeply.", code="too_deep") from None
        except ValueError as exc:
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise forms.ValidationError(
                "This is not valid JSON: %(detail)s.", code="invalid_json", params={"detail": detail}
            ) from None
        if not isinstance(value, dict):
            raise forms.ValidationError(
                "Enter a JSON object ({…}) with the tool's arguments, not %(kind)s.",
                code="not_object",
                params={"kind": _json_kind(value)},
            )
        # What the runtime could not store (NUL, lone surrogates, huge integers, deep nesting).
        unstorable = untrusted.problems(value, max_bytes=None)
        if unstorable:
            raise forms.ValidationError(untrusted.describe(unstorable), code="unstorable")
        return value

    def add_argument_errors(self, errors: list[dict[str, Any]]) -> None:
        """The runtime's refusal of the arguments (``loc`` relative to the object), on the field."""
        for error in errors:
            where = ".".join(str(part) for part in error.get("loc") or ())
            message = str(error.get("msg") or "Invalid value.")
            self.add_error("edited_args", f"{where}: {message}" if where else message)


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


class BatchStartForm(forms.Form):
    """Approve all or decline all (the button pressed), with one reason for the declines."""

    action = forms.ChoiceField(
        choices=[(a.value, a.label) for a in (DecisionAction.APPROVE, DecisionAction.DECLINE)],
        error_messages={"required": "Choose Approve all or Decline all."},
    )
    reason = forms.CharField(
        required=False,
        max_length=untrusted.MAX_REASON_LENGTH,
        label="Reason",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="For Decline all: every declined call's model receives it as the tool's result.",
    )


#: The boxes a decision post may carry, each a confirmation the decider gives (the card's "I checked
#: this", "Decide anyway" on a colleague's claim, "Run it again" on a call whose tool may have run).
CONFIRMATION_FIELDS = {
    "confirm_risky": Confirmation.RISKY,
    "confirm_claimed": Confirmation.CLAIMED,
    "confirm_rerun": Confirmation.RERUN,
}
_TICKED = {"yes", "on", "true", "1"}


def posted_confirmations(data: Any) -> frozenset[Confirmation]:
    """The confirmations a post ticks (a box posts "on"; anything else is not a tick)."""
    return frozenset(
        c for name, c in CONFIRMATION_FIELDS.items() if str(data.get(name, "")).lower() in _TICKED
    )


#: The signer of a card's ``shown`` field: the moment the card was rendered, so a decision's record
#: says when its decider was shown the call (a reviewer cannot post an earlier or later one).
_SHOWN = signing.TimestampSigner(salt="countersign.card-shown")


def shown_token(fingerprint: str) -> str:
    """A card's ``shown`` field, rendered with it: its fingerprint and the time, signed."""
    return _SHOWN.sign(fingerprint)


def posted_shown_at(data: Any) -> datetime | None:
    """When the posting card was rendered, from its signed ``shown`` field (None: absent or forged)."""
    value = data.get("shown", "")
    if not isinstance(value, str) or len(value) > 200:
        return None
    try:
        _SHOWN.unsign(value)
        stamp = signing.b62_decode(value.rsplit(":", 2)[1])
    except (signing.BadSignature, ValueError, IndexError):
        return None
    return datetime.fromtimestamp(stamp, tz=UTC)


#: Twice a fingerprint's length: a longer value is cut to this, which no fingerprint equals either.
_MOST_SEEN = 64


def posted_fingerprint(data: Any) -> str | None:
    """The card's fingerprint of the arguments it showed (``agents_runtime.fingerprint``), if posted.

    Whatever is posted binds the decision, as the API's ``fingerprint`` does: a value that is not the
    call's fingerprint (mangled, forged) is a stale card to the policy, refused; never a decision
    taken unbound, as if the card had posted none."""
    value = data.get("seen", "")
    if not isinstance(value, str) or not value:
        return None
    return value[:_MOST_SEEN]


def posted_selection(values: Sequence[str]) -> list[tuple[str, str]]:
    """The inbox's bulk selection as posted: ``call`` values, each a JSON ``[run_id, tool_call_id]``
    pair. Anything else, and ids that name nothing stored (too long, NUL, a lone surrogate: no
    database compares them), is ignored."""
    pairs = []
    for value in values:
        try:
            run_id, tool_call_id = json.loads(value)
        except (ValueError, TypeError, RecursionError):
            continue
        if ids.storable(run_id) and ids.storable(tool_call_id):
            pairs.append((run_id, tool_call_id))
    return pairs
