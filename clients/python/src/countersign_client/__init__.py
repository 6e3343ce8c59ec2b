"""Ask a human through Countersign before an agent acts.

``Countersign`` / ``AsyncCountersign`` speak ``/api/v1/approval-requests``; ``requires_approval``
puts a function behind a reviewer; ``countersign_client.pydantic_ai`` answers pydantic-ai's deferred
tool requests (install the ``pydantic-ai`` extra).
"""

from ._client import LONGEST_POLL, AsyncCountersign, Countersign
from ._errors import (
    ApiError,
    ApprovalCancelled,
    ApprovalDeclined,
    ApprovalExpired,
    CountersignError,
    DecisionTimeout,
    NotApproved,
)
from ._gate import requires_approval
from ._models import ApprovalRequest, Deadline, Decision, Result, Status

__all__ = [
    "LONGEST_POLL",
    "ApiError",
    "ApprovalCancelled",
    "ApprovalDeclined",
    "ApprovalExpired",
    "ApprovalRequest",
    "AsyncCountersign",
    "Countersign",
    "CountersignError",
    "Deadline",
    "Decision",
    "DecisionTimeout",
    "NotApproved",
    "Result",
    "Status",
    "requires_approval",
]
__version__ = "0.1.0"
