"""The run store: what the runtime persists while a run waits for a human.

A store keeps one record per suspended run: who owns it, where it belongs (thread, resource, parent
run), its parked tool calls with their decisions, and an opaque JSON snapshot the runtime continues
from. Every method is synchronous and atomic on its own; the runtime calls them off the event loop,
in a worker thread unless the store defines ``run_sync`` to say where (``store_calls.SyncRunner``).

Rules every store follows (the in-memory store below is the reference, ``DjangoRunStore`` the
persistent one; ``tests/agents_runtime`` runs the same suite on both):

- ``status`` is ``"suspended"`` (waiting) or ``"running"`` (claimed by a continuation). ``version``
  grows on every change of status or calls, so compare-and-swap on it detects any concurrent change.
- A decision is recorded at most once per parked call. When the last undecided call of a run is
  decided, that same atomic step may claim the run (``status="running"``, new version, lease).
- A claim lives for ``lease``; ``heartbeat`` renews it. A claim that was not renewed in time is
  *reclaimed* before any read, decision or heartbeat (so a late heartbeat fails instead of reviving
  it): the run is suspended again with ``interrupted=True``, its decisions move to ``history`` and
  its calls wait again. Inner runs still suspended under it get their decisions cleared the same way.
- Ended runs are deleted (``finish``); nothing of them stays but the thread's messages.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from .errors import RunAlreadyDecided, RunNotFound, ToolCallNotSuspended

CallKind = Literal["approval", "suspend"]
DecisionAction = Literal["approve", "decline", "resume"]
RunState = Literal["suspended", "running"]
DEFAULT_LEASE = timedelta(minutes=5)


@dataclass(frozen=True)
class Decision:
    action: DecisionAction
    decided_at: datetime
    actor: str | None = None
    reason: str | None = None
    #: Validated resume data in JSON form (``action == "resume"``).
    resume_data: Any = None
    #: An approval with edited arguments: the validated arguments the tool runs with instead.
    edited_args: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "decided_at": self.decided_at.isoformat(),
            "actor": self.actor,
            "reason": self.reason,
            "resume_data": self.resume_data,
            "edited_args": self.edited_args,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        return cls(
            action=data["action"],
            decided_at=datetime.fromisoformat(data["decided_at"]),
            actor=data.get("actor"),
            reason=data.get("reason"),
            resume_data=data.get("resume_data"),
            edited_args=data.get("edited_args"),
        )


@dataclass(frozen=True)
class Delegation:
    """Where a supervisor's parked call really lives: a call of a sub-agent's inner run."""

    #: The supervisor's own tool call (``agent_<id>``) that the inner run hangs under.
    tool_call_id: str
    inner_run_id: str
    inner_tool_call_id: str


@dataclass(frozen=True)
class ParkedCall:
    """One tool call a run waits on, as listed and decided on that run."""

    tool_call_id: str
    tool_name: str
    kind: CallKind
    args: dict[str, Any] | None = None
    suspend_payload: Any = None
    suspend_schema: dict[str, Any] | None = None
    resume_schema: dict[str, Any] | None = None
    #: Set on a supervisor's mirror of a sub-agent's call.
    delegation: Delegation | None = None
    decision: Decision | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "kind": self.kind,
            "args": self.args,
            "suspend_payload": self.suspend_payload,
            "suspend_schema": self.suspend_schema,
            "resume_schema": self.resume_schema,
            "delegation": None
            if self.delegation is None
            else {
                "tool_call_id": self.delegation.tool_call_id,
                "inner_run_id": self.delegation.inner_run_id,
                "inner_tool_call_id": self.delegation.inner_tool_call_id,
            },
            "decision": None if self.decision is None else self.decision.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ParkedCall:
        delegation = data.get("delegation")
        decision = data.get("decision")
        return cls(
            tool_call_id=data["tool_call_id"],
            tool_name=data["tool_name"],
            kind=data["kind"],
            args=data.get("args"),
            suspend_payload=data.get("suspend_payload"),
            suspend_schema=data.get("suspend_schema"),
            resume_schema=data.get("resume_schema"),
            delegation=None if delegation is None else Delegation(**delegation),
            decision=None if decision is None else Decision.from_json(decision),
        )


@dataclass(frozen=True)
class Suspension:
    """What the runtime writes when a run (first or again) waits for a human."""

    run_id: str
    agent_id: str
    thread_id: str | None
    resource_id: str | None
    parent_run_id: str | None
    created_at: datetime
    suspended_at: datetime
    calls: tuple[ParkedCall, ...]
    #: Opaque, JSON-compatible: the runtime's continuation state.
    snapshot: dict[str, Any]


@dataclass(frozen=True)
class StoredRun:
    run_id: str
    agent_id: str
    thread_id: str | None
    resource_id: str | None
    parent_run_id: str | None
    created_at: datetime
    suspended_at: datetime
    status: RunState
    version: int
    interrupted: bool
    calls: tuple[ParkedCall, ...]
    #: None in listings (never loaded for them).
    snapshot: dict[str, Any] | None = None
    #: Decisions overturned by an interrupted continuation, kept for the record (JSON dicts).
    history: tuple[dict[str, Any], ...] = ()

    @property
    def undecided(self) -> tuple[ParkedCall, ...]:
        return tuple(c for c in self.calls if c.decision is None)


@dataclass(frozen=True)
class RunQuery:
    """A listing: filters, order and page, all evaluated inside the store."""

    agent_id: str
    thread_id: str | None = None
    resource_id: str | None = None
    #: Inclusive bounds on ``created_at`` (aware datetimes).
    created_from: datetime | None = None
    created_to: datetime | None = None
    #: Only runs with an undecided call of this tool name.
    tool_name: str | None = None
    #: Only runs with an undecided call of this kind.
    kind: CallKind | None = None
    #: Default: most recently suspended first, ties by ``run_id`` ascending.
    oldest_first: bool = False
    limit: int | None = None
    offset: int = 0


@dataclass(frozen=True)
class RunEnding:
    """How a claimed run ended, handed to ``finish`` so a store that keeps a record of its
    decisions (the Django store's audit log) settles them in the same step as the run ends."""

    status: Literal["completed", "failed"]
    #: The final answer (``completed``) or the error (``failed``).
    detail: str = ""


@dataclass(frozen=True)
class DecisionReceipt:
    #: The run after the decision, with its snapshot.
    run: StoredRun
    #: The call that was decided, with its decision.
    call: ParkedCall
    #: Set when this decision was the last one and claimed the run: the version to continue with.
    claimed_version: int | None


#: Picks the call to decide on a run and builds its decision, or raises to refuse (nothing changes).
#: Stores call it with the run locked, so what it checks still holds when the decision is written.
DecisionRule = Callable[[StoredRun], tuple[str, Decision]]


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

    def get_run(self, run_id: str) -> StoredRun | None:
        """The run with its snapshot, or ``None`` when it does not exist (any owner)."""
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
        ``ending`` says how it ended, for stores that record their decisions' outcomes.
        """
        ...

    def append_thread_messages(self, agent_id: str, thread_id: str, messages: Sequence[Any]) -> None:
        """Append an ended run's new messages (JSON) to the agent's thread memory."""
        ...

    def thread_messages(self, agent_id: str, thread_id: str) -> list[Any]:
        """The agent's thread memory, oldest first (JSON messages)."""
        ...


def _now() -> datetime:
    return datetime.now(UTC)


def decision_conflict(run: StoredRun, call: ParkedCall | None, tool_call_id: str) -> Exception:
    """The error for a decision that cannot be recorded on ``run`` (shared by every store)."""
    if call is None:
        return ToolCallNotSuspended(
            f"Tool call {tool_call_id!r} is not suspended on run {run.run_id!r}",
            run_id=run.run_id,
            tool_call_id=tool_call_id,
        )
    if call.decision is not None:
        return RunAlreadyDecided(
            run_id=run.run_id,
            tool_call_id=tool_call_id,
            decided_by=call.decision.actor,
            decided_at=call.decision.decided_at,
        )
    return RunAlreadyDecided(run_id=run.run_id, tool_call_id=tool_call_id)


def reclaimed_calls(
    calls: Sequence[ParkedCall], history: Sequence[dict[str, Any]]
) -> tuple[tuple[ParkedCall, ...], tuple[dict[str, Any], ...]]:
    """Calls parked again with their decisions moved to the history (interrupted continuation)."""
    overturned = [
        {"tool_call_id": c.tool_call_id, "tool_name": c.tool_name, **c.decision.to_json()}
        for c in calls
        if c.decision is not None
    ]
    return tuple(replace(c, decision=None) for c in calls), (*history, *overturned)


@dataclass
class _Row:
    run: StoredRun
    lease_expires: datetime | None = None


@dataclass
class InMemoryRunStore(RunStore):
    """Keeps runs in this process's memory: safe between threads, gone when the process ends."""

    lease: timedelta = DEFAULT_LEASE
    clock: Callable[[], datetime] = field(default=_now, repr=False)
    _rows: dict[str, _Row] = field(default_factory=dict, init=False, repr=False)
    _threads: dict[tuple[str, str], list[Any]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)

    # -- helpers (call with the lock held) ------------------------------------------------------

    def _reclaim_expired(self) -> None:
        now = self.clock()
        for row in list(self._rows.values()):
            run = row.run
            if run.status == "running" and row.lease_expires is not None and row.lease_expires < now:
                calls, history = reclaimed_calls(run.calls, run.history)
                row.run = replace(
                    run,
                    status="suspended",
                    version=run.version + 1,
                    interrupted=True,
                    calls=calls,
                    history=history,
                )
                row.lease_expires = None
                for inner in self._rows.values():
                    if inner.run.parent_run_id == run.run_id and inner.run.status == "suspended":
                        calls, history = reclaimed_calls(inner.run.calls, inner.run.history)
                        if calls != inner.run.calls:
                            inner.run = replace(
                                inner.run,
                                version=inner.run.version + 1,
                                interrupted=True,
                                calls=calls,
                                history=history,
                            )

    def _claim_row(self, row: _Row) -> StoredRun:
        row.run = replace(row.run, status="running", version=row.run.version + 1)
        row.lease_expires = self.clock() + self.lease
        return row.run

    @staticmethod
    def _copy(run: StoredRun, *, with_snapshot: bool) -> StoredRun:
        # Callers must not be able to mutate what the store holds.
        return replace(run, snapshot=copy.deepcopy(run.snapshot) if with_snapshot else None)

    # -- protocol --------------------------------------------------------------------------------

    def insert_suspended(self, suspension: Suspension) -> StoredRun:
        with self._lock:
            if suspension.run_id in self._rows:
                raise ValueError(f"Run {suspension.run_id!r} already exists")
            run = StoredRun(
                run_id=suspension.run_id,
                agent_id=suspension.agent_id,
                thread_id=suspension.thread_id,
                resource_id=suspension.resource_id,
                parent_run_id=suspension.parent_run_id,
                created_at=suspension.created_at,
                suspended_at=suspension.suspended_at,
                status="suspended",
                version=1,
                interrupted=False,
                calls=tuple(suspension.calls),
                snapshot=copy.deepcopy(suspension.snapshot),
            )
            self._rows[run.run_id] = _Row(run)
            return self._copy(run, with_snapshot=True)

    def resuspend(self, suspension: Suspension, *, expected_version: int) -> StoredRun | None:
        with self._lock:
            self._reclaim_expired()
            row = self._rows.get(suspension.run_id)
            if row is None or row.run.status != "running" or row.run.version != expected_version:
                return None
            row.run = replace(
                row.run,
                status="suspended",
                version=row.run.version + 1,
                interrupted=False,
                suspended_at=suspension.suspended_at,
                calls=tuple(suspension.calls),
                snapshot=copy.deepcopy(suspension.snapshot),
            )
            row.lease_expires = None
            return self._copy(row.run, with_snapshot=True)

    def get_run(self, run_id: str) -> StoredRun | None:
        with self._lock:
            self._reclaim_expired()
            row = self._rows.get(run_id)
            return None if row is None else self._copy(row.run, with_snapshot=True)

    def list_suspended(self, query: RunQuery) -> tuple[list[StoredRun], int]:
        with self._lock:
            self._reclaim_expired()
            matches = [
                row.run
                for row in self._rows.values()
                if row.run.status == "suspended" and _matches(row.run, query)
            ]
        if query.oldest_first:
            matches.sort(key=lambda r: r.run_id)
            matches.sort(key=lambda r: r.suspended_at)
        else:
            matches.sort(key=lambda r: r.run_id)
            matches.sort(key=lambda r: r.suspended_at, reverse=True)
        total = len(matches)
        if query.limit is not None:
            matches = matches[query.offset : query.offset + query.limit]
        return [self._copy(r, with_snapshot=False) for r in matches], total

    def decide(
        self,
        *,
        agent_id: str,
        run_id: str,
        rule: DecisionRule,
        claim_when_complete: bool = True,
    ) -> DecisionReceipt:
        with self._lock:
            self._reclaim_expired()
            row = self._rows.get(run_id)
            if row is None or row.run.agent_id != agent_id:
                raise RunNotFound(run_id)
            run = row.run
            tool_call_id, decision = rule(self._copy(run, with_snapshot=True))
            call = next((c for c in run.calls if c.tool_call_id == tool_call_id), None)
            if call is None or call.decision is not None or run.status != "suspended":
                raise decision_conflict(run, call, tool_call_id)
            decided = replace(call, decision=decision)
            calls = tuple(decided if c is call else c for c in run.calls)
            row.run = replace(run, calls=calls, version=run.version + 1)
            claimed: int | None = None
            if claim_when_complete and all(c.decision is not None for c in calls):
                claimed = self._claim_row(row).version
            return DecisionReceipt(
                run=self._copy(row.run, with_snapshot=True), call=decided, claimed_version=claimed
            )

    def claim(
        self,
        run_id: str,
        *,
        expected_version: int | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> StoredRun | None:
        with self._lock:
            self._reclaim_expired()
            row = self._rows.get(run_id)
            if row is None or row.run.status != "suspended":
                return None
            if expected_version is not None and row.run.version != expected_version:
                return None
            if decisions:
                row.run = replace(
                    row.run,
                    calls=tuple(
                        replace(c, decision=decisions[c.tool_call_id])
                        if c.decision is None and c.tool_call_id in decisions
                        else c
                        for c in row.run.calls
                    ),
                )
            return self._copy(self._claim_row(row), with_snapshot=True)

    def heartbeat(self, run_id: str, *, version: int) -> bool:
        with self._lock:
            # A claim that already ran out is given back, not renewed: a continuation too slow to
            # heartbeat in time must not keep (or later finish) a run others may now decide again.
            self._reclaim_expired()
            row = self._rows.get(run_id)
            if row is None or row.run.status != "running" or row.run.version != version:
                return False
            row.lease_expires = self.clock() + self.lease
            return True

    def finish(
        self,
        run_id: str,
        *,
        version: int,
        thread_messages: Sequence[Any] = (),
        ending: RunEnding | None = None,
    ) -> bool:
        with self._lock:
            self._reclaim_expired()
            row = self._rows.get(run_id)
            if row is None or row.run.status != "running" or row.run.version != version:
                return False
            del self._rows[run_id]
            if row.run.thread_id is not None and thread_messages:
                self.append_thread_messages(row.run.agent_id, row.run.thread_id, thread_messages)
            return True

    def append_thread_messages(self, agent_id: str, thread_id: str, messages: Sequence[Any]) -> None:
        with self._lock:
            self._threads.setdefault((agent_id, thread_id), []).extend(copy.deepcopy(list(messages)))

    def thread_messages(self, agent_id: str, thread_id: str) -> list[Any]:
        with self._lock:
            return copy.deepcopy(self._threads.get((agent_id, thread_id), []))


def _matches(run: StoredRun, query: RunQuery) -> bool:
    if run.agent_id != query.agent_id:
        return False
    if query.thread_id is not None and run.thread_id != query.thread_id:
        return False
    if query.resource_id is not None and run.resource_id != query.resource_id:
        return False
    if query.created_from is not None and run.created_at < query.created_from:
        return False
    if query.created_to is not None and run.created_at > query.created_to:
        return False
    undecided = run.undecided
    if query.tool_name is not None and not any(c.tool_name == query.tool_name for c in undecided):
        return False
    return query.kind is None or any(c.kind == query.kind for c in undecided)
