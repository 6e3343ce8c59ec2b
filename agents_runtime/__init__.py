"""Countersign's agent runtime: Mastra's human-in-the-loop API in Python, on pydantic-ai.

Pure Python: never imports Django. See ``Agent`` for runs and decisions, ``Runtime`` for storage.
"""

from ._loop import Decided, RunStream
from .agent import Agent, Runtime
from .conditions import Condition, ConditionVerdict, InvalidCondition
from .errors import (
    AgentsRuntimeError,
    ApprovalsNotGiven,
    ArgumentsChanged,
    CallClaimed,
    DecisionRefused,
    DuplicateVote,
    InvalidPagination,
    InvalidResumeData,
    InvalidToolArgs,
    NotADecider,
    NotTheRequester,
    RerunNotConfirmed,
    RiskyNotConfirmed,
    RunAlreadyDecided,
    RunNotFound,
    RunUnreadable,
    SelfApprovalRefused,
    ToolCallNotSuspended,
)
from .events import Continuation, RunEvent
from .external import ExternalAgent, ExternalCall, ExternalTool, InvalidExternalCall, ToolRules
from .grants import Grant, GrantNotFound, GrantRequest, GrantScope, GrantUnavailable, InvalidGrant
from .memory import InMemoryRunStore
from .policy import (
    Confirmation,
    DecisionRequest,
    Origin,
    Policy,
    Would,
    fingerprint,
    needs_confirmation,
    shown,
)
from .previews import Change, Preview
from .routing import InvalidRule, Route, Rule, RuleNotFound, RuleRequest, RuleStore
from .scripted import Call, Reply, ScriptContext, scripted_model
from .store import (
    AgentRun,
    AgentRunToolCall,
    ApprovalTally,
    Chunk,
    ListSuspendedRunsResult,
    RunResult,
    RunStore,
    agent_run,
)
from .tools import Tool, ToolContext, tool

__all__ = [
    "Agent",
    "AgentRun",
    "AgentRunToolCall",
    "AgentsRuntimeError",
    "ApprovalTally",
    "ApprovalsNotGiven",
    "ArgumentsChanged",
    "Call",
    "CallClaimed",
    "Change",
    "Chunk",
    "Condition",
    "ConditionVerdict",
    "Confirmation",
    "Continuation",
    "Decided",
    "DecisionRefused",
    "DecisionRequest",
    "DuplicateVote",
    "ExternalAgent",
    "ExternalCall",
    "ExternalTool",
    "Grant",
    "GrantNotFound",
    "GrantRequest",
    "GrantScope",
    "GrantUnavailable",
    "InMemoryRunStore",
    "InvalidCondition",
    "InvalidExternalCall",
    "InvalidGrant",
    "InvalidPagination",
    "InvalidResumeData",
    "InvalidRule",
    "InvalidToolArgs",
    "ListSuspendedRunsResult",
    "NotADecider",
    "NotTheRequester",
    "Origin",
    "Policy",
    "Preview",
    "Reply",
    "RerunNotConfirmed",
    "RiskyNotConfirmed",
    "Route",
    "Rule",
    "RuleNotFound",
    "RuleRequest",
    "RuleStore",
    "RunAlreadyDecided",
    "RunEvent",
    "RunNotFound",
    "RunResult",
    "RunStore",
    "RunStream",
    "RunUnreadable",
    "Runtime",
    "ScriptContext",
    "SelfApprovalRefused",
    "Tool",
    "ToolCallNotSuspended",
    "ToolContext",
    "ToolRules",
    "Would",
    "agent_run",
    "fingerprint",
    "needs_confirmation",
    "scripted_model",
    "shown",
    "tool",
]
