"""How the runtime calls its store's synchronous methods from async code.

Store methods are synchronous and may block (a database), so they never run on the event loop. By
default each call runs in a worker thread (``asyncio.to_thread``). A store whose methods must run on
a particular thread says so by defining ``run_sync`` (``SyncRunner``): the Django store runs them on
the thread that holds the caller's database connection, so a request never needs a second one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class SyncRunner(Protocol):
    """Optional for a ``RunStore``: runs one of its synchronous methods for async callers."""

    async def run_sync[T](self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` run off the event loop where this store wants it; its result."""
        ...


async def call_store[**P, T](store: object, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` (a method of ``store``) run off the event loop, where ``store`` says."""
    if isinstance(store, SyncRunner):
        return await store.run_sync(fn, *args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)
