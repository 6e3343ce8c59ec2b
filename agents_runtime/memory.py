"""``InMemoryRunStore``: the reference run store, in this process's memory."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from .errors import RunNotFound
from .grants import Grant, GrantNotFound, GrantRequest, GrantStore, GrantUnavailable, narrowest_first
from .routing import Rule, RuleNotFound, RuleRequest, RuleStore, ordered, renumbered
from .store import (
    DEFAULT_LEASE,
    DeadlineRule,
    Decision,
    DecisionReceipt,
    DecisionRule,
    RunEnding,
    RunQuery,
    RunStore,
    StoredRun,
    Suspension,
    Vote,
    decision_conflict,
    reclaimed_calls,
)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Row:
    run: StoredRun
    lease_expires: datetime | None = None


@dataclass
class InMemoryRunStore(RunStore, GrantStore, RuleStore):
    """Keeps runs in this process's memory: safe between threads, gone when the process ends."""

    lease: timedelta = DEFAULT_LEASE
    clock: Callable[[], datetime] = field(default=_now, repr=False)
    _rows: dict[str, _Row] = field(default_factory=dict, init=False, repr=False)
    #: Each thread's memory: the messages of each ended run, one list per run, oldest first.
    _threads: dict[tuple[str, str], list[list[Any]]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _grants: dict[int, Grant] = field(default_factory=dict, init=False, repr=False)
    _rules: dict[int, Rule] = field(default_factory=dict, init=False, repr=False)
    _rule_ids: int = field(default=0, init=False, repr=False)

    # -- helpers (call with the lock held) ------------------------------------------------------

    def _reclaim_expired(self) -> list[tuple[str, str]]:
        now = self.clock()
        reclaimed = []
        for row in list(self._rows.values()):
            run = row.run
            if run.status == "running" and row.lease_expires is not None and row.lease_expires < now:
                reclaimed.append((run.agent_id, run.run_id))
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
                    if inner.run.parent_run_id == run.run_id:
                        self._park_inner_again(inner)
        return reclaimed

    @staticmethod
    def _park_inner_again(inner: _Row) -> None:
        """A sub-agent's run under a reclaimed supervisor run: its decisions cleared, and waiting again
        if the supervisor's continuation had claimed it but not started it yet."""
        unstarted = inner.run.status == "running" and inner.lease_expires is None
        if inner.run.status != "suspended" and not unstarted:
            return
        calls, history = reclaimed_calls(inner.run.calls, inner.run.history)
        if calls != inner.run.calls or unstarted:
            inner.run = replace(
                inner.run,
                status="suspended",
                version=inner.run.version + 1,
                interrupted=True,
                calls=calls,
                history=history,
            )

    def _claim_row(self, row: _Row) -> StoredRun:
        # No lease until its continuation starts (``start_continuation``).
        row.run = replace(row.run, status="running", version=row.run.version + 1)
        row.lease_expires = None
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
                started_by=suspension.started_by,
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

    def get_run(self, run_id: str, *, with_snapshot: bool = True) -> StoredRun | None:
        with self._lock:
            self._reclaim_expired()
            row = self._rows.get(run_id)
            return None if row is None else self._copy(row.run, with_snapshot=with_snapshot)

    def list_suspended(self, query: RunQuery) -> tuple[list[StoredRun], int]:
        with self._lock:
            self._reclaim_expired()
            matches = [
                row.run
                for row in self._rows.values()
                if row.run.status == "suspended" and _matches(row.run, query)
            ]
        if query.by_deadline:
            matches.sort(key=lambda r: (r.suspended_at, r.run_id))
            matches.sort(key=_next_deadline)
        elif query.oldest_first:
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
        start: bool = False,
    ) -> DecisionReceipt:
        with self._lock:
            row = self._agents_row(agent_id, run_id)
            run = row.run
            tool_call_id, verdict = rule(self._copy(run, with_snapshot=True))
            call = next((c for c in run.calls if c.tool_call_id == tool_call_id), None)
            if call is None or call.decision is not None or run.status != "suspended":
                raise decision_conflict(run, call, tool_call_id)
            if isinstance(verdict, Decision) and verdict.grant_id is not None:
                self._use_grant(verdict.grant_id, agent_id, call.tool_name, verdict.decided_at)
            vote = verdict if isinstance(verdict, Vote) else None
            if isinstance(verdict, Vote):
                decided = replace(call, votes=verdict.votes)
            else:
                decided = replace(call, decision=verdict)
            calls = tuple(decided if c is call else c for c in run.calls)
            row.run = replace(run, calls=calls, version=run.version + 1)
            claimed: int | None = None
            if vote is None and claim_when_complete and all(c.decision is not None for c in calls):
                claimed = self._claim_row(row).version
                if start:
                    row.lease_expires = self.clock() + self.lease
            return DecisionReceipt(
                run=self._copy(row.run, with_snapshot=True), call=decided, claimed_version=claimed, vote=vote
            )

    def _agents_row(self, agent_id: str, run_id: str) -> _Row:
        """``run_id``'s row if it is ``agent_id``'s, as of after lease reclaim (hold the lock)."""
        self._reclaim_expired()
        row = self._rows.get(run_id)
        if row is None or row.run.agent_id != agent_id:
            raise RunNotFound(run_id)
        return row

    def change_deadline(self, *, agent_id: str, run_id: str, rule: DeadlineRule) -> StoredRun:
        with self._lock:
            row = self._agents_row(agent_id, run_id)
            run = row.run
            change = rule(self._copy(run, with_snapshot=False))
            call = next((c for c in run.calls if c.tool_call_id == change.tool_call_id), None)
            if call is None or call.decision is not None or run.status != "suspended":
                raise decision_conflict(run, call, change.tool_call_id)
            moved = replace(call, expires_at=change.expires_at, escalated_to=change.escalated_to)
            calls = tuple(moved if c is call else c for c in run.calls)
            row.run = replace(run, calls=calls, version=run.version + 1)
            return self._copy(row.run, with_snapshot=False)

    def due_calls(self, agent_id: str, before: datetime, *, limit: int) -> list[tuple[str, str]]:
        with self._lock:
            self._reclaim_expired()
            due = [
                (call.expires_at, row.run.run_id, call.tool_call_id)
                for row in self._rows.values()
                if row.run.agent_id == agent_id
                and row.run.status == "suspended"
                and row.run.parent_run_id is None
                for call in row.run.undecided
                if call.expires_at is not None and call.expires_at <= before
            ]
        return [(run_id, tool_call_id) for _at, run_id, tool_call_id in sorted(due)[:limit]]

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

    def _held(self, run_id: str, version: int) -> _Row | None:
        """The run while the claim at ``version`` still holds and its continuation has started (lock
        held); an expired claim is reclaimed."""
        row = self._rows.get(run_id)
        if row is None or row.run.status != "running" or row.run.version != version:
            return None
        if row.lease_expires is None:
            return None
        if row.lease_expires < self.clock():
            self._reclaim_expired()  # given back (its calls offered again), never renewed
            return None
        return row

    def start_continuation(self, run_id: str, *, version: int) -> bool:
        with self._lock:
            row = self._rows.get(run_id)
            if row is None or row.run.status != "running" or row.run.version != version:
                return False
            if row.lease_expires is not None:
                return False  # started already
            row.lease_expires = self.clock() + self.lease
            return True

    def reclaim_expired(self) -> list[tuple[str, str]]:
        with self._lock:
            return self._reclaim_expired()

    def mark_tool_started(self, run_id: str, tool_call_id: str, *, version: int) -> bool:
        with self._lock:
            row = self._held(run_id, version)
            if row is None:
                return False
            started = self.clock()
            row.run = replace(
                row.run,
                calls=tuple(
                    replace(c, tool_started_at=started) if c.tool_call_id == tool_call_id else c
                    for c in row.run.calls
                ),
            )
            return True

    def heartbeat(self, run_id: str, *, version: int) -> bool:
        with self._lock:
            # A claim that already ran out is given back, not renewed: a continuation too slow to
            # heartbeat in time must not keep (or later finish) a run others may now decide again.
            row = self._held(run_id, version)
            if row is None:
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
            row = self._held(run_id, version)
            if row is None:
                return False
            del self._rows[run_id]
            if row.run.thread_id is not None and thread_messages:
                self.append_thread_messages(row.run.agent_id, row.run.thread_id, thread_messages)
            return True

    def append_thread_messages(self, agent_id: str, thread_id: str, messages: Sequence[Any]) -> None:
        if not messages:
            return
        with self._lock:
            self._threads.setdefault((agent_id, thread_id), []).append(copy.deepcopy(list(messages)))

    def thread_messages(self, agent_id: str, thread_id: str, *, last_runs: int | None = None) -> list[Any]:
        with self._lock:
            runs = self._threads.get((agent_id, thread_id), [])
            if last_runs is not None:
                runs = runs[-last_runs:] if last_runs > 0 else []
            return copy.deepcopy([message for run in runs for message in run])

    # -- grants ------------------------------------------------------------------------------------

    def _use_grant(self, grant_id: int, agent_id: str, tool_name: str, at: datetime) -> None:
        grant = self._grants.get(grant_id)
        if grant is None or grant.agent_id != agent_id or grant.tool_name != tool_name or not grant.live(at):
            raise GrantUnavailable(grant_id)
        self._grants[grant_id] = replace(grant, uses=grant.uses + 1)

    def add_grant(self, request: GrantRequest) -> Grant:
        with self._lock:
            grant = Grant(
                id=len(self._grants) + 1,
                agent_id=request.agent_id,
                tool_name=request.tool_name,
                scope=request.scope,
                scope_value=request.scope_value,
                created_by=request.created_by,
                created_at=request.created_at,
                expires_at=request.expires_at,
                max_uses=request.max_uses,
                uses=0,
                condition=request.condition,
                from_run_id=request.from_run_id,
                from_tool_call_id=request.from_tool_call_id,
                covers_risky=request.covers_risky,
            )
            self._grants[grant.id] = grant
            return grant

    def revoke_grant(self, grant_id: int, *, actor: str, at: datetime) -> Grant:
        with self._lock:
            grant = self._grants.get(grant_id)
            if grant is None:
                raise GrantNotFound(grant_id)
            if grant.revoked_at is None:
                grant = self._grants[grant_id] = replace(grant, revoked_at=at, revoked_by=actor)
            return grant

    def get_grant(self, grant_id: int) -> Grant | None:
        with self._lock:
            return self._grants.get(grant_id)

    def note_condition_failure(self, grant_id: int, *, error: str, at: datetime) -> None:
        with self._lock:
            grant = self._grants.get(grant_id)
            if grant is not None:
                self._grants[grant_id] = replace(
                    grant,
                    condition_failures=grant.condition_failures + 1,
                    last_condition_error=error,
                    last_condition_error_at=at,
                )

    def live_grants(
        self, agent_id: str, tool_name: str, *, thread_id: str | None, resource_id: str | None, at: datetime
    ) -> list[Grant]:
        with self._lock:
            return narrowest_first(
                [
                    g
                    for g in self._grants.values()
                    if g.agent_id == agent_id
                    and g.tool_name == tool_name
                    and g.live(at)
                    and g.in_scope(thread_id, resource_id)
                ]
            )

    # -- routing rules -------------------------------------------------------------------------------

    def _place(self, agent_id: str, tool_name: str, moving: int | None, position: int | None) -> None:
        order = [r.id for r in self.rules_for(agent_id, tool_name)]
        for rule_id, at in renumbered(order, moving, position).items():
            self._rules[rule_id] = replace(self._rules[rule_id], position=at)

    def add_rule(self, request: RuleRequest) -> Rule:
        with self._lock:
            self._rule_ids += 1
            rule = Rule(
                id=self._rule_ids,
                agent_id=request.agent_id,
                tool_name=request.tool_name,
                position=10**9,
                route=request.route,
                condition=request.condition,
                reason=request.reason,
                created_by=request.created_by,
                created_at=request.created_at,
            )
            self._rules[rule.id] = rule
            self._place(rule.agent_id, rule.tool_name, rule.id, request.position)
            return self._rules[rule.id]

    def change_rule(self, rule_id: int, request: RuleRequest) -> Rule:
        with self._lock:
            rule = self._rules.get(rule_id)
            if rule is None or (rule.agent_id, rule.tool_name) != (request.agent_id, request.tool_name):
                raise RuleNotFound(rule_id)
            self._rules[rule_id] = replace(
                rule,
                route=request.route,
                condition=request.condition,
                reason=request.reason,
                changed_by=request.created_by,
                changed_at=request.created_at,
            )
            self._place(rule.agent_id, rule.tool_name, rule_id, request.position or rule.position)
            return self._rules[rule_id]

    def delete_rule(self, rule_id: int, *, actor: str, at: datetime) -> Rule:
        with self._lock:
            rule = self._rules.pop(rule_id, None)
            if rule is None:
                raise RuleNotFound(rule_id)
            self._place(rule.agent_id, rule.tool_name, None, None)
            return rule

    def get_rule(self, rule_id: int) -> Rule | None:
        with self._lock:
            return self._rules.get(rule_id)

    def rules_for(self, agent_id: str, tool_name: str) -> list[Rule]:
        with self._lock:
            return ordered(
                [r for r in self._rules.values() if (r.agent_id, r.tool_name) == (agent_id, tool_name)]
            )


def _next_deadline(run: StoredRun) -> tuple[bool, datetime | None]:
    due = [c.expires_at for c in run.undecided if c.expires_at is not None]
    return (not due, min(due) if due else None)


def _matches(run: StoredRun, query: RunQuery) -> bool:
    if run.agent_id != query.agent_id:
        return False
    if query.thread_id is not None and run.thread_id != query.thread_id:
        return False
    if query.resource_id is not None and run.resource_id != query.resource_id:
        return False
    if query.delegated is not None and (run.parent_run_id is not None) != query.delegated:
        return False
    if query.created_from is not None and run.created_at < query.created_from:
        return False
    if query.created_to is not None and run.created_at > query.created_to:
        return False
    undecided = run.undecided
    if query.escalated_to is not None and not any(c.escalated_to in query.escalated_to for c in undecided):
        return False
    before = query.expiring_before
    if before is not None and not any(c.expires_at is not None and c.expires_at < before for c in undecided):
        return False
    if query.tool_name is not None and not any(c.tool_name == query.tool_name for c in undecided):
        return False
    return query.kind is None or any(c.kind == query.kind for c in undecided)
