"""Counting the SQL statements a piece of the app sends, on every thread, the functions it sends
from the event loop to a thread, and the coroutines synchronous code runs on an event loop."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from asgiref.sync import AsyncToSync, SyncToAsync
from django.db.backends.utils import CursorWrapper


class QueryCounter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sql: list[str] = []

    def __len__(self) -> int:
        return len(self.sql)

    def run_reads(self) -> int:
        """How many of the statements read a run by its id (``approvals_run``'s ``run_id``)."""
        return sum(
            1
            for sql in self.sql
            if sql.startswith("SELECT") and 'FROM "approvals_run"' in sql and '"run_id" = %s' in sql
        )


def in_background() -> bool:
    """Whether this thread is the app's background work (deliveries, sweeps, batches: threads named
    ``countersign-...``) rather than a request's: what an earlier step of a test set going (a
    notification's sending, say) may still be doing while the step measured runs."""
    name = threading.current_thread().name
    return name.startswith("countersign-") and not name.startswith("countersign-request")


@contextmanager
def count_queries(*, background: bool = True) -> Iterator[QueryCounter]:
    """Count SQL statements on every connection of every thread (the runtime's store runs in
    worker threads, which ``CaptureQueriesContext`` on this thread's connection would miss); with
    ``background=False``, not those of the app's background threads (``in_background``)."""
    counter = QueryCounter()
    original_execute = CursorWrapper._execute
    original_executemany = CursorWrapper._executemany

    def execute(self: CursorWrapper, sql: str, *args: Any, **kwargs: Any) -> Any:
        if background or not in_background():
            with counter.lock:
                counter.sql.append(sql)
        return original_execute(self, sql, *args, **kwargs)

    def executemany(self: CursorWrapper, sql: str, *args: Any, **kwargs: Any) -> Any:
        if background or not in_background():
            with counter.lock:
                counter.sql.append(sql)
        return original_executemany(self, sql, *args, **kwargs)

    CursorWrapper._execute = execute  # type: ignore[method-assign]
    CursorWrapper._executemany = executemany  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        CursorWrapper._execute = original_execute  # type: ignore[method-assign]
        CursorWrapper._executemany = original_executemany  # type: ignore[method-assign]


@contextmanager
def thread_hops() -> Iterator[list[str]]:
    """The qualified names of the functions sent from an event loop to a thread inside the block
    (``sync_to_async``, Channels' ``database_sync_to_async``): each a round trip through the
    executor and back to the loop."""
    seen: list[str] = []
    original = SyncToAsync.__call__

    async def counted(self: SyncToAsync, *args: Any, **kwargs: Any) -> Any:
        func = getattr(self.func, "__func__", self.func)
        seen.append(f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}")
        return await original(self, *args, **kwargs)

    SyncToAsync.__call__ = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        SyncToAsync.__call__ = original  # type: ignore[method-assign]


@contextmanager
def loops_entered() -> Iterator[list[str]]:
    """The qualified names of the coroutine functions synchronous code ran through ``async_to_sync``
    inside the block: each a trip to an event loop and back to the calling thread."""
    seen: list[str] = []
    original = AsyncToSync.__call__

    def counted(self: AsyncToSync, *args: Any, **kwargs: Any) -> Any:
        func = getattr(self.awaitable, "__func__", self.awaitable)
        seen.append(f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}")
        return original(self, *args, **kwargs)

    AsyncToSync.__call__ = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        AsyncToSync.__call__ = original  # type: ignore[method-assign]
