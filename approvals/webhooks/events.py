"""Run events as webhook events: ``call.suspended``, ``call.decided``, ``run.completed``, ``run.failed``.

The runtime's events are id-only; the webhook's body carries what a receiver needs to act without
calling back (agent, run, thread, resource, tool, call, who decided, a decline's reason, edited
arguments) and links to the run, which stay valid once it ended (the v1 API then answers from the
run's permanent record). Written
in the process where the event happened (a server or a ``db_worker``), after the run's change is
committed; sending is left to a background task so a slow receiver never slows a decision. The
endpoints are read once per decision (``endpoints_read_once``): its events, the decision's and those
of the continuation it runs inline, are recorded against the same read.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from agents_runtime import RunEvent, RunNotFound
from approvals import agents, site
from approvals.models import AuditEntry, WebhookDelivery, WebhookEndpoint
from approvals.server.database import fixed_models

logger = logging.getLogger(__name__)

#: The active endpoints as read in this context (``endpoints_read_once``): a holder, not the list,
#: because the events are recorded on database threads, in copies of the context.
_read: ContextVar[dict[str, list[WebhookEndpoint]] | None] = ContextVar("countersign_endpoints", default=None)

_TYPES = {
    "run-suspended": "call.suspended",
    "call-decided": "call.decided",
    "run-completed": "run.completed",
    "run-failed": "run.failed",
}
#: The run events the listener is called for (``apps.compose``).
EVENT_TYPES = tuple(_TYPES)


async def on_run_event(event: RunEvent) -> None:
    """The runtime listener (``apps.compose``): record the deliveries this event calls for."""
    if event.type not in _TYPES:
        return
    held = _read.get()
    if held is not None and "active" in held and not _wanting(held["active"], event):
        return  # (the endpoints this decision read want none of it: nothing to write, no thread hop)
    await database_sync_to_async(record)(event)


def _links(agent_id: str, run_id: str) -> dict[str, str]:
    base = site.base_url()
    return {
        "dashboard": base + reverse("approvals:run", args=[run_id]),
        "api": base + reverse("api:v1_run", args=[agent_id, run_id]),
    }


def _context(run_id: str, tool_call_id: str | None = None) -> dict[str, Any]:
    """Thread, resource and tool of a run (or call) that is no longer waiting, from the audit log."""
    entries = AuditEntry.objects.for_run(run_id)
    if tool_call_id:
        entries = entries.filter(tool_call_id=tool_call_id)
    row = (
        entries.winning()
        .order_by("-created_at", "-id")
        .values("thread_id", "resource_id", "tool_name", "tool_call_id")
        .first()
    )
    if row is None:
        return {"threadId": None, "resourceId": None}
    return {"threadId": row["thread_id"] or None, "resourceId": row["resource_id"] or None}


def payloads(event: RunEvent) -> list[dict[str, Any]]:
    """The webhook events (``data``) one run event makes: one per parked call for a suspension."""
    base: dict[str, Any] = {"agentId": event.agent_id, "runId": event.run_id}
    links = _links(event.agent_id, event.run_id)
    if event.type == "run-suspended":
        try:
            run = async_to_sync(agents.get(event.agent_id).get_suspended_run)(event.run_id)
        except (RunNotFound, agents.UnknownAgent):
            return []  # decided already: nothing waits any more
        if run.parent_run_id is not None:
            # A sub-agent's inner run: its calls are announced once, on the supervisor's run, where
            # they are decided (its own run-suspended event follows).
            return []
        return [
            {
                **base,
                "threadId": run.thread_id,
                "resourceId": run.resource_id,
                "toolCallId": call.tool_call_id,
                "toolName": call.tool_name,
                "kind": "approval" if call.requires_approval else "input",
                "links": links,
            }
            for call in run.tool_calls
        ]
    if event.type == "call-decided":
        decided: Any = (
            AuditEntry.objects.for_call(event.run_id, event.tool_call_id or "")
            .winning()
            .order_by("-created_at", "-id")
            .values("thread_id", "resource_id", "tool_name", "channel", "reason", "edited_args")
            .first()
        ) or {}
        return [
            {
                **base,
                "threadId": decided.get("thread_id") or None,
                "resourceId": decided.get("resource_id") or None,
                "toolCallId": event.tool_call_id,
                "toolName": decided.get("tool_name") or None,
                "action": event.action,
                "decidedBy": event.actor,
                "channel": decided.get("channel"),
                # A decline's reason (what the model reads); the arguments an approval ran the tool
                # with instead of the model's. None when there is none.
                "reason": decided.get("reason") or None,
                "editedArgs": decided.get("edited_args") if event.edited else None,
                "links": links,
            }
        ]
    return [{**base, **_context(event.run_id), "links": links}]


@contextmanager
def endpoints_read_once() -> Iterator[None]:
    """Read the active endpoints at most once for the events recorded inside the block."""
    token = _read.set({})
    try:
        yield
    finally:
        _read.reset(token)


def _active_endpoints() -> list[WebhookEndpoint]:
    held = _read.get()
    if held is None:
        return _read_active()
    if "active" not in held:
        held["active"] = _read_active()
    return held["active"]


def _read_active() -> list[WebhookEndpoint]:
    # Read in every decision: compiled once (``fixed_models``), not built and compiled each time.
    return fixed_models(
        "active webhook endpoints", WebhookEndpoint, lambda: WebhookEndpoint.objects.filter(active=True)
    )


def _wanting(endpoints: list[WebhookEndpoint], event: RunEvent) -> list[WebhookEndpoint]:
    return [e for e in endpoints if e.wants(_TYPES[event.type], event.agent_id)]


def record(event: RunEvent) -> list[WebhookDelivery]:
    """One delivery per (webhook event, endpoint that wants it); sending is scheduled after commit."""
    event_type = _TYPES[event.type]
    endpoints = _wanting(_active_endpoints(), event)
    if not endpoints:
        return []
    try:
        datas = payloads(event)
    except Exception:
        logger.exception("Webhook event %s of run %s could not be built; not sent", event_type, event.run_id)
        return []
    now = timezone.now()
    rows = [
        WebhookDelivery(
            endpoint=endpoint,
            message_id=f"msg_{uuid.uuid4().hex}",
            event_type=event_type,
            payload={"type": event_type, "timestamp": now.isoformat().replace("+00:00", "Z"), "data": data},
            created_at=now,
            next_attempt_at=now,
        )
        for endpoint in endpoints
        for data in datas
    ]
    from approvals.webhooks.sending import schedule

    with transaction.atomic():
        WebhookDelivery.objects.bulk_create(rows)
        for row in rows:
            transaction.on_commit(partial(schedule, row.pk, 0.0), robust=True)
    return rows
