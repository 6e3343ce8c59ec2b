"""Decided history for the trial and suggestion tests: audit rows as the run store writes them."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from approvals.models import AuditEntry

_ids = itertools.count(1)


def decided(
    args: dict[str, Any],
    *,
    action: str = "approve",
    edited: dict[str, Any] | None = None,
    agent_id: str = "helpdesk",
    tool_name: str = "refund",
    resource: str = "",
    thread: str = "",
    ago: timedelta = timedelta(hours=1),
    channel: str = "dashboard",
    outcome: str = "completed",
    username: str = "rita",
) -> AuditEntry:
    n = next(_ids)
    at: datetime = timezone.now() - ago
    return AuditEntry.objects.create(
        created_at=at,
        parked_at=at - timedelta(minutes=3),
        username=username,
        agent_id=agent_id,
        run_id=f"run-{n}",
        thread_id=thread,
        resource_id=resource,
        tool_call_id=f"call-{n}",
        tool_name=tool_name,
        args=args,
        action=action,
        edited_args=edited,
        outcome=outcome,
        channel=channel,
    )


def refund(amount_cents: int, order_id: str = "A-1", note: str = "damaged") -> dict[str, Any]:
    return {"order_id": order_id, "amount_cents": amount_cents, "note": note}


def approvals(n: int, *, amount_cents: int = 500, **kwargs: Any) -> list[AuditEntry]:
    return [decided(refund(amount_cents), **kwargs) for _ in range(n)]
