"""The run store: what the runtime persists while a run waits for a human.

A store keeps one record per suspended run: who owns it, where it belongs (thread, resource, parent
run), its parked tool calls with their decisions, and an opaque JSON snapshot the runtime continues
from. Every method is synchronous and atomic on its own; the runtime calls them off the event loop,
in a worker thread unless the store defines ``run_sync`` to say where (``SyncRunner``, ``call_store``).

Rules every store follows (``InMemoryRunStore`` in ``memory`` is the reference, ``DjangoRunStore``
the persistent one; ``tests/agents_runtime`` runs the same suite on both):

- ``status`` is ``"suspended"`` (waiting) or ``"running"`` (claimed by a continuation). ``version``
  grows on every change of status or calls, so compare-and-swap on it detects any concurrent change.
- A decision is recorded at most once per parked call. When the last undecided call of a run is
  decided, that same atomic step may claim the run (``status="running"``, new version, lease).
- A claim waits for its continuation without a lease (a queue may be long); the continuation takes
  the lease as it starts (``start_continuation``, once per claim). A lease lives for ``lease``;
  ``heartbeat`` renews it. A claim whose lease was not renewed in time is *reclaimed* before any
  read, decision or heartbeat (so a late heartbeat fails instead of reviving it), or by
  ``reclaim_expired``: the run is suspended again with ``interrupted=True``, its decisions move to
  ``history`` and its calls wait again. Inner runs still suspended under it get their decisions
  cleared the same way.
- Ended runs are deleted (``finish``) with their snapshot; what stays is the thread's messages and,
  in stores that keep one, a record of the run built from its ``RunEnding`` (the plain transcript).

The values a store keeps and hands back (``StoredRun``, ``ParkedCall``, ``Decision``, ...) are in
``records``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from .records import (
    DeadlineRule,
    Decision,
    DecisionReceipt,
    DecisionRule,
    RunEnding,
    RunQuery,
    StoredRun,
    Suspension,
)


@runtime_checkable
class RunStore(Protocol):
    """The storage the runtime needs. Implementations must be safe to share between threads."""

    lease: timedelta

    def insert_suspended(self, suspension: Suspension) -> StoredRun:
        """Store a run that suspended for the first time (``version`` 1, ``status`` suspended)."""
        ...

    def resuspend(self, suspension: Suspension, *, expected_version: int) -> StoredRun | None:
        """Replace a claimed run's calls and snapshot and suspend it again; ``None`` if the claim was lost."""
        ...

    def get_run(self, run_id: str, *, with_snapshot: bool = True) -> StoredRun | None:
        """The run with its snapshot, or ``None`` when it does not exist (any owner).

        ``with_snapshot=False``: without it (``snapshot`` is ``None``), for readers of the run's calls
        only; a snapshot holds the whole conversation and is most of what reading a run costs."""
        ...

    def list_suspended(self, query: RunQuery) -> tuple[list[StoredRun], int]:
        """Suspended runs matching ``query`` (without snapshots) and the count before paging."""
        ...

    def decide(
        self,
        *,
        agent_id: str,
        run_id: str,
        rule: DecisionRule,
        claim_when_complete: bool = True,
    ) -> DecisionReceipt:
        """Record the decision ``rule`` makes on one undecided call, atomically; claim the run when
        it was the last.

        ``rule`` sees the run as stored (with its snapshot) while no one else can change it; what it
        raises propagates and nothing is recorded. Then raises ``RunNotFound`` (no such run of
        ``agent_id``), ``ToolCallNotSuspended`` (no such call on it), ``RunAlreadyDecided`` (the call
        has a decision, or the run is being continued).
        """
        ...

    def record_decision(
        self,
        *,
        agent_id: str,
        run_id: str,
        tool_call_id: str,
        decision: Decision,
        claim_when_complete: bool = True,
    ) -> DecisionReceipt:
        """``decide`` with a fixed call and decision (stores that subclass the protocol inherit it)."""
        return self.decide(
            agent_id=agent_id,
            run_id=run_id,
            rule=lambda _run: (tool_call_id, decision),
            claim_when_complete=claim_when_complete,
        )

    def change_deadline(self, *, agent_id: str, run_id: str, rule: DeadlineRule) -> StoredRun:
        """Give one undecided call of a suspended run the new deadline (and group) ``rule`` returns,
        atomically (the run's version moves); errors as for ``decide``, nothing changes on one."""
        ...

    def due_calls(self, agent_id: str, before: datetime, *, limit: int) -> list[tuple[str, str]]:
        """``(run_id, tool_call_id)`` of undecided calls of ``agent_id``'s suspended runs (not
        sub-agents' inner runs) whose deadline is at or before ``before``, earliest first."""
        ...

    def claim(
        self,
        run_id: str,
        *,
        expected_version: int | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> StoredRun | None:
        """Record ``decisions`` on undecided calls and claim a suspended run, atomically.

        ``None`` when the run is gone, not suspended, or not at ``expected_version``.
        """
        ...

    def start_continuation(self, run_id: str, *, version: int) -> bool:
        """Take the lease of the claim at ``version`` as its continuation starts: once, so a second
        continuation of the same claim (a repeated task) gets False, as does one whose claim was lost.

        A claim (``decide``'s or ``claim``'s) has no lease while its continuation waits in a queue:
        however long the queue, a claim nobody started is never reclaimed. Only a started
        continuation can lose it, by not renewing it (``heartbeat``).
        """
        ...

    def reclaim_expired(self) -> list[tuple[str, str]]:
        """Reclaim now every claim whose lease ran out (its continuation stopped: its process died)
        rather than at the next read; ``(agent_id, run_id)`` of each run parked again."""
        ...

    def mark_tool_started(self, run_id: str, tool_call_id: str, *, version: int) -> bool:
        """Record, durably, that the claimed run at ``version`` is about to run this call's tool.

        Written before the tool is called, so a continuation that dies afterwards leaves the call
        marked: it is offered again as "interrupted after the tool started". False when the claim
        was lost (then the tool must not run).
        """
        ...

    def heartbeat(self, run_id: str, *, version: int) -> bool:
        """Renew a claim; False when it was lost (a claim whose lease already ran out counts as lost)."""
        ...

    def finish(
        self,
        run_id: str,
        *,
        version: int,
        thread_messages: Sequence[Any] = (),
        ending: RunEnding | None = None,
    ) -> bool:
        """Delete an ended run that this claim holds; False when the claim was lost.

        ``thread_messages`` (the run's new JSON messages) are appended to the run's thread memory in
        the same step, so a run never ends without its exchange being remembered, nor twice.
        ``ending`` says how it ended, for stores that record their decisions' outcomes or keep a
        record of ended runs (its ``transcript``).
        """
        ...

    def append_thread_messages(self, agent_id: str, thread_id: str, messages: Sequence[Any]) -> None:
        """Append an ended run's new messages (JSON) to the agent's thread memory."""
        ...

    def count_calls(self, agent_id: str, calls: Mapping[str, int], *, at: datetime) -> None:
        """Count the tool calls (per tool) of a run that ended ``at`` without ever parking, which
        ``finish`` never sees: for stores that count the calls agents make. Stores that subclass the
        protocol inherit this, which keeps nothing."""
        return None

    def thread_messages(self, agent_id: str, thread_id: str, *, last_runs: int | None = None) -> list[Any]:
        """The agent's thread memory, oldest first (JSON messages): every ended run's messages, or
        only those of the latest ``last_runs`` runs, read without reading the older ones."""
        ...


# -- how the runtime calls a store ------------------------------------------------------------------
# Store methods are synchronous and may block (a database), so they never run on the event loop. By
# default each call runs in a worker thread (``asyncio.to_thread``). A store whose methods must run on
# a particular thread says so by defining ``run_sync`` (``SyncRunner``): the Django store runs them on
# the thread that holds the caller's database connection, so a request never needs a second one.


@runtime_checkable
class SyncRunner(Protocol):
    """Optional for a ``RunStore``: runs one of its synchronous methods for async callers."""

    async def run_sync[T](self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` run off the event loop where this store wants it; its result."""
        ...


async def call_store[**P, T](store: object, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` (a method of ``store``) run off the event loop, where ``store`` says."""
    if isinstance(store, SyncRunner):
        return await store.run_sync(fn, *args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)
