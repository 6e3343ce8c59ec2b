"""``Fanout``: one channel-layer channel per server process for all live groups, fanned out in the
process to its open pages."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from typing import Any, Protocol

from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, channel_layers, get_channel_layer

from approvals.live import querycount

logger = logging.getLogger(__name__)


class Member(Protocol):
    """An open page (a consumer) that ``Fanout`` forwards a group's messages to."""

    async def forward(self, message: dict[str, Any]) -> None: ...


class Fanout:
    """One channel-layer channel per server process for all live groups, fanned out in the process.

    Channels' usual way gives every socket its own layer channel and group memberships, so one event
    costs one layer message per open page (with Redis: one write and one read each, and a task hop
    per page in either layer). Here each process joins every group that one of its pages needs once,
    receives each event once, and hands it to its pages directly, yielding to the event loop every
    ``BATCH`` pages so the first ones are written out while the rest are served.
    """

    BATCH = 50
    #: Layers forget group memberships (after ``group_expiry``, or when Redis restarts): renew them.
    REJOIN_SECONDS = 300.0

    def __init__(self) -> None:
        self._hubs: dict[asyncio.AbstractEventLoop, _Hub] = {}

    def _hub(self) -> _Hub:
        loop = asyncio.get_running_loop()
        hub = self._hubs.get(loop)
        if hub is None:
            self.forget_closed_loops()
            hub = self._hubs[loop] = _Hub(self)
        return hub

    def forget_closed_loops(self) -> None:
        """Let go of the hubs (and their layers' connections) of event loops that have closed."""
        self._hubs = {lp: h for lp, h in self._hubs.items() if not lp.is_closed()}

    async def join(self, group: str, member: Member) -> None:
        await self._hub().join(group, member)

    async def leave(self, group: str, member: Member) -> None:
        await self._hub().leave(group, member)


class _Hub:
    """``Fanout`` in one event loop (channel layers are bound to the loop they run in)."""

    def __init__(self, fanout: Fanout) -> None:
        self.fanout = fanout
        self.layer = _receiving_layer()
        self.channel = ""
        self.members: dict[str, set[Member]] = {}
        self.lock = asyncio.Lock()
        self.tasks: list[asyncio.Task[None]] = []

    async def join(self, group: str, member: Member) -> None:
        async with self.lock:
            if not self.channel:
                self.channel = await self.layer.new_channel()
            if group not in self.members:
                await self.layer.group_add(group, self.channel)
                self.members[group] = set()
            self.members[group].add(member)
            if not self.tasks or any(t.done() for t in self.tasks):
                for task in self.tasks:
                    task.cancel()
                loop = asyncio.get_running_loop()
                # Fresh contexts: these outlive the consumer that started them.
                self.tasks = [
                    loop.create_task(
                        self._pump(), name="countersign-live-fanout", context=contextvars.Context()
                    ),
                    loop.create_task(
                        self._renew(), name="countersign-live-renew", context=contextvars.Context()
                    ),
                ]

    async def leave(self, group: str, member: Member) -> None:
        async with self.lock:
            members = self.members.get(group)
            if members is None:
                return
            members.discard(member)
            if not members:
                del self.members[group]
                await self.layer.group_discard(group, self.channel)

    async def _rejoin(self) -> None:
        async with self.lock:
            for group in list(self.members):
                await self.layer.group_add(group, self.channel)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.fanout.REJOIN_SECONDS)
            try:
                await self._rejoin()
            except Exception:
                logger.exception("Live fan-out: renewing group memberships failed")

    async def _pump(self) -> None:
        # Queries made on the way of a message to the pages count as the fan-out's (bench, tests).
        querycount.path.set("fanout")
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Live fan-out: receiving failed; retrying")
                await asyncio.sleep(1)
                with contextlib.suppress(Exception):
                    await self._rejoin()
                continue
            members = list(self.members.get(message.get("group", ""), ()))
            for index, member in enumerate(members, start=1):
                try:
                    await member.forward(message)
                except Exception:
                    logger.exception("Live fan-out: forwarding to %r failed", member)
                if index % self.fanout.BATCH == 0:
                    await asyncio.sleep(0)


def _receiving_layer() -> BaseChannelLayer:
    """The layer a hub receives on: the process's own in-process layer, or an instance of its own.

    channels_redis lets one event loop at a time receive on a layer instance (its receive locks are
    bound to the loop that first waited on them, and one left held by a loop that has gone fails the
    next): each loop's hub gets an instance of its own. The in-process layer holds the only copy of
    its messages, so it is shared.
    """
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        return layer
    return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)


fanout = Fanout()
querycount.install_from_environment()
