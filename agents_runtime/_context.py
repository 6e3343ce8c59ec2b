"""What an agent's engine parts work with: one frozen ``AgentContext``, built by ``Agent``.

The parts (``_loop``, ``_parking``, ``_decisions``, ``_grants``, ``_deadlines``) take it as their
first argument and reach the store, the runtime's listeners and scheduler, the host's policy, the
agent's tools and its sub-agents through it alone: calls run one way, from the agent through its
parts to the store, and no part imports ``agent`` or ``runtime`` (an import-linter contract).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .events import Continuation, RunEvent, RunEventType
from .policy import Policy
from .store import RunResult, RunStore, call_store
from .tools import Tool

#: Tells the runtime's listeners about a stored change.
Publish = Callable[[RunEvent], Awaitable[None]]
#: Hands a claimed run to the runtime's scheduler; its result when it ran before returning.
Schedule = Callable[[Continuation], Awaitable[RunResult | None]]


@dataclass(frozen=True)
class AgentContext:
    """One agent as its engine parts see it (its runtime's store, listeners, scheduler and policy)."""

    agent_id: str
    store: RunStore
    #: The agent's own tools by name (a sub-agent's are found with ``find_tool``).
    tools: Mapping[str, Tool]
    #: The tool a call of this agent's runs names: its own, or a sub-agent's.
    find_tool: Callable[[str], Tool | None]
    #: The context of a sub-agent (or of another agent of the runtime) by id; ``KeyError`` if none.
    agent: Callable[[str], AgentContext]
    #: The pydantic-ai agent that runs this agent's model and tools (built on first use).
    pydantic_agent: Callable[[], Any]
    memory_last_runs: int | None
    clock: Callable[[], datetime]
    #: None without a runtime: nobody listens.
    publish: Publish | None = None
    #: None: a run whose decisions are all in continues in this process, as the decider's stream.
    schedule: Schedule | None = None
    #: The host's rules, checked first inside every decision's atomic step.
    policy: Policy | None = None

    async def call[T](self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, a method of a store, run off the event loop where its store says."""
        return await call_store(getattr(fn, "__self__", self.store), fn, *args, **kwargs)

    async def notify(self, type_: RunEventType, run_id: str, **details: Any) -> None:
        """Tell the runtime's listeners about a stored change of one of this agent's runs."""
        if self.publish is not None:
            await self.publish(RunEvent(type=type_, agent_id=self.agent_id, run_id=run_id, **details))
