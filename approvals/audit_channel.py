"""Where the decisions of the current request or command come from, for their audit rows.

A context variable rather than a parameter: the row of a decision that took effect is written by the
run store, deep under the runtime's public API, which knows nothing of channels. asgiref copies the
context into the threads and loops it runs code on, so the store's step sees the value the view set.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

Channel = Literal["dashboard", "api", "cli", "deadline", "grant"]

_channel: ContextVar[Channel] = ContextVar("countersign_audit_channel", default="dashboard")


def current() -> Channel:
    return _channel.get()


@contextmanager
def using(channel: Channel) -> Iterator[None]:
    token = _channel.set(channel)
    try:
        yield
    finally:
        _channel.reset(token)
