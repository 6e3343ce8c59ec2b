"""What the run store's parts share: its settings, its tables, reading one run (after lease reclaim),
taking back runs whose claim ran out, and giving back connections. ``DjangoRunStore`` owns one
``Tables`` and hands it to its parts (decisions, grants, deadlines)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections, transaction

from agents_runtime.vocabulary import INTERRUPTED_AFTER_START_DETAIL, INTERRUPTED_DETAIL, Outcome
from approvals.models import (
    AuditEntry,
    ParkedCallRecord,
    ParkedCallRecordQuerySet,
    RunRecord,
    RunRecordQuerySet,
    RunStatus,
)
from approvals.store.records import (
    CALL_COLUMNS,
    Row,
    one_run_rows,
    overturned,
    utc,
)
from approvals.store.sql import EXPIRED_SQL

logger = logging.getLogger(__name__)

_DEFAULT_LEASE_SECONDS = 300


def utc_now() -> datetime:
    return datetime.now(UTC)


class Tables:
    """Where and how the run store keeps runs: on the default database (or ``using``); safe to share
    between threads.

    ``lease`` defaults to ``settings.RUN_LEASE_SECONDS`` (300), read when first needed. Building a
    store never touches the database, so it may be built at import time.
    """

    def __init__(
        self,
        lease: timedelta | None = None,
        *,
        using: str = "default",
        listings_using: str | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._lease = lease
        self.using = using
        #: Where listings are read (a read replica: ``DATABASE_REPLICA_URL``); the rest is on ``using``.
        self.listings_using = listings_using or using
        #: Where "now" comes from (lease expiry); tests move it instead of sleeping.
        self.clock = clock

    @property
    def lease(self) -> timedelta:
        if self._lease is not None:
            return self._lease
        return timedelta(seconds=getattr(settings, "RUN_LEASE_SECONDS", _DEFAULT_LEASE_SECONDS))

    @lease.setter
    def lease(self, value: timedelta) -> None:
        self._lease = value

    # -- plumbing ---------------------------------------------------------------------------------

    def runs(self) -> RunRecordQuerySet:
        return RunRecord.objects.using(self.using)

    def calls(self) -> ParkedCallRecordQuerySet:
        return ParkedCallRecord.objects.using(self.using)

    def user(self, username: str) -> Any:
        """The user of that name (who made a grant or a rule), or None if there is none."""
        model = get_user_model()
        return (
            model._default_manager.db_manager(self.using).filter(**{model.USERNAME_FIELD: username}).first()
        )

    @contextmanager
    def connection_scope(self, using: str | None = None) -> Iterator[None]:
        """Give a server connection back after each call made outside a transaction.

        From purely async code the runtime's calls run on asgiref's shared thread (``run_sync``),
        which Django's request cycle never cleans up: without this it would keep a PostgreSQL
        connection (a pool slot) for its lifetime. In a request, the connection is not held while the
        run waits on a model. Only closed when ``CONN_MAX_AGE`` says so. SQLite connections are a
        file handle, cheap to keep and slow to reopen (pragmas), so they stay with their thread.
        """
        try:
            yield
        finally:
            connection = connections[using or self.using]
            if connection.in_atomic_block:
                pass
            elif connection.vendor != "sqlite":
                connection.close_if_unusable_or_obsolete()
            elif connection.errors_occurred and not connection.is_usable():
                connection.close()

    def one_run(
        self, run_id: str, *, agent_id: str | None = None, with_snapshot: bool, lock: bool = False
    ) -> tuple[Row, list[Row]] | None:
        """One run row (of ``agent_id``'s, if given) and its call rows, in one query (a LEFT JOIN; the
        run row locked if asked)."""
        rows = one_run_rows(
            self.using, run_id=run_id, agent_id=agent_id, with_snapshot=with_snapshot, lock=lock
        )
        if not rows:
            return None
        run = {name: value for name, value in rows[0].items() if not name.startswith("calls__")}
        calls: list[Row] = [
            {name: row[f"calls__{name}"] for name in CALL_COLUMNS if name != "run_id"} | {"run_id": run["pk"]}
            for row in rows
            if row["calls__id"] is not None
        ]
        return run, calls

    def current_run(
        self, run_id: str, *, agent_id: str | None = None, with_snapshot: bool, lock: bool = False
    ) -> tuple[Row, list[Row]] | None:
        """``one_run`` as of after lease reclaim: a run whose claim ran out comes back suspended.

        Only this run is checked (its row says when its lease ends), not every claimed run: a
        global sweep would cost a query on every decision. A sub-agent's run also changes when its
        supervisor is reclaimed, so for those the sweep runs after all.
        """
        found = self.one_run(run_id, agent_id=agent_id, with_snapshot=with_snapshot, lock=lock)
        if found is None:
            return None
        row = found[0]
        now = self.clock()
        expires = row["lease_expires_at"]
        if row["status"] == RunStatus.RUNNING and expires is not None and utc(expires) < now:
            self.reclaim(row["pk"], row["version"], now)
        elif row["parent_run_id"] is None or not self.reclaim_expired():
            return found
        return self.one_run(run_id, agent_id=agent_id, with_snapshot=with_snapshot, lock=lock)

    # -- lease reclaim ----------------------------------------------------------------------------

    def reclaim_expired(self) -> list[tuple[str, str]]:
        """Suspend again every claimed run whose lease ran out (an indexed probe; usually empty).

        ``(agent_id, run_id)`` of each run it reclaimed.
        """
        now = self.clock()
        # Raw SQL: this runs before every listing, and the ORM would double its cost.
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(EXPIRED_SQL, [connection.ops.adapt_datetimefield_value(now)])
            expired = cursor.fetchall()
        reclaimed = (self.reclaim(pk, version, now) for pk, version in expired)
        return [run for run in reclaimed if run is not None]

    def reclaim(self, pk: int, version: int, now: datetime) -> tuple[str, str] | None:
        """Suspend the run again if its claim at ``version`` ran out: its ``(agent_id, run_id)``."""
        with transaction.atomic(using=self.using):
            held = self.runs().select_for_update().filter(pk=pk, version=version, lease_expires_at__lt=now)
            run = held.running().values("pk", "agent_id", "run_id", "version", "history").first()
            if run is None:  # renewed, finished or reclaimed by someone else meanwhile
                return None
            started = self.park_again(run, suspend=True)
            audit = AuditEntry.objects.using(self.using)
            if started:
                audit.settle(
                    run["run_id"],
                    Outcome.INTERRUPTED,
                    INTERRUPTED_AFTER_START_DETAIL,
                    tool_call_ids=started,
                )
            audit.settle(run["run_id"], Outcome.INTERRUPTED, INTERRUPTED_DETAIL)
            inner_runs = self.runs().select_for_update().children_of(run["run_id"])
            for inner in inner_runs.suspended().values("pk", "run_id", "version", "history"):
                self.park_again(inner, suspend=False)
            # One its continuation claimed but had not started yet when it died waits again too.
            unstarted = inner_runs.running().filter(lease_expires_at=None)
            for inner in unstarted.values("pk", "run_id", "version", "history"):
                self.park_again(inner, suspend=True)
        logger.warning(
            "Run %s: its continuation lost the lease; its calls wait for a decision again", run["run_id"]
        )
        return run["agent_id"], run["run_id"]

    def park_again(self, run: Row, *, suspend: bool) -> list[str]:
        """Move the run's decisions to its history and clear them (inside a transaction).

        Returns the decided calls whose tool had started (they keep their ``tool_started_at``).
        """
        decided = list(
            self.calls().filter(run=run["pk"]).decided().order_by("position").values(*CALL_COLUMNS)
        )
        if not decided and not suspend:
            return []
        history = run["history"] if isinstance(run["history"], list) else []
        self.calls().filter(pk__in=[row["id"] for row in decided]).update(
            action=None,
            actor=None,
            decided_at=None,
            reason=None,
            resume_data=None,
            edited_args=None,
            votes=[],
        )
        changes: dict[str, Any] = {
            "version": run["version"] + 1,
            "interrupted": True,
            "history": [*history, *(overturned(row) for row in decided)],
        }
        if suspend:
            changes.update(status=RunStatus.SUSPENDED, lease_expires_at=None)
        self.runs().filter(pk=run["pk"], version=run["version"]).update(**changes)
        return [row["tool_call_id"] for row in decided if row["tool_started_at"] is not None]
