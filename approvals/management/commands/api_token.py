"""``manage.py api_token create USER --name NAME [--expires-days N] | list [USER] | revoke KEY_ID``.

API tokens for the HTTP API (``/api/``). ``create`` prints the token once; only its salted hash is
kept. A token acts as its user: the agents that user may see and decide, nothing more.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from approvals.models import ApiToken
from approvals.services import tokens


class Command(BaseCommand):
    help = "Create, list or revoke API tokens (create prints the token once)."

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="A new token for USER, printed once.")
        create.add_argument("username")
        create.add_argument("--name", required=True, help="What uses it.")
        create.add_argument(
            "--expires-days", type=int, default=None, help="Days until it expires (default: never)."
        )
        listing = actions.add_parser("list", help="Tokens (of USER), without their secrets.")
        listing.add_argument("username", nargs="?")
        revoke = actions.add_parser("revoke", help="Revoke the token with this key id (cs_<key id>_...).")
        revoke.add_argument("key_id")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            self._create(options["username"], options["name"], options["expires_days"])
        elif action == "list":
            self._list(options["username"])
        else:
            key_id = str(options["key_id"]).removeprefix(tokens.PREFIX).split("_")[0]
            if not tokens.revoke_token(None, key_id):
                raise CommandError(f"No active token with key id {key_id!r}.")
            self.stdout.write(f"Revoked cs_{key_id}_…")

    def _user(self, username: str) -> Any:
        try:
            return get_user_model()._default_manager.get_by_natural_key(username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"No user {username!r}.") from None

    def _create(self, username: str, name: str, days: int | None) -> None:
        if days is not None and days < 1:
            raise CommandError("--expires-days must be at least 1.")
        user = self._user(username)
        expires = timezone.now() + timedelta(days=days) if days else None
        try:
            created = tokens.create_token(user, name=name, expires_at=expires)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"Token {name!r} for {username} (shown once; keep it secret):")
        self.stdout.write(created.plaintext)

    def _list(self, username: str | None) -> None:
        rows = ApiToken.objects.select_related("user").order_by("user__username", "created_at")
        if username:
            rows = rows.filter(user=self._user(username))
        for token in rows:
            expires = token.expires_at.isoformat() if token.expires_at else "never"
            used = token.last_used_at.isoformat() if token.last_used_at else "never"
            self.stdout.write(
                f"cs_{token.key_id}_…  {token.user.get_username()}  {token.name!r}  {token.status}  "
                f"expires {expires}  last used {used}"
            )
