"""How many database queries this process makes, and how many of them on the way of a live message.

For ``bench/push_latency.py`` and the tests: with ``COUNTERSIGN_QUERY_COUNTS`` set to a directory,
every query through Django's cursors in this process is counted (all connections, all threads), and a
thread writes the counts to ``<directory>/<pid>.json`` every ``WRITE_SECONDS``. A query counts under
``fanout`` while it runs on behalf of ``Fanout``'s delivery of a layer message to the process's pages
(the context of its pump, which ``database_sync_to_async`` carries into its threads), else ``other``
(connects, session re-checks, the expiry sweep, requests). Off unless the variable is set.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from django.db.backends.utils import CursorWrapper

ENVIRONMENT_VARIABLE = "COUNTERSIGN_QUERY_COUNTS"
WRITE_SECONDS = 0.1

#: What the running code is doing for the live layer ("fanout" inside ``Fanout``'s delivery).
path: ContextVar[str] = ContextVar("countersign_live_path", default="other")

_lock = threading.Lock()
_counts: dict[str, int] = {}
_original = getattr(CursorWrapper, "_execute_with_wrappers")  # noqa: B009 (untyped in the stubs)


def _counted(self: CursorWrapper, sql: str, params: Any, many: bool, executor: Any) -> Any:
    key = path.get()
    with _lock:
        _counts[key] = _counts.get(key, 0) + 1
    return _original(self, sql, params, many, executor)


def snapshot() -> dict[str, int]:
    """The queries counted so far, by what they were for (``fanout``, ``other``)."""
    with _lock:
        return {"fanout": 0, "other": 0, **_counts}


def _start() -> None:
    setattr(CursorWrapper, "_execute_with_wrappers", _counted)  # noqa: B010


def _stop() -> None:
    setattr(CursorWrapper, "_execute_with_wrappers", _original)  # noqa: B010


@contextmanager
def counting() -> Iterator[None]:
    """Count the queries made inside, in every thread (tests: read ``snapshot()``)."""
    with _lock:
        _counts.clear()
    _start()
    try:
        yield
    finally:
        _stop()


_writing = False


def install_from_environment() -> None:
    """Count, and write the counts, when ``COUNTERSIGN_QUERY_COUNTS`` names a directory."""
    global _writing
    directory = os.environ.get(ENVIRONMENT_VARIABLE, "")
    if not directory or _writing:
        return
    _writing = True
    _start()
    target = Path(directory) / f"{os.getpid()}.json"

    def write() -> None:
        while True:
            scratch = target.with_suffix(".tmp")
            scratch.write_text(json.dumps({**snapshot(), "at": time.monotonic()}))
            scratch.replace(target)
            time.sleep(WRITE_SECONDS)

    threading.Thread(target=write, name="countersign-query-counts", daemon=True).start()
