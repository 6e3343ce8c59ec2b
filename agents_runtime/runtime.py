"""``Runtime``: the registry of agents that owns their storage (Mastra's ``Mastra`` instance)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime

from .agent import Agent
from .events import Continuation, RunEvent
from .memory import InMemoryRunStore
from .policy import Policy
from .store import RunResult, RunStore, call_store

logger = logging.getLogger("agents_runtime")

Listener = Callable[[RunEvent], Awaitable[None] | None]
#: Returns the continuation's result when it ran before returning, else None (it runs later).
Scheduler = Callable[[Continuation], Awaitable[RunResult | None] | RunResult | None]
__all__ = ["Listener", "Runtime", "Scheduler"]


class Runtime:
    """Agents and the store they share. Sub-agents are registered with their supervisors."""

    def __init__(
        self,
        agents: Iterable[Agent] = (),
        storage: RunStore | None = None,
        *,
        scheduler: Scheduler | None = None,
        policy: Policy | None = None,
    ) -> None:
        self._storage: RunStore | None = storage
        self._scheduler: Scheduler | None = scheduler
        self._policy: Policy | None = policy
        self._agents: dict[str, Agent] = {}
        self._listeners: list[Listener] = []
        for agent in agents:
            self._register(agent)

    @property
    def storage(self) -> RunStore:
        """The store every agent of this runtime keeps its runs in.

        A runtime built without one gets an ``InMemoryRunStore`` when it is first needed; an
        application may give it another before that (``has_storage`` tells whether one was given).
        """
        if self._storage is None:
            self._storage = InMemoryRunStore()
        return self._storage

    @storage.setter
    def storage(self, store: RunStore) -> None:
        self._storage = store
        self._rewire()

    @property
    def scheduler(self) -> Scheduler | None:
        """When set, a decision that completes a run's decisions hands the continuation to it (e.g. a
        task queue) instead of continuing in this process; see ``Agent.continue_run``."""
        return self._scheduler

    @scheduler.setter
    def scheduler(self, scheduler: Scheduler | None) -> None:
        self._scheduler = scheduler
        self._rewire()

    @property
    def policy(self) -> Policy | None:
        """The host's rules, checked first inside every decision's atomic step (``agents_runtime.policy``)."""
        return self._policy

    @policy.setter
    def policy(self, policy: Policy | None) -> None:
        self._policy = policy
        self._rewire()

    @property
    def has_storage(self) -> bool:
        """Whether a store was given (or the in-memory default already taken)."""
        return self._storage is not None

    def _register(self, agent: Agent) -> None:
        existing = self._agents.get(agent.id)
        if existing is agent:
            return
        if existing is not None:
            raise ValueError(f"Two different agents share the id {agent.id!r}")
        agent._join(self)
        self._agents[agent.id] = agent
        for sub in agent.agents:
            self._register(sub)

    def add_agent(self, agent: Agent) -> None:
        """Serve ``agent`` from now on, beside those it was built with (an agent registered while the
        host runs: an external agent); ``ValueError`` if another agent has its id."""
        self._register(agent)

    @property
    def agents(self) -> list[Agent]:
        """Every registered agent, sub-agents included, in registration order."""
        return list(self._agents.values())

    def get_agent(self, agent_id: str) -> Agent:
        """The agent with this id; ``KeyError`` when there is none."""
        try:
            return self._agents[agent_id]
        except KeyError:
            raise KeyError(f"No agent {agent_id!r} in this runtime") from None

    async def reclaim_stopped(self) -> int:
        """Park again every run whose continuation stopped (its lease ran out: its process died), and
        announce each (``run-suspended``: it waits for a decision again), so it shows as stopped
        without anyone reading it first. Whoever hosts the runtime calls it on a timer (the Django
        app: ``approvals.tasks``). How many runs it parked again."""
        store = self.storage
        reclaimed = await call_store(store, store.reclaim_expired)
        for agent_id, run_id in reclaimed:
            await self.publish(RunEvent(type="run-suspended", agent_id=agent_id, run_id=run_id))
        return len(reclaimed)

    async def expire_due(self, now: datetime | None = None) -> int:
        """Expire (or escalate) every parked call of every agent whose deadline passed by ``now``.

        Whoever hosts the runtime calls it on a timer (the Django app: ``approvals.tasks``); a
        call a reviewer decides at the same moment is decided once, by whichever comes first.
        How many calls expired or escalated.
        """
        at = now or datetime.now(UTC)
        done = 0
        for agent in self.agents:
            done += await agent.expire_overdue(at)
        return done

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` (sync or async) after every stored change of a run."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def _rewire(self) -> None:
        # The agents' engine parts work with a frozen context: they get a new one on next use.
        for agent in self._agents.values():
            agent._join(self)

    async def schedule(self, continuation: Continuation) -> RunResult | None:
        """Hand a continuation to the scheduler; its result if it already ran (e.g. immediately)."""
        if self._scheduler is None:
            raise RuntimeError("This runtime has no scheduler")
        outcome = self._scheduler(continuation)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        return outcome if isinstance(outcome, RunResult) else None

    async def publish(self, event: RunEvent) -> None:
        """Tell every listener about ``event``; a listener that fails is logged, never raised."""
        for listener in list(self._listeners):
            try:
                outcome = listener(event)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                # A broken listener must not break the run it reports on.
                logger.exception("Run event listener failed on %s", event)
