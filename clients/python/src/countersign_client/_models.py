"""The approval request as the server describes it (``/api/v1/approval-requests``), typed."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._errors import ApprovalCancelled, ApprovalDeclined, ApprovalExpired, NotApproved


class Status(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DECLINED = "declined"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class _Model(BaseModel):
    # The server may add fields; an older client keeps working.
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class Deadline(_Model):
    """When nobody decides: ``at`` a time, or ``in_seconds`` from the request, the ``default`` happens."""

    at: datetime | None = None
    in_seconds: int | None = Field(default=None, alias="inSeconds")
    default: Literal["decline", "approve"] = "decline"


class Result(_Model):
    """What the caller reported after running the approved call."""

    ok: bool
    output: str = ""
    reported_at: datetime | None = Field(default=None, alias="reportedAt")


class ApprovalRequest(_Model):
    """One request for a human's decision, and (once taken) the decision."""

    id: str
    status: Status
    agent: str
    tool: str
    args: dict[str, Any]
    title: str | None = None
    thread_id: str | None = Field(default=None, alias="threadId")
    resource_id: str | None = Field(default=None, alias="resourceId")
    url: str | None = None
    created_at: datetime | None = Field(default=None, alias="createdAt")
    deadline: Deadline | None = None
    approved_args: dict[str, Any] | None = Field(default=None, alias="approvedArgs")
    edited: bool = False
    reason: str | None = None
    decided_by: str | None = Field(default=None, alias="decidedBy")
    decided_at: datetime | None = Field(default=None, alias="decidedAt")
    result: Result | None = None

    @property
    def decided(self) -> bool:
        return self.status != Status.PENDING

    @property
    def approved(self) -> bool:
        return self.status == Status.APPROVED

    def args_to_run(self) -> dict[str, Any]:
        """The arguments the approved call runs with (a reviewer's edits included), or ``NotApproved``
        (declined, expired, cancelled) carrying the reason. Pending is a programming error."""
        if self.status == Status.PENDING:
            raise ValueError(f"approval request {self.id} is still pending")
        if self.status != Status.APPROVED:
            raise not_approved(self)
        return dict(self.approved_args if self.approved_args is not None else self.args)


def not_approved(request: ApprovalRequest) -> NotApproved:
    kinds: dict[Status, type[NotApproved]] = {
        Status.DECLINED: ApprovalDeclined,
        Status.EXPIRED: ApprovalExpired,
        Status.CANCELLED: ApprovalCancelled,
    }
    return kinds.get(request.status, NotApproved)(request)


class Decision:
    """What a reviewer (or a deadline, or a standing grant) decided about one request.

    ``approved`` and ``args`` (to run: the reviewer's edits included) are what a caller acts on;
    ``request`` is the whole record.
    """

    __slots__ = ("request",)

    def __init__(self, request: ApprovalRequest) -> None:
        if not request.decided:
            raise ValueError(f"approval request {request.id} is still pending")
        self.request = request

    def __repr__(self) -> str:
        return f"<Decision {self.request.id} {self.status.value}>"

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def status(self) -> Status:
        return self.request.status

    @property
    def approved(self) -> bool:
        return self.request.approved

    @property
    def args(self) -> dict[str, Any]:
        """The arguments to run with; ``NotApproved`` (with the reason) unless approved."""
        return self.request.args_to_run()

    @property
    def edited(self) -> bool:
        return self.request.edited

    @property
    def reason(self) -> str | None:
        return self.request.reason

    @property
    def decided_by(self) -> str | None:
        return self.request.decided_by

    @property
    def decided_at(self) -> datetime | None:
        return self.request.decided_at

    def raise_unless_approved(self) -> None:
        """``ApprovalDeclined``, ``ApprovalExpired`` or ``ApprovalCancelled``, carrying the reason."""
        if not self.approved:
            raise not_approved(self.request)
