"""State changes: decisions on parked tool calls (``decisions``) and new runs (``runs``).

Views, consumers and commands call these; none of them talks to the runtime's write methods
directly. Every function takes the acting user (from the login, never from a form) and checks the
user's rights (``approvals.access``) before it acts.
"""

from approvals.access import AUDIT_PERMISSION, DECIDE_PERMISSION, require_agent_access, require_permission
from approvals.services.decisions import decision_approve, decision_decline, decision_resume
from approvals.services.outcomes import DecisionOutcome
from approvals.services.runs import run_start

__all__ = [
    "AUDIT_PERMISSION",
    "DECIDE_PERMISSION",
    "DecisionOutcome",
    "decision_approve",
    "decision_decline",
    "decision_resume",
    "require_agent_access",
    "require_permission",
    "run_start",
]
