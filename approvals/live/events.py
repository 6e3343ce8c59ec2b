"""Run events, the dashboard's own events and sign-outs, on their way to every server process: the
live groups they go to, and the delivery path this process's channel layer takes.

With Redis the message goes to the channel layer at once; with the in-process layer it is written to
the ``LiveEvent`` outbox, which ``approvals.live.outbox`` relays in every server process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from functools import cache, partial
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import connections, router, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from agents_runtime import RunEvent
from agents_runtime.vocabulary import DecisionAction
from approvals.dom_ids import safe
from approvals.models import AuditEntry, LiveEvent


def agent_group(agent_id: str) -> str:
    # Channels group names: ASCII letters, digits, "-", "_", "." and under 100 characters.
    return f"agent.{safe(agent_id)}"[:99]


def run_group(run_id: str) -> str:
    return f"run.{safe(run_id)}"[:99]


def presence_group(run_id: str) -> str:
    """The open pages of one run's card (who else has it open: ``LiveConsumer``'s presence)."""
    return f"presence.{safe(run_id)}"[:99]


def session_group(session_key: str) -> str:
    # A digest, never the key: group names travel through Redis and the outbox, and a key is a login.
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def uses_outbox() -> bool:
    """True when the channel layer cannot leave this process (Channels' in-memory layer, or ours)."""
    return _in_process(str(settings.CHANNEL_LAYERS["default"]["BACKEND"]))


@cache
def _in_process(backend: str) -> bool:
    return issubclass(import_string(backend), InMemoryChannelLayer)


async def deliver(event: dict[str, Any]) -> None:
    """Send one event to the pages showing its agent (in reach of this layer: see ``Fanout``)."""
    layer = get_channel_layer()
    if layer is None:
        return
    group = agent_group(event["agent_id"])
    # Encoded once here rather than once per open page.
    text = json.dumps({"type": "event", "event": event})
    await layer.group_send(group, {"type": "run.event", "group": group, "event": event, "text": text})


async def publish(event: RunEvent) -> None:
    """The runtime listener: the store change is committed when this runs.

    An expiry carries what the deadline did (``expired_as``: "approve" or "decline", from the call's
    audit row, written in the same step): an open card says it, not what the tool asked for."""
    payload = dataclasses.asdict(event)
    if event.type == "call-decided" and event.action == DecisionAction.EXPIRE and event.tool_call_id:
        expired_as = database_sync_to_async(AuditEntry.objects.expired_as)
        payload["expired_as"] = await expired_as(event.run_id, event.tool_call_id)
    if uses_outbox():
        row = (LiveEvent.Kind.EVENT, event.agent_id, event.run_id, payload)
        await database_sync_to_async(write_outbox)([row])
    else:
        await deliver(payload)


def write_outbox(rows: list[tuple[str, str, str, Any]]) -> None:
    """Outbox rows, each ``(kind, agent id, run id, payload)``, in one INSERT.

    Written by hand: the ORM's ``create`` spent more of the server's CPU on each row (the model
    instance, its save and the insert's compilation) than the statement itself, three rows a decision.
    """
    connection = connections[router.db_for_write(LiveEvent)]
    payload_field = LiveEvent._meta.get_field("payload")
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    values: list[Any] = []
    for kind, agent_id, run_id, payload in rows:
        values += [now, kind, agent_id, run_id, payload_field.get_db_prep_value(payload, connection)]
    row = "(%s, %s, %s, %s, %s)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {LiveEvent._meta.db_table} (created_at, kind, agent_id, run_id, payload)"
            f" VALUES {', '.join([row] * len(rows))}",
            values,
        )


def announce(event: dict[str, Any]) -> None:
    """``publish`` for the dashboard's own events, from synchronous code (after its commit).

    ``event`` is small and id-only like a run event: at least ``type``, ``agent_id`` and ``run_id``.
    """
    if uses_outbox():
        write_outbox([(LiveEvent.Kind.EVENT, event["agent_id"], event["run_id"], event)])
    else:
        async_to_sync(deliver)(event)


def end_session(session_key: str) -> None:
    """Close the open sockets of a session that logged out, in every server process (synchronous)."""
    group = session_group(session_key)
    if uses_outbox():
        LiveEvent.objects.create(
            kind=LiveEvent.Kind.SIGN_OUT, agent_id="", run_id="", payload={"group": group}
        )
    else:
        async_to_sync(send_sign_out)(group)


def close_sockets_on_logout(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    """``user_logged_out``: the session's open live sockets close (4401), in every server process."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        transaction.on_commit(partial(end_session, session_key), robust=True)


async def send_sign_out(group: str) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(group, {"type": "session.ended", "group": group})
