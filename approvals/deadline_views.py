"""What a card shows of a call's deadline: when, how long is left (server time), what happens then."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.urls import reverse

from agents_runtime import AgentRunToolCall

#: A call due within this many seconds stands out (the card and the inbox row).
DUE_SOON_SECONDS = 300

_THEN = {"decline": "it is declined", "approve": "it is approved", "escalate": "it is escalated"}


@dataclass(frozen=True)
class DeadlineView:
    #: None on a call escalated without a second deadline (it waits for its new group).
    expires_at: datetime | None
    #: As the server counts it when the page is rendered: the page counts down from this, so the
    #: browser's clock never matters.
    remaining_seconds: int
    on_expiry: str
    escalated_to: str
    extend_url: str

    @property
    def due_soon(self) -> bool:
        return self.expires_at is not None and self.remaining_seconds < DUE_SOON_SECONDS

    @property
    def remaining_text(self) -> str:
        """The same words as the countdown in time.js."""
        return remaining_text(self.remaining_seconds)

    @property
    def then_text(self) -> str:
        if self.escalated_to or self.on_expiry not in _THEN:
            # An escalated call's second deadline declines it.
            return _THEN["decline"]
        return _THEN[self.on_expiry]


def remaining_text(seconds: int) -> str:
    if seconds <= 0:
        return "due now"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min left"
    if minutes:
        return f"{minutes} min {secs} s left"
    return f"{secs} s left"


def deadline_view(call: AgentRunToolCall, run_id: str, now: datetime | None = None) -> DeadlineView | None:
    if call.expires_at is None and not call.escalated_to:
        return None
    left = 0.0 if call.expires_at is None else (call.expires_at - (now or datetime.now(UTC))).total_seconds()
    return DeadlineView(
        expires_at=call.expires_at,
        remaining_seconds=max(0, int(left)),
        on_expiry=call.on_expiry or "decline",
        escalated_to=call.escalated_to or "",
        extend_url=reverse("approvals:extend_deadline", args=[run_id, call.tool_call_id]),
    )
