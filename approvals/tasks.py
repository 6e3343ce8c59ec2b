"""Work done in the background: decided runs go on in ``django.tasks`` tasks, and a sweep keeps time.

Continuations: with the default Immediate backend the task runs at once, inside the request that
decided; with the database backend (``TASKS_BACKEND=database``) a ``manage.py db_worker`` process
runs it. Either way the claim was taken by compare-and-swap when the last decision was recorded, so a
task that runs twice, or late, changes nothing the second time.

The sweep makes deadlines happen on time with no page open: it expires due calls, every second.
Before them it takes the decisions held for an undo window that ended (``services.commit_held``):
held decisions are rows, so whichever process sweeps after a restart takes them.
It also parks again, and announces, each run whose continuation died (its lease ran out without a
heartbeat: its process was killed), so the run shows as stopped on every open page and its deciders
are told, whether or not anybody lists the inbox (``Runtime.reclaim_stopped``).

One place runs it, chosen by ``settings.EXPIRY_SWEEP``: ``"server"`` (the default without a task
worker: each ASGI server process, started by ``config/asgi.py``), ``"worker"`` (the default with
``TASKS_BACKEND=database``: the ``manage.py db_worker`` process, started by ``ApprovalsConfig``) or
``"off"``. Several sweepers at once are harmless: an expiry is a decision through the store's atomic
step, so a call expires once whoever sweeps. The sweep runs right away when it starts, so calls that
fell due while nothing ran (a restart) expire at once. With ``"worker"``, the server processes still
watch for runs whose continuation died (``stopped_runs``): the worker may be what died.

The same thread also hands webhook deliveries and notifications orphaned by a restart to a sender,
every ``ORPHAN_SWEEP_SECONDS`` (``webhooks.sending.schedule_orphans``, ``notifications``), and
records the reminders of deadlines near, each sweep (``notifications.remind_due``), and writes down
the address pages are served at when it changed (``site.save``: links in messages). With them it
queues again the continuations a queue lost (``Sweeper.requeue_unstarted``).

The sweep is a daemon thread with its own event loop; the runtime's store calls run on one database
thread of its own (never asgiref's shared one, which the server's sockets use), which gives its
connection back after each sweep. ``stop()`` ends both (tests).

An expired run goes on (the model hears nobody answered, or the tool runs) as any decided run does:
queued for the ``db_worker`` with the database task backend. With the Immediate backend the task
would run inside the sweep, one run after the other, and every later expiry would wait for them: the
sweep hands those to ``Continuations`` instead, a few threads of their own.

A decided run waits in its queue without a lease, however long the queue (the continuation takes
the lease when it starts), so a worker that falls behind never undoes approvals; one continued at
once, in the request that decided (``Scheduler.runs_at_once``), gets its lease with the decision.
A continuation lost from its queue (one still in ``Continuations`` when the process ended, or taken
by a ``db_worker`` that died before starting it) is queued again by the sweep once its run has waited
a lease since its last decision and no queue holds it; should two continuations of one claim still
meet, only one starts (``RunStore.start_continuation``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from datetime import datetime
from typing import Any, cast

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.db import close_old_connections, connections
from django.tasks import TaskResultStatus, task
from django.tasks.backends.immediate import ImmediateBackend
from django.utils import timezone

from agents_runtime import AgentRunToolCall, Continuation, RunResult
from approvals import agents, live, notifications, services, site
from approvals.health import rollup as health_rollup
from approvals.models import using_channel
from approvals.webhooks import sending


@task
async def continue_run(agent_id: str, run_id: str, version: int) -> dict[str, Any]:
    return result_to_json(await _continue(Continuation(agent_id, run_id, version)))


async def _continue(continuation: Continuation) -> RunResult:
    agent = await agents.aget(continuation.agent_id)
    # Best effort: a page that misses output still refetches how the run ended from its events.
    # (Started inside: the run's events go out with its output.)
    async with live.RunOutput(continuation.agent_id) as output:
        stream = agent.continue_run(
            continuation.run_id,
            version=continuation.version,
            claimed=continuation.claimed,
            started=continuation.started,
        )
        async for chunk in stream:
            await output.send(chunk)
    return await stream.result()


#: Where a continuation goes instead of running at once under the Immediate backend, while set: the
#: expiry sweep's own threads (below), so that no continuation makes the next
#: expiry late.
handoff: ContextVar[Callable[[Continuation], None] | None] = ContextVar("handoff", default=None)


class Scheduler:
    """The runtime's scheduler (``Runtime.scheduler``, installed by ``apps.compose``): a task on the
    configured backend, run here and now when the backend would run it at once anyway."""

    @staticmethod
    def runs_at_once() -> bool:
        """Whether the continuation it is given next runs here and now (the Immediate backend, not
        handed to the sweep's threads): the runtime's decision then takes the claim's lease in its
        own statement, there being no queue to wait in."""
        return isinstance(continue_run.get_backend(), ImmediateBackend) and handoff.get() is None

    async def __call__(self, continuation: Continuation) -> RunResult | None:
        """Enqueue, and return the result when the backend ran it already."""
        if self.runs_at_once():
            # Run it here, with the run the decision claimed (no read back). Like the backend, a
            # continuation that breaks fails the task, not the decision.
            try:
                return await _continue(continuation)
            except Exception:
                logger.exception("The continuation of run %s failed", continuation.run_id)
                return None
        hand = handoff.get()
        if hand is not None and isinstance(continue_run.get_backend(), ImmediateBackend):
            hand(continuation)
            return None
        task_result = await continue_run.aenqueue(
            continuation.agent_id, continuation.run_id, continuation.version
        )
        if task_result.status == TaskResultStatus.SUCCESSFUL:
            return result_from_json(cast(dict[str, Any], task_result.return_value))
        return None


@task
def decide_batch(batch_id: int) -> dict[str, int]:
    return services.batch_run(batch_id)


#: Batches deciding on threads of this process (the Immediate backend), by batch id.
batch_threads: dict[int, threading.Thread] = {}


def enqueue_batch(batch_id: int) -> None:
    """Decide a started batch in the background, whatever the page that started it does next.

    The database backend queues it for a ``db_worker``. The Immediate backend would run it inside
    the request that started it, so the page would wait for the last call; it runs on a thread of
    its own instead, which gives its database connections back when it is done.
    """
    if not isinstance(decide_batch.get_backend(), ImmediateBackend):
        decide_batch.enqueue(batch_id)
        return

    def run() -> None:
        try:
            decide_batch.enqueue(batch_id)
        finally:
            connections.close_all()
            batch_threads.pop(batch_id, None)

    thread = threading.Thread(target=run, name=f"countersign-batch-{batch_id}", daemon=False)
    batch_threads[batch_id] = thread
    thread.start()


def continuation_result(run_id: str) -> RunResult | None:
    """How the latest background continuation of ``run_id`` ended, when the task backend keeps results.

    Only the database backend does; with the Immediate backend the deciding request saw the result
    itself (and recorded it in the audit log). ``status == "running"`` while the task waits or runs.
    """
    from django_tasks_db.backend import DatabaseBackend
    from django_tasks_db.models import DBTaskResult

    if not isinstance(continue_run.get_backend(), DatabaseBackend):
        return None
    row = (
        DBTaskResult.objects.filter(task_path=continue_run.module_path, args_kwargs__args__1=run_id)
        .order_by("-enqueued_at")
        .only("status", "return_value")
        .first()
    )
    if row is None:
        return None
    if row.status == TaskResultStatus.SUCCESSFUL and isinstance(row.return_value, dict):
        return result_from_json(row.return_value)
    if row.status == TaskResultStatus.FAILED:
        return RunResult(run_id=run_id, status="failed", error="The background continuation failed.")
    return RunResult(run_id=run_id, status="running")


def waits_for_a_worker(continuation: Continuation) -> bool:
    """Whether the database backend's queue still holds ``continuation``, not yet taken by a worker
    (False with the Immediate backend, whose queues live in processes)."""
    from django_tasks_db.backend import DatabaseBackend
    from django_tasks_db.models import DBTaskResult

    if not isinstance(continue_run.get_backend(), DatabaseBackend):
        return False
    queued = DBTaskResult.objects.filter(
        task_path=continue_run.module_path,
        status=TaskResultStatus.READY,
        args_kwargs__args__1=continuation.run_id,
        args_kwargs__args__2=continuation.version,
    )
    return queued.exists()


def result_to_json(result: RunResult) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "status": result.status,
        "text": result.text,
        "error": result.error,
        "tool_calls": [_call_to_json(call) for call in result.tool_calls],
    }


def _call_to_json(call: AgentRunToolCall) -> dict[str, Any]:
    data = dataclasses.asdict(call)
    for name in _TIMES:
        value = getattr(call, name)
        data[name] = None if value is None else value.isoformat()
    return data


#: The datetimes of a call, as ISO text in a task's JSON result.
_TIMES = ("tool_started_at", "expires_at")


def _call_from_json(data: dict[str, Any]) -> AgentRunToolCall:
    times = {name: None if data.get(name) is None else datetime.fromisoformat(data[name]) for name in _TIMES}
    return AgentRunToolCall(**{**data, **times})


def result_from_json(data: dict[str, Any]) -> RunResult:
    return RunResult(
        run_id=data["run_id"],
        status=data["status"],
        text=data.get("text"),
        error=data.get("error"),
        tool_calls=[_call_from_json(call) for call in data.get("tool_calls") or []],
    )


# -- the sweep ---------------------------------------------------------------------------------------

logger = logging.getLogger(__name__)

#: How often the sweep looks for due calls: an expiry happens at most this long after its deadline
#: (plus the sweep's own time). One indexed query per agent when nothing is due.
SWEEP_SECONDS = 1.0
ORPHAN_SWEEP_SECONDS = 30.0
#: How often the sweep folds new audit rows into the queue-health rollup (approvals/health/rollup.py).
HEALTH_FOLD_SECONDS = 10.0
#: Threads running the runs the sweep expired (Immediate backend), each with its own connection.
CONTINUATION_THREADS = 2


def mode() -> str:
    default = "worker" if "django_tasks_db" in str(settings.TASKS["default"]["BACKEND"]) else "server"
    return str(getattr(settings, "EXPIRY_SWEEP", "") or default)


async def _on_db_thread[T](executor: ThreadPoolExecutor, work: Callable[[], Awaitable[T]]) -> T:
    """``work()``, its database calls on ``executor``'s one thread, whose connection is given back
    after (no request cycle closes it)."""
    async with ThreadSensitiveContext(executor=executor):
        try:
            return await work()
        finally:
            await sync_to_async(close_old_connections, thread_sensitive=True)()


class Continuations:
    """Runs the runs the sweep expired on threads of their own, in the order they expired."""

    def __init__(self, threads: int = CONTINUATION_THREADS) -> None:
        self._size = threads
        self._queue: queue.SimpleQueue[Continuation | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def put(self, continuation: Continuation) -> None:
        with self._lock:
            if not self._threads:
                self._threads = [
                    threading.Thread(target=self._work, name=f"countersign-expired-{i}", daemon=True)
                    for i in range(self._size)
                ]
                for thread in self._threads:
                    thread.start()
        self._queue.put(continuation)

    def stop(self, timeout: float) -> None:
        """Run what is queued, then end the threads (waiting up to ``timeout`` seconds)."""
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._queue.put(None)
        ends = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, ends - time.monotonic()))

    def _work(self) -> None:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="countersign-expired-db")
        try:
            while (continuation := self._queue.get()) is not None:
                try:
                    asyncio.run(self._continue(continuation, executor))
                except Exception:
                    logger.exception("Continuing run %s after its expiry failed", continuation.run_id)
        finally:
            executor.submit(close_old_connections)
            executor.shutdown(wait=True)

    @staticmethod
    async def _continue(continuation: Continuation, executor: ThreadPoolExecutor) -> None:
        c = continuation
        await _on_db_thread(executor, lambda: continue_run.aenqueue(c.agent_id, c.run_id, c.version))


class Sweeper:
    """Expires the runtime's due calls every ``interval`` seconds in a thread of its own, and parks
    again the runs whose continuation died."""

    def __init__(self, interval: float = SWEEP_SECONDS, *, only_stopped_runs: bool = False) -> None:
        self.interval = interval
        #: Only park again (and announce) the runs whose continuation died: no expiries, no orphans.
        self.only_stopped_runs = only_stopped_runs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.continuations = Continuations()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        with self._lock:
            if self.running:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="countersign-expiry", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None:
            thread.join(timeout)
        self.continuations.stop(timeout)

    def sweep_once(self, executor: ThreadPoolExecutor | None = None) -> int:
        """One sweep (from the calling thread): how many calls expired or escalated.

        Called on its own (a test, a command), the expired runs go on before it returns; the
        background sweep hands them to ``continuations`` instead."""
        own = executor is None
        executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="countersign-expiry-db")
        try:
            return asyncio.run(self._sweep(executor, None if own else self.continuations.put))
        finally:
            if own:
                executor.shutdown(wait=True)

    @staticmethod
    async def _sweep(executor: ThreadPoolExecutor, hand: Callable[[Continuation], None] | None) -> int:
        handoff.set(hand)  # (this run of the loop's own context)
        # Decisions held for an undo window that ended are taken first: a deadline that passed
        # while one was held is met by it, not by the default (their rows say "dashboard").
        if taken := await _on_db_thread(executor, services.commit_held):
            logger.info("Took %d decision(s) held for undo", taken)
        # External agents registered meanwhile (in another process): their calls' deadlines too.
        await _on_db_thread(executor, sync_to_async(agents.sync_external))
        # Its audit rows say where they came from: the deadline, not a page.
        with using_channel("deadline"):
            return await _on_db_thread(executor, agents.runtime().expire_due)

    @staticmethod
    def _reclaim(executor: ThreadPoolExecutor) -> int:
        """Park again, and announce, the runs whose continuation died: how many."""
        return asyncio.run(_on_db_thread(executor, agents.runtime().reclaim_stopped))

    def requeue_unstarted(self) -> int:
        """Queue again each decided run whose continuation has not started a lease after its last
        decision, unless the database backend's queue still holds it (its decisions stand however
        long it waits there): how many. On the sweep's database thread."""
        decided_before = timezone.now() - agents.runtime().storage.lease
        queued = 0
        for continuation in agents.unstarted_continuations(decided_before=decided_before):
            if waits_for_a_worker(continuation):
                continue
            logger.warning(
                "Run %s: its continuation was lost from its queue; queued again", continuation.run_id
            )
            c = continuation
            if isinstance(continue_run.get_backend(), ImmediateBackend):
                self.continuations.put(c)  # not inside the sweep (see ``Continuations``)
            else:
                continue_run.enqueue(c.agent_id, c.run_id, c.version)
            queued += 1
        return queued

    def _run(self) -> None:
        # One database thread for the sweeper's life: its connection is reused between sweeps.
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="countersign-expiry-db")
        due = _Due()
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    if stopped := self._reclaim(executor):
                        logger.warning("Parked again %d run(s) whose continuation died", stopped)
                except Exception:
                    logger.exception("Looking for runs whose continuation died failed; trying again")
                if not self.only_stopped_runs:
                    self._keep_time(executor, due)
                # Every ``interval`` from the start of one sweep to the next: a sweep that took its
                # time does not push the next one (and every deadline after it) later still.
                self._stop.wait(max(0.0, started + self.interval - time.monotonic()))
        finally:
            executor.submit(close_old_connections)
            executor.shutdown(wait=True)

    def _keep_time(self, executor: ThreadPoolExecutor, due: _Due) -> None:
        """The rest of one sweep: expiries, reminders and, when due, orphans and the health rollup."""
        try:
            done = self.sweep_once(executor)
            if done:
                logger.info("Expired or escalated %d call(s) past their deadline", done)
        except Exception:
            logger.exception("The expiry sweep failed; trying again")
        try:
            executor.submit(notifications.remind_due).result()
        except Exception:
            logger.exception("Recording deadline reminders failed; trying again")
        try:
            # (Nothing to do, and no query, unless a page was served at a new address.)
            executor.submit(site.save).result()
        except Exception:
            logger.exception("Keeping the address the site is reached at failed; trying again")
        if time.monotonic() >= due.orphans:
            due.orphans = time.monotonic() + ORPHAN_SWEEP_SECONDS
            try:
                executor.submit(sending.schedule_orphans).result()
                executor.submit(notifications.schedule_orphans).result()
                executor.submit(notifications.forget_old).result()
            except Exception:
                logger.exception("Looking for orphaned deliveries failed; trying again")
            try:
                executor.submit(self.requeue_unstarted).result()
            except Exception:
                logger.exception("Looking for continuations lost from their queue failed; trying again")
        if time.monotonic() >= due.health:
            due.health = time.monotonic() + HEALTH_FOLD_SECONDS
            try:
                # A full batch: more to fold, so again next sweep rather than in 10 s.
                if executor.submit(health_rollup.fold).result() >= health_rollup.FOLD_BATCH:
                    due.health = 0.0
            except Exception:
                logger.exception("Folding the audit log into the queue-health rollup failed")


@dataclasses.dataclass
class _Due:
    """When the sweep's less frequent jobs are next due (``time.monotonic()``)."""

    orphans: float = 0.0
    health: float = 0.0


sweeper = Sweeper()
#: Where a worker sweeps, each server process still watches for runs whose continuation died: the
#: process that dies is most often that worker.
stopped_runs = Sweeper(only_stopped_runs=True)


def start_for_server() -> None:
    """Sweep in this server process unless a worker does (``ServeWithSweep``); then only watch for
    runs whose continuation died (several watchers park each run once, and announce it once)."""
    if mode() == "server":
        sweeper.start()
    elif mode() == "worker":
        stopped_runs.start()


class ServeWithSweep:
    """ASGI middleware: the server's sweep starts when the server first serves anything, not when
    the app is imported (importing it starts no thread: tests, ``manage.py check``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._started = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not self._started:
            self._started = True
            start_for_server()
        await self.app(scope, receive, send)


def start_for_worker() -> None:
    """From ``ApprovalsConfig.ready``: in a ``db_worker`` process, sweep when the worker is to."""
    if mode() == "worker" and "db_worker" in sys.argv[1:2]:
        sweeper.start()
