"""The notification settings (``config/settings.py``, from the environment), read when used."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def collapse_seconds() -> float:
    """Calls parked on one agent within this long of the first make one message."""
    return float(_setting("NOTIFY_COLLAPSE_SECONDS", 10))


def reminder_before_seconds() -> float:
    """A reminder goes out this long before a call's deadline; 0: no reminders."""
    return float(_setting("NOTIFY_REMINDER_BEFORE_SECONDS", 900))


def listed_calls() -> int:
    """How many calls a message lists (the rest are counted)."""
    return int(_setting("NOTIFY_LIST_CALLS", 5))


def retry_seconds() -> list[float]:
    return [float(s) for s in _setting("NOTIFY_RETRY_SECONDS", [10, 60, 300, 1800, 7200])]


def give_up_seconds() -> float:
    return float(_setting("NOTIFY_GIVE_UP_SECONDS", 6 * 3600))


def timeout_seconds() -> float:
    """One chat POST's timeout (mail has Django's ``EMAIL_TIMEOUT``)."""
    return float(_setting("NOTIFY_TIMEOUT_SECONDS", 10))


def chat_hosts() -> list[str]:
    """Hosts a chat webhook URL may name (empty: any)."""
    return [str(h).lower() for h in _setting("NOTIFY_CHAT_HOSTS", [])]
