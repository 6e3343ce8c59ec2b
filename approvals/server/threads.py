"""Which thread runs database work for async code, and how every such thread gives its connection back.

Django's database connections belong to threads. Under Daphne each HTTP request has one thread of its
own for its synchronous code (sync middleware, the view). Two rules keep a request to one connection
at a time and return every connection to the pool:

- ``run_sync``: the run store's methods, called by the runtime from async code, run thread-sensitive.
  Under a view that called the runtime through ``async_to_sync``, that is the request's own thread, on
  the connection the request already holds; never a worker thread that would need a second one (ten
  requests holding a pool of ten while their worker threads waited for an eleventh deadlocked the
  pool). The same goes for ``db_worker`` and management commands. From purely async code (consumers,
  the outbox relay) it is asgiref's one shared thread, which no request cycle cleans up; the store
  gives the connection back after each call there (``DjangoRunStore._connection_scope``), as Channels'
  ``database_sync_to_async`` does for other ORM calls.
- ``RequestThreads``: each request's thread closes its connections once it has nothing left to run,
  even when the request was cancelled (the client went away) while its view still ran. Django's own
  clean-up (``request_finished``) is skipped or fails in that case, and the thread then ended holding
  its connection: a pool slot lost for good, until a server had none left.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import connections

ASGIApp = Callable[..., Any]


async def run_sync[T](fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on the thread that owns the caller's database connection (see above)."""
    return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)


class RequestThreads:
    """ASGI middleware: one thread at a time per HTTP request for its sync code, whose connections
    are closed when it is done, whatever became of the request.

    This is the thread Django would give the request anyway (its handler enters a
    ``ThreadSensitiveContext`` of its own, which defers to this one); the differences are the ending
    and the reuse. The clean-up is queued on the thread itself, so it runs after anything the thread
    still has to do (a view outliving its cancelled request) and no cancellation can drop it. Only
    once it has run does the thread wait for the next request: starting a thread per request cost
    a quarter of a millisecond on the event loop.
    """

    #: Threads kept waiting for requests beyond those busy; more are ended.
    IDLE_THREADS = 32

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._idle: list[ThreadPoolExecutor] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            executor = self._idle.pop()
        except IndexError:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="countersign-request")
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
        finally:
            executor.submit(connections.close_all).add_done_callback(lambda _: self._release(executor))

    def _release(self, executor: ThreadPoolExecutor) -> None:
        # (Once its clean-up is done: on the executor's thread, or on the loop's if it was done before
        # the callback was added; list appends and pops are atomic either way.)
        if len(self._idle) < self.IDLE_THREADS:
            self._idle.append(executor)
        else:
            executor.shutdown(wait=False)
