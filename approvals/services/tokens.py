"""API tokens: created (shown once), revoked, and checked on each API request.

See ``approvals.models.ApiToken`` for the format and why a salted SHA-256 is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from approvals.models import ApiToken
from approvals.server.database import fixed_models

PREFIX = "cs_"
#: ``last_used_at`` is written at most this often per token: not one write per request.
LAST_USED_PRECISION = timedelta(minutes=1)


class InvalidToken(Exception):
    """Unknown, malformed, revoked or expired token, or its user can no longer log in."""


@dataclass(frozen=True)
class NewToken:
    token: ApiToken
    #: The only time the whole token exists outside the client: show it once.
    plaintext: str


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(f"{salt}:{secret}".encode()).hexdigest()


def create_token(
    user: Any, *, name: str, expires_at: datetime | None = None, external_agent: Any = None
) -> NewToken:
    """A new token of ``user``; with ``external_agent``, that agent's (its account's), which may only
    create and read the agent's approval requests."""
    name = name.strip()
    if not name:
        raise ValueError("A token needs a name")
    if expires_at is not None and expires_at <= timezone.now():
        raise ValueError("The expiry must be in the future")
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    token = ApiToken.objects.create(
        user=user,
        name=name[:100],
        key_id=key_id,
        salt=salt,
        digest=_digest(salt, secret),
        expires_at=expires_at,
        external_agent=external_agent,
    )
    return NewToken(token, f"{PREFIX}{key_id}_{secret}")


def revoke_token(user: Any, key_id: str) -> bool:
    """Revoke one of ``user``'s tokens (``None`` user: anyone's, for the command line)."""
    tokens = ApiToken.objects.filter(key_id=key_id, revoked_at__isnull=True)
    if user is not None:
        tokens = tokens.filter(user=user)
    return tokens.update(revoked_at=timezone.now()) > 0


def authenticate(raw: str) -> Any:
    """The user a token acts as; ``InvalidToken`` otherwise. Records when it was last used."""
    return authenticated(raw).user


def authenticated(raw: str) -> ApiToken:
    """The token ``raw`` is, with its user (and external agent); ``InvalidToken`` otherwise."""
    if not raw.startswith(PREFIX):
        raise InvalidToken("malformed token")
    key_id, sep, secret = raw.removeprefix(PREFIX).partition("_")
    if not sep or not key_id or not secret:
        raise InvalidToken("malformed token")
    # Read on every API request: compiled once (``fixed_models``), not built and compiled each time.
    found = fixed_models("api token", ApiToken, _with_user, key_id=key_id)
    token = found[0] if found else None
    if token is None or not hmac.compare_digest(token.digest, _digest(token.salt, secret)):
        raise InvalidToken("unknown token")
    if not token.is_active:
        raise InvalidToken(f"{token.status} token")
    if not token.user.is_active:
        raise InvalidToken("inactive user")
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_PRECISION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def _with_user(key_id: str) -> Any:
    return ApiToken.objects.select_related("user", "external_agent").filter(key_id=key_id)
