"""What can go wrong when asking Countersign: the server's refusals, and a decision that is not a yes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._models import ApprovalRequest


class CountersignError(Exception):
    """Anything this client raises."""


class ApiError(CountersignError):
    """The server refused a request: its HTTP status, its ``code`` (stable, to branch on) and message.

    ``issues`` names the fields at fault (``[{"field": ..., "message": ...}]``) when the server says.
    """

    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        *,
        issues: list[dict[str, Any]] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.message = message
        self.code = code
        self.issues = issues or []
        self.retry_after = retry_after


class DecisionTimeout(CountersignError):
    """Nobody decided within the time given. The request still waits: wait again with its ``id``."""

    def __init__(self, request: ApprovalRequest, waited: float) -> None:
        super().__init__(f"approval request {request.id} is still pending after {waited:.0f} s")
        self.request = request


class NotApproved(CountersignError):
    """The call was not approved: declined, expired or cancelled. ``reason`` says why, when given."""

    def __init__(self, request: ApprovalRequest) -> None:
        self.request = request
        self.reason = request.reason
        who = f" by {request.decided_by}" if request.decided_by else ""
        why = f": {request.reason}" if request.reason else ""
        super().__init__(f"{request.tool} was {request.status}{who}{why}")


class ApprovalDeclined(NotApproved):
    """A reviewer declined the call."""


class ApprovalExpired(NotApproved):
    """The call's deadline passed and its default action was to decline."""


class ApprovalCancelled(NotApproved):
    """The request was cancelled (by the caller) before anyone decided."""
