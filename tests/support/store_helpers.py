"""Builders and fixtures for the store tests: the same scenarios run on both stores."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents_runtime.memory import InMemoryRunStore
from agents_runtime.store import DEFAULT_LEASE, Decision, Delegation, ParkedCall, RunStore, Suspension
from approvals.store import DjangoRunStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    """A clock the test moves by hand, so lease expiry needs no sleeping."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


StoreFactory = Callable[..., RunStore]

#: Fixture params: the database store needs the test database (flushed after each test, since
#: the stores are called from several threads).
STORE_KINDS = [
    pytest.param("memory"),
    pytest.param("django", marks=pytest.mark.django_db(transaction=True)),
]


def store_factory(request: pytest.FixtureRequest, kind: str) -> StoreFactory:
    """``make(lease=..., clock=...)`` for ``kind`` "memory" or "django" (see ``STORE_KINDS``)."""
    if kind == "django":

        def make_django(
            lease: timedelta = DEFAULT_LEASE, clock: Callable[[], datetime] | None = None
        ) -> RunStore:
            return DjangoRunStore(lease, clock=clock) if clock else DjangoRunStore(lease)

        return make_django

    def make_memory(
        lease: timedelta = DEFAULT_LEASE, clock: Callable[[], datetime] | None = None
    ) -> RunStore:
        return InMemoryRunStore(lease=lease, clock=clock) if clock else InMemoryRunStore(lease=lease)

    return make_memory


def approval(tool_call_id: str = "call-1", tool_name: str = "refund", **args: Any) -> ParkedCall:
    return ParkedCall(
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        kind="approval",
        args=args or {"amount": 120, "currency": "EUR"},
    )


def suspend_call(tool_call_id: str = "call-s", tool_name: str = "ask_details") -> ParkedCall:
    return ParkedCall(
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        kind="input",
        suspend_payload={"question": "Which environment?", "options": ["staging", "production"]},
        suspend_schema={"type": "object", "properties": {"question": {"type": "string"}}},
        resume_schema={
            "type": "object",
            "properties": {"environment": {"enum": ["staging", "production"]}},
            "required": ["environment"],
        },
    )


def delegated(tool_call_id: str = "call-d", inner_run_id: str = "inner-1") -> ParkedCall:
    return ParkedCall(
        tool_call_id=f"{tool_call_id}:inner-call",
        tool_name="deploy",
        kind="approval",
        args={"service": "api", "version": "1.2.3"},
        delegation=Delegation(
            tool_call_id=tool_call_id, inner_run_id=inner_run_id, inner_tool_call_id="inner-call"
        ),
    )


def suspension(
    run_id: str,
    *,
    agent_id: str = "support",
    thread_id: str | None = None,
    resource_id: str | None = None,
    parent_run_id: str | None = None,
    created_at: datetime = T0,
    suspended_at: datetime | None = None,
    calls: Sequence[ParkedCall] | None = None,
    snapshot: dict[str, Any] | None = None,
) -> Suspension:
    return Suspension(
        run_id=run_id,
        agent_id=agent_id,
        thread_id=thread_id,
        resource_id=resource_id,
        parent_run_id=parent_run_id,
        created_at=created_at,
        suspended_at=suspended_at or created_at,
        calls=tuple(calls if calls is not None else [approval()]),
        snapshot=snapshot if snapshot is not None else {"messages": [{"kind": "request", "run": run_id}]},
    )


def decision(
    action: str = "approve", *, actor: str | None = "alice", at: datetime = T0, **extra: Any
) -> Decision:
    return Decision(action=action, decided_at=at, actor=actor, **extra)  # type: ignore[arg-type]
