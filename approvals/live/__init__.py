"""Live updates: run events, run output and sign-outs to the websocket consumers of every server process.

Events are small and id-only ("run X of agent A was suspended"); pages refetch their own partials
over HTTP so each keeps its filters and pagination. A continuation's output (text deltas, tool calls
and results) goes to the pages watching that run. A logout closes that session's sockets. Two
delivery paths, chosen by the channel layer:

- Redis (``REDIS_URL``): the process that has the message sends it to the channel layer directly;
  every server instance's consumers receive it.
- In-process layer (the embedded default): the layer cannot leave its process, so every message goes
  through the ``LiveEvent`` outbox table, which a relay task in each server process polls and
  forwards; a server's own messages too, so each arrives once. A run started by ``manage.py
  run_agent`` or continued by a ``db_worker`` still reaches the open pages. Output is coalesced on its
  way in (``RunOutput``): a model streams tens of text deltas a second, the outbox gets a row at most
  every ``OUTPUT_FLUSH_SECONDS`` per continuation.

Either way a server process receives each message once, on one layer channel of its own, and hands
it to its open pages itself (``Fanout``): per message, the layer carries one copy per process, not one
per page.
"""

from approvals.live.events import (
    RunOutput,
    agent_group,
    announce,
    close_sockets_on_logout,
    deliver,
    end_session,
    escalation_group,
    presence_group,
    publish,
    run_group,
    session_group,
    tapping,
    uses_outbox,
)
from approvals.live.fanout import Fanout, fanout
from approvals.live.outbox import relay

__all__ = [
    "Fanout",
    "RunOutput",
    "agent_group",
    "announce",
    "close_sockets_on_logout",
    "deliver",
    "end_session",
    "escalation_group",
    "fanout",
    "presence_group",
    "publish",
    "relay",
    "run_group",
    "session_group",
    "tapping",
    "uses_outbox",
]
