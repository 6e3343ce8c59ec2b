"""The in-process channel layer (the embedded default), without its O(N) work per message.

Channels' ``InMemoryChannelLayer`` sweeps every channel and group for expired entries on each
``receive`` and ``group_send``, and starts one task per member in ``group_send``. Every open page has
a channel waiting in ``receive``, so with hundreds of pages each message costs a walk over all of
them (when each page also got its own copy of every event, one event cost O(N²): bench/push_latency.py,
figures in docs/scaling.md). Sweeping at most once a second and sending without a task per
member keeps the behaviour (messages still expire after ``expiry`` seconds, memberships after
``group_expiry``) at O(1) per message and O(members) per group send.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer as ChannelsInMemoryChannelLayer

#: Seconds between two sweeps for expired messages and group memberships.
SWEEP_INTERVAL = 1.0


class InMemoryChannelLayer(ChannelsInMemoryChannelLayer):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._swept_at = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._swept_at < SWEEP_INTERVAL:
            return
        self._swept_at = now
        super()._clean_expired()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        # ``send`` only puts the message on an asyncio queue: awaiting each in turn never blocks.
        for channel in list(self.groups.get(group, {})):
            with contextlib.suppress(ChannelFull):
                await self.send(channel, message)
