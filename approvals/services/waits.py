"""How many answers one caller may keep open while they wait for a person: at most
``API_OPEN_WAITS_PER_CALLER`` at once ("0" turns the limit off).

Three doors hold an answer open until someone at the desk decides: an AG-UI resume (its stream waits
for the reviewer a call is left to, up to ``API_STREAM_MAX_SECONDS``), an approval request's long
poll (``?wait=``, up to a minute) and the MCP gateway's call of a tool that needs approval (as long
as the call waits). Each open one costs a connection and a read every few seconds; without a bound
one token could hold thousands. Each door takes a ``Slot`` before it waits and refuses the answer
past the limit (a 429 with ``Retry-After``, or the MCP tool's error), having changed nothing.

A caller is an account (its username), whichever token or session it comes with. Its slots are
keys in Django's cache, taken with ``add`` (atomic in every backend): per process with the default
local-memory cache, shared by every process when the cache is (Redis, database), as the decision
rate limit is counted. A slot is given back when its answer ends; one whose process died expires
after ``slot_seconds()`` (longer than any answer waits unrenewed), and a wait with no end of its
own (the MCP gateway's) renews its slot as it goes. A caller the transport does not name (an MCP
gateway served without tokens) is not counted.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from django.conf import settings
from django.core.cache import cache

#: How long a slot outlives its last renewal: past the longest answer a door holds open without
#: renewing it (``API_STREAM_MAX_SECONDS``), so only a dead process's slots expire.
SLOT_MARGIN_SECONDS = 60
#: What a refused caller is told to wait before trying again.
RETRY_AFTER_SECONDS = 5


class TooManyWaits(Exception):
    """The caller already keeps ``most`` answers open: this one is refused, nothing done."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.retry_after = RETRY_AFTER_SECONDS
        super().__init__(
            f"This account already keeps {most} answers open that wait for a decision "
            f"(API_OPEN_WAITS_PER_CALLER): try again once one of them has its answer"
        )


def most_open() -> int:
    return max(0, int(getattr(settings, "API_OPEN_WAITS_PER_CALLER", 0) or 0))


def slot_seconds() -> float:
    return float(getattr(settings, "API_STREAM_MAX_SECONDS", 600)) + SLOT_MARGIN_SECONDS


class Slot:
    """One open answer of a caller, held in the cache until ``release`` (idempotent).

    Its key holds a token of its own: a key that went before the answer ended (expired, or evicted
    by a full cache) may have been taken by another answer of the caller since, and giving this
    slot back must not free that one's."""

    def __init__(self, key: str | None, token: str = "") -> None:
        #: None: the limit is off, and the slot holds nothing.
        self.key = key
        self.token = token

    def release(self) -> None:
        # Synchronous: a response's ``close`` calls it, from the handler's thread.
        if self.key is not None:
            key, self.key = self.key, None
            if cache.get(key) == self.token:
                cache.delete(key)

    async def arelease(self) -> None:
        if self.key is not None:
            key, self.key = self.key, None
            if await cache.aget(key) == self.token:
                await cache.adelete(key)

    async def renew(self) -> None:
        """Keep the slot ``slot_seconds()`` more from now (for a wait with no end of its own); one
        whose key went is taken again if it is still free."""
        if self.key is not None:
            if await cache.aget(self.key) == self.token:
                await cache.atouch(self.key, slot_seconds())
            else:
                await cache.aadd(self.key, self.token, timeout=slot_seconds())

    def releasing(self, content: AsyncIterator[bytes]) -> ReleasingStream:
        """``content`` as a response body that gives the slot back when the response is closed."""
        return ReleasingStream(content, self)


class ReleasingStream:
    """A streamed body whose ``close`` gives its slot back.

    Django calls a streamed body's ``close`` when it closes the response, under WSGI and ASGI, also
    when the client went away before the body was read: a stream that was never iterated has no
    ``finally`` of its own to run."""

    def __init__(self, content: AsyncIterator[bytes], slot: Slot) -> None:
        self.content = content
        self.slot = slot

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.content

    def close(self) -> None:
        self.slot.release()


async def take(caller: str | None) -> Slot:
    """A slot for one more open answer of ``caller`` (a username); ``TooManyWaits`` past the limit."""
    most = most_open()
    if most == 0 or caller is None:
        return Slot(None)
    prefix = f"countersign:open-waits:{hashlib.sha256(caller.encode()).hexdigest()[:32]}:"
    keys = [f"{prefix}{n}" for n in range(most)]
    held = await cache.aget_many(keys)
    token = secrets.token_hex(16)
    for key in keys:
        # (``add`` loses to another request taking the same free slot: the next one is tried.)
        if key not in held and await cache.aadd(key, token, timeout=slot_seconds()):
            return Slot(key, token)
    raise TooManyWaits(most)


@asynccontextmanager
async def held(caller: str | None) -> AsyncIterator[Slot]:
    """A slot for the block: ``TooManyWaits`` before it past the limit, given back after it."""
    slot = await take(caller)
    try:
        yield slot
    finally:
        await slot.arelease()
