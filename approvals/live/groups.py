"""Names of the live groups, and which delivery path this process's channel layer takes."""

from __future__ import annotations

import hashlib
from functools import cache

from channels.layers import InMemoryChannelLayer
from django.conf import settings
from django.utils.module_loading import import_string

from approvals.dom_ids import safe


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
