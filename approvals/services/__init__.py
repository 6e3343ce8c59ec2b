"""State changes: decisions on parked tool calls through the one door (``decisions``), bulk decisions
(``batches``), claims, grants, deadlines and new runs (``runs``).

Views, consumers and commands call these; none of them talks to the runtime's write methods
directly. Every function takes the acting user's rights as the request resolved them once
(``approvals.policy.Access`` / ``AgentAccess``, from the login, never from a form).
"""

from approvals.policy import AUDIT_PERMISSION, DECIDE_PERMISSION, Access, AgentAccess
from approvals.services.batches import (
    batch_counts,
    batch_predictions,
    batch_prepare,
    batch_run,
    batch_start,
)
from approvals.services.claims import ClaimRefused, claim_call, claim_warning, release_claim
from approvals.services.decisions import (
    DecisionOutcome,
    adecide,
    attempt_invalid_record,
    commit_held,
    decide,
    recorded_outcome,
)
from approvals.services.grants import GrantTerms, approve_and_allow
from approvals.services.holds import Undo, hold_undo
from approvals.services.runs import run_start

__all__ = [
    "AUDIT_PERMISSION",
    "DECIDE_PERMISSION",
    "Access",
    "AgentAccess",
    "ClaimRefused",
    "DecisionOutcome",
    "GrantTerms",
    "Undo",
    "adecide",
    "approve_and_allow",
    "attempt_invalid_record",
    "batch_counts",
    "batch_predictions",
    "batch_prepare",
    "batch_run",
    "batch_start",
    "claim_call",
    "claim_warning",
    "commit_held",
    "decide",
    "hold_undo",
    "recorded_outcome",
    "release_claim",
    "run_start",
]
