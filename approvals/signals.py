"""Signal receivers the app connects in ``ApprovalsConfig.ready``."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction

from approvals import live


def close_live_sockets(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    """``user_logged_out``: the session's open live sockets close (4401), in every server process."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        transaction.on_commit(partial(live.end_session, session_key), robust=True)
