"""Sending recorded deliveries in the background: a lease per attempt, a retry schedule, no waiting.

Shared by webhooks (``approvals.webhooks.sending``) and notifications
(``approvals.notifications.sending``). A delivery is a row with ``status`` (pending, sending, then
its kind's done status or failed), ``attempts``, ``last_error``, ``created_at``, ``next_attempt_at``
and ``claimed_until``. An attempt claims the row first (a lease), so two senders never send the same
attempt, and an attempt cut off mid-send is taken again once its lease runs out. A failed attempt is
retried after ``retry_seconds()[attempts - 1]`` until the schedule ends or the next try would fall
more than ``give_up_seconds()`` after the row was made: then the row is ``failed``.

Each attempt is a ``django.tasks`` task. With a backend that defers (the database backend, run by
``db_worker``) a retry is a task due later; the Immediate backend would run the task inside the
request that made the event, so there each delivery goes on in a thread of its own instead, and a
delivery whose thread died with its process (a restart) is picked up by ``schedule_orphans`` (the
server's background sweep, ``approvals.tasks``). A wait longer than ``LONG_WAIT`` (a daily digest, a
late retry) is no thread at all: the row waits in the database, and the sweep hands it to a sender
once it is due (a thread asleep for a day per reviewer would be lost with a restart anyway).
``stop_senders`` wakes those threads and ends them without another attempt, their rows left to the
sweep: a test's end, so that no thread of one test wakes in the next and sends that test's row of
the same id.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import close_old_connections, models
from django.db.models import Q
from django.tasks import Task
from django.tasks.backends.immediate import ImmediateBackend
from django.utils import timezone

logger = logging.getLogger(__name__)

#: How long past its time a delivery waits for the thread that should send it before it counts as
#: orphaned (that thread's process is gone).
ORPHAN_GRACE = timedelta(seconds=30)

#: With the Immediate backend, an attempt due later than this is left to the sweep (see above).
LONG_WAIT = timedelta(minutes=5)

#: The Immediate backend's sender threads of this process, and the event that stops the current ones.
_senders: set[threading.Thread] = set()
_senders_lock = threading.Lock()
_stop = threading.Event()


def stop_senders(timeout: float = 5.0) -> int:
    """Wake every sender thread, end it before its next attempt, and wait for it (an attempt under
    way finishes first; at most ``timeout`` seconds a thread). How many threads there were. Threads
    started afterwards wait as usual."""
    global _stop
    with _senders_lock:
        stopping, _stop = _stop, threading.Event()
        threads = list(_senders)
    stopping.set()
    for thread in threads:
        thread.join(timeout)
    return len(threads)


@dataclass(frozen=True)
class Outbox[M: models.Model]:
    """One kind of delivery: its table, how one attempt sends, and its schedule."""

    model: type[M]
    #: One attempt: the error ("" when it went). May set fields of the row, which are saved with it.
    send: Callable[[M], str]
    #: The task whose body is ``run_task(pk)``.
    task: Task[[int], None]
    lease_seconds: Callable[[], float]
    retry_seconds: Callable[[], Sequence[float]]
    give_up_seconds: Callable[[], float]
    done_status: str
    done_at_field: str
    #: For the log line of a delivery given up, and the name of its thread.
    name: str
    describe: Callable[[M], str] = str
    select_related: tuple[str, ...] = ()

    def claim(self, pk: int, *, force: bool = False) -> M | None:
        """Take the row for one attempt, if it is due and no other sender holds it."""
        now = timezone.now()
        waiting = Q(status="pending") & (Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        if not force:
            waiting &= Q(next_attempt_at__lte=now)
        # A sender that died mid-attempt leaves it "sending": its lease running out makes it due again.
        due = Q(pk=pk) & (waiting | Q(status="sending", claimed_until__lt=now))
        manager = self.model._default_manager
        lease = timedelta(seconds=self.lease_seconds())
        if not manager.filter(due).update(status="sending", claimed_until=now + lease):
            return None
        return manager.select_related(*self.select_related).get(pk=pk)

    def attempt(self, pk: int, *, force: bool = False) -> float | None:
        """Send one attempt of a due row; the delay to the next attempt, or ``None`` when done."""
        row = self.claim(pk, force=force)
        if row is None:
            return None
        try:
            error = self.send(row)
        except Exception as exc:  # a bug in building the message must not leave the row "sending"
            logger.exception("%s %s: sending raised", self.name, pk)
            error = f"{type(exc).__name__}: {exc}"[:1000]
        return self._settle(row, error)

    def _settle(self, row: Any, error: str) -> float | None:
        now = timezone.now()
        row.attempts += 1
        row.claimed_until = None
        row.last_error = error
        if not error:
            row.status = self.done_status
            setattr(row, self.done_at_field, now)
            row.save()
            return None
        retries = tuple(self.retry_seconds())
        delay = float(retries[row.attempts - 1]) if row.attempts <= len(retries) else None
        if delay is None or (now + timedelta(seconds=delay) - row.created_at).total_seconds() > (
            self.give_up_seconds()
        ):
            row.status = "failed"
            row.save()
            logger.warning("%s %s failed for good: %s", self.name, self.describe(row), error)
            return None
        row.status = "pending"
        row.next_attempt_at = now + timedelta(seconds=delay)
        row.save()
        return delay

    def run_task(self, pk: int) -> None:
        """The task's body: one attempt; a failed one schedules the next."""
        delay = self.attempt(pk)
        if delay is not None:
            self.schedule(pk, delay)

    def _in_thread(self, pk: int, delay: float) -> None:
        def run(stop: threading.Event) -> None:
            wait: float | None = delay
            try:
                # (A long wait is the sweep's: the row says when it is due.)
                while wait is not None and wait <= LONG_WAIT.total_seconds():
                    if stop.wait(wait):
                        return  # stopped: the row is the sweep's
                    wait = self.attempt(pk)
            except Exception:
                logger.exception("%s %s: sending failed", self.name, pk)
            finally:
                # Closing checks the connection, which can fail too (the database gone): the thread
                # ends quietly either way, its row the sweep's.
                with contextlib.suppress(Exception):
                    close_old_connections()
                with _senders_lock:
                    _senders.discard(threading.current_thread())

        with _senders_lock:
            thread = threading.Thread(
                target=run, args=(_stop,), name=f"countersign-{self.name}-{pk}", daemon=True
            )
            _senders.add(thread)
        thread.start()

    def immediate(self) -> bool:
        return isinstance(self.task.get_backend(), ImmediateBackend)

    def schedule(self, pk: int, delay: float) -> None:
        """Attempt the row ``delay`` seconds from now, without waiting for it."""
        backend = self.task.get_backend()
        if isinstance(backend, ImmediateBackend) and delay > LONG_WAIT.total_seconds():
            return  # due later: the sweep's (schedule_orphans), from the row's next_attempt_at
        if isinstance(backend, ImmediateBackend) or not backend.supports_defer:
            self._in_thread(pk, delay)
            return
        when: datetime = timezone.now() + timedelta(seconds=delay)
        self.task.using(run_after=when).enqueue(pk)

    def schedule_orphans(self) -> int:
        """Rows no sender holds any more (their threads died with a restart): attempted again; how
        many. Only for the Immediate backend: another keeps its retries as tasks of its queue."""
        if not self.immediate():
            return 0
        now = timezone.now()
        orphans = list(
            self.model._default_manager.filter(
                Q(status="pending", next_attempt_at__lte=now - ORPHAN_GRACE)
                | Q(status="sending", claimed_until__lt=now)
            ).values_list("pk", flat=True)[:500]
        )
        for pk in orphans:
            self.schedule(pk, 0.0)
        return len(orphans)

    def send_due(self) -> int:
        """Every pending row that is due, one attempt each (a management command)."""
        due = self.model._default_manager.filter(status="pending", next_attempt_at__lte=timezone.now())
        sent = 0
        for pk in list(due.values_list("pk", flat=True)):
            delay = self.attempt(pk)
            sent += 1
            if delay is not None:
                self.schedule(pk, delay)
        return sent
