"""Countersign's agent runtime: Mastra's human-in-the-loop API in Python, on pydantic-ai.

Pure Python: never imports Django. See ``Agent`` for runs and decisions, ``Runtime`` for storage.
"""

from .agent import Agent
from .conditions import Condition, InvalidCondition, Verdict
from .errors import (
    AgentsRuntimeError,
    DecisionRefused,
    DuplicateVote,
    InvalidPagination,
    InvalidResumeData,
    InvalidToolArgs,
    RerunNotConfirmed,
    RunAlreadyDecided,
    RunNotFound,
    SelfApprovalRefused,
    ToolCallNotSuspended,
)
from .events import Continuation, RunEvent
from .grants import Grant, GrantNotFound, GrantRequest, GrantScope, GrantUnavailable, InvalidGrant
from .runtime import Runtime
from .scripted import Call, Reply, ScriptContext, scripted_model
from .store import InMemoryRunStore, RunStore
from .stream import RunStream
from .tools import Tool, ToolContext, tool
from .types import AgentRun, AgentRunToolCall, ApprovalTally, Chunk, ListSuspendedRunsResult, RunResult

__all__ = [
    "Agent",
    "AgentRun",
    "AgentRunToolCall",
    "AgentsRuntimeError",
    "ApprovalTally",
    "Call",
    "Chunk",
    "Condition",
    "Continuation",
    "DecisionRefused",
    "DuplicateVote",
    "Grant",
    "GrantNotFound",
    "GrantRequest",
    "GrantScope",
    "GrantUnavailable",
    "InMemoryRunStore",
    "InvalidCondition",
    "InvalidGrant",
    "InvalidPagination",
    "InvalidResumeData",
    "InvalidToolArgs",
    "ListSuspendedRunsResult",
    "Reply",
    "RerunNotConfirmed",
    "RunAlreadyDecided",
    "RunEvent",
    "RunNotFound",
    "RunResult",
    "RunStore",
    "RunStream",
    "Runtime",
    "ScriptContext",
    "SelfApprovalRefused",
    "Tool",
    "ToolCallNotSuspended",
    "ToolContext",
    "Verdict",
    "scripted_model",
    "tool",
]
