"""Django's PostgreSQL backend, its pool being ours (``approvals.server.database.ConnectionPool``).

Django builds psycopg's pool itself and has no setting for the pool's class, so this backend
(``ENGINE = "approvals.server.postgresql"``, set by ``config/settings.py``) builds it the same way
(Django 6.1's ``DatabaseWrapper.pool``) with ours and its ``unreachable_after``
(``DATABASE_UNREACHABLE_SECONDS``). Everything else is Django's. Delete it with the pool class.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base

from approvals.server.database import ConnectionPool


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> Any:
        options = self.settings_dict["OPTIONS"].get("pool")
        pools: dict[str, Any] = self._connection_pools  # type: ignore[attr-defined]
        if (
            options
            and self.alias != NO_DB_ALIAS
            and self.alias not in pools
            and self.settings_dict.get("CONN_MAX_AGE", 0) == 0  # (else Django's refusal, below)
        ):
            connect_kwargs = self.get_connection_params()
            connect_kwargs["autocommit"] = True
            options = {} if options is True else {**options}
            options.setdefault(
                "check", ConnectionPool.check_connection if self.settings_dict["CONN_HEALTH_CHECKS"] else None
            )
            pool = ConnectionPool(
                kwargs=connect_kwargs,
                open=False,
                configure=self._configure_connection,  # type: ignore[attr-defined]
                unreachable_after=float(getattr(settings, "DATABASE_UNREACHABLE_SECONDS", 1.0)),
                **options,
            )
            pools.setdefault(self.alias, pool)
        return super().pool
