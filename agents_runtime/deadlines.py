"""Deadlines of parked calls: what happens when nobody answers in time.

A tool declares ``expires_after`` (and ``on_expiry``, ``escalate_to``, ``escalation_expires_after``);
a run may override it for every call it parks (``Agent.generate(..., deadline=...)``). When a call
parks, its ``Deadline`` is stored with it and its ``expires_at`` set. ``Runtime.expire_due`` (run
on a timer by whoever hosts the runtime) then decides overdue calls through the store's atomic
``decide`` step, like a reviewer would: exactly one of the reviewer and the expiry wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict

from pydantic import TypeAdapter

OnExpiry = Literal["decline", "approve", "escalate"]
ON_EXPIRY: tuple[OnExpiry, ...] = ("decline", "approve", "escalate")


@dataclass(frozen=True)
class Deadline:
    """How long a call may wait for a reviewer, and what happens then.

    ``on_expiry``: ``"decline"`` (the model is told nobody answered), ``"approve"`` (the tool runs)
    or ``"escalate"`` (the call moves to the reviewer group ``escalate_to``, with a new deadline of
    ``escalation_expires_after`` or none; when that one passes too, the call is declined).
    """

    expires_after: timedelta
    on_expiry: OnExpiry = "decline"
    escalate_to: str | None = None
    escalation_expires_after: timedelta | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.expires_after, timedelta) or self.expires_after <= timedelta(0):
            raise ValueError("expires_after must be a positive timedelta")
        if self.on_expiry not in ON_EXPIRY:
            raise ValueError(f"on_expiry must be one of {', '.join(map(repr, ON_EXPIRY))}")
        if (self.on_expiry == "escalate") != bool(self.escalate_to):
            raise ValueError('escalate_to (a group name) goes with on_expiry="escalate", and only with it')
        if self.escalate_to is not None and not isinstance(self.escalate_to, str):
            raise ValueError("escalate_to must be a group name")
        later = self.escalation_expires_after
        if later is not None and (self.on_expiry != "escalate" or not isinstance(later, timedelta)):
            raise ValueError('escalation_expires_after is a timedelta that goes with on_expiry="escalate"')
        if later is not None and later <= timedelta(0):
            raise ValueError("escalation_expires_after must be a positive timedelta")

    def expires_at(self, parked_at: datetime) -> datetime:
        return parked_at + self.expires_after


class DeadlineOptions(TypedDict, total=False):
    """The keyword arguments of ``tool()`` that give its calls a deadline (see ``Deadline``)."""

    expires_after: timedelta
    on_expiry: OnExpiry
    escalate_to: str
    escalation_expires_after: timedelta


def deadline_from(options: DeadlineOptions) -> Deadline | None:
    """The ``Deadline`` of ``tool(**options)``; None when it declares none (``ValueError`` if invalid)."""
    if not options:
        return None
    if "expires_after" not in options:
        raise ValueError(f"{', '.join(sorted(options))} need expires_after")
    return Deadline(**options)


def as_deadline(value: Deadline | timedelta | None) -> Deadline | None:
    """A run's override: a ``Deadline`` or just a ``timedelta`` (declined when it passes)."""
    if value is None or isinstance(value, Deadline):
        return value
    if isinstance(value, timedelta):
        return Deadline(value)
    raise TypeError("deadline must be a Deadline or a timedelta")


_DEADLINE: TypeAdapter[Deadline] = TypeAdapter(Deadline)


def to_json(deadline: Deadline | None) -> dict[str, Any] | None:
    return None if deadline is None else dict(_DEADLINE.dump_python(deadline, mode="json"))


def from_json(data: Any) -> Deadline | None:
    return None if data is None else _DEADLINE.validate_python(data)


def describe(duration: timedelta) -> str:
    """``timedelta(minutes=90)`` as "1 hour 30 minutes" (for the model and the audit log)."""
    seconds = round(duration.total_seconds())
    parts = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count != 1 else ''}")
    return " ".join(parts[:2]) or "less than a second"


def expiry_reason(waited: timedelta) -> str:
    """What the model is told when nobody answered."""
    return f"No reviewer answered within {describe(waited)}"
