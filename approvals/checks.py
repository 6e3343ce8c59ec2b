"""System checks of the settings (``manage.py check``; ``check --deploy`` runs them too) and the
refusal to serve that goes with them.

The public ``SECRET_KEY``: ``config/settings.py`` falls back to a key committed to the repository so
that ``make run`` works out of the box (and ``deploy/countersign.env`` carries a placeholder). Anyone
can read them, and with them forge sessions and signed links, so a server with ``DEBUG`` off refuses
to start with one (``config/asgi.py``, ``config/wsgi.py``) and ``check --deploy`` fails on it
whatever ``DEBUG`` says.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

#: How Django marks a key not to deploy (``startproject``'s keys); the fallback carries it.
_INSECURE_PREFIX = "django-insecure-"
#: Placeholders the repository's deployment files carry (``deploy/countersign.env``).
_PLACEHOLDERS = frozenset({"change-me"})

PUBLIC_SECRET_KEY_MESSAGE = (
    "SECRET_KEY is the public development default (it is in the repository: anyone could forge "
    "sessions and signed links with it). Set SECRET_KEY to a long random value, e.g. the output of "
    "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`, or DEBUG=true on a laptop."
)


def public_secret_key() -> bool:
    key = str(settings.SECRET_KEY or "").strip()
    return not key or key.startswith(_INSECURE_PREFIX) or key in _PLACEHOLDERS


def register_checks() -> None:
    """Called once, as the app is ready."""
    register(check_secret_key, Tags.security, deploy=True)
    register(check_undo_window)


UNDO_WITHOUT_SWEEP_MESSAGE = (
    "DECISION_UNDO_SECONDS holds browser decisions for Undo, and the sweep takes them when their "
    "window ends, but EXPIRY_SWEEP is off: no process would take them. Set DECISION_UNDO_SECONDS=0, "
    "or let a process sweep (EXPIRY_SWEEP=server or worker)."
)


def check_undo_window(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Held decisions are taken by the sweep only: none with the sweep off."""
    from approvals import tasks

    if int(getattr(settings, "DECISION_UNDO_SECONDS", 0) or 0) > 0 and tasks.mode() == "off":
        return [Warning(UNDO_WITHOUT_SWEEP_MESSAGE, id="countersign.W001")]
    return []


def check_secret_key(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``check --deploy``: the public key is an error, not Django's warning (W009)."""
    if not public_secret_key():
        return []
    return [Error(PUBLIC_SECRET_KEY_MESSAGE, id="countersign.E001")]


def refuse_public_secret_key() -> None:
    """``ImproperlyConfigured`` when ``DEBUG`` is off and ``SECRET_KEY`` is the public default: the
    servers call it before they serve anything."""
    if not settings.DEBUG and public_secret_key():
        raise ImproperlyConfigured(PUBLIC_SECRET_KEY_MESSAGE)
