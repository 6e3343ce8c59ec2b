"""The run store: what the runtime persists while a run waits for a human.

A store keeps one record per suspended run: who owns it, where it belongs (thread, resource, parent
run), its parked tool calls with their decisions, and an opaque JSON snapshot the runtime continues
from. Every method is synchronous and atomic on its own; the runtime calls them off the event loop,
in a worker thread unless the store defines ``run_sync`` to say where (``store_calls.SyncRunner``).

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

The records live in ``records``, the protocol in ``_runstore``; every name stays importable from here.
"""

from __future__ import annotations

from ._runstore import RunStore
from .memory import InMemoryRunStore
from .records import (
    DEFAULT_LEASE,
    DeadlineChange,
    DeadlineRule,
    Decision,
    DecisionReceipt,
    DecisionRule,
    Delegation,
    ParkedCall,
    RunEnding,
    RunQuery,
    RunState,
    StoredRun,
    Suspension,
    Vote,
    decision_conflict,
    reclaimed_calls,
)
from .vocabulary import CallKind, DecisionAction

__all__ = [
    "DEFAULT_LEASE",
    "CallKind",
    "DeadlineChange",
    "DeadlineRule",
    "Decision",
    "DecisionAction",
    "DecisionReceipt",
    "DecisionRule",
    "Delegation",
    "InMemoryRunStore",
    "ParkedCall",
    "RunEnding",
    "RunQuery",
    "RunState",
    "RunStore",
    "StoredRun",
    "Suspension",
    "Vote",
    "decision_conflict",
    "reclaimed_calls",
]
