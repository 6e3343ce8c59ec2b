"""What an agent's parts see of each other and of the runtime that hosts them.

``Host`` is the part of a ``Runtime`` an agent uses; ``RunAgent`` is the part of an ``Agent`` the run
loop, the decisions and the delegations use. Both are protocols, so those modules sit below
``agent`` and ``runtime`` in the import graph.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from ._pydantic import AgentSpec
from .deadlines import Deadline
from .events import Continuation, RunEvent
from .policy import Policy
from .store import RunStore, StoredRun
from .stream import Emit
from .tools import Tool
from .types import RunResult

#: Returns the continuation's result when it ran before returning, else None (it runs later).
Scheduler = Callable[[Continuation], Awaitable[RunResult | None] | RunResult | None]


class Host(Protocol):
    """The runtime an agent belongs to, as the agent uses it."""

    @property
    def storage(self) -> RunStore: ...

    @property
    def scheduler(self) -> Scheduler | None: ...

    @property
    def policy(self) -> Policy | None: ...

    def get_agent(self, agent_id: str) -> RunAgent: ...

    async def _publish(self, event: RunEvent) -> None: ...

    async def _schedule(self, continuation: Continuation) -> RunResult | None: ...


class RunAgent(AgentSpec, Protocol):
    """An agent as its runs, decisions and delegations use it (and the bridge reads it)."""

    @property
    def agents(self) -> Sequence[RunAgent]: ...

    @property
    def storage(self) -> RunStore: ...

    @property
    def memory_last_runs(self) -> int | None: ...

    @property
    def _runtime(self) -> Host | None: ...

    @property
    def _tools_by_name(self) -> Mapping[str, Tool]: ...

    def _find_tool(self, name: str) -> Tool | None: ...

    def _pydantic(self) -> Any: ...

    async def _store(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    async def _notify(self, type_: str, run_id: str, **details: Any) -> None: ...

    async def _start(
        self,
        run_id: str,
        prompt: str,
        thread_id: str | None,
        resource_id: str | None,
        parent_run_id: str | None,
        emit: Emit,
        deadline: Deadline | None = None,
        *,
        started_by: str | None = None,
    ) -> RunResult: ...

    async def _continue(
        self, run_id: str, version: int, emit: Emit, known: StoredRun | None = None
    ) -> RunResult: ...
