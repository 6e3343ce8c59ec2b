"""Background continuations: a decided run goes on in a ``django.tasks`` task.

With the default Immediate backend the task runs at once, inside the request that decided; with the
database backend (``TASKS_BACKEND=database``) a ``manage.py db_worker`` process runs it. Either way the
claim was taken by compare-and-swap when the last decision was recorded, so a task that runs twice,
or late, changes nothing the second time.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime
from typing import Any, cast

from django.db import connections
from django.tasks import TaskResultStatus, task
from django.tasks.backends.immediate import ImmediateBackend

from agents_runtime import AgentRunToolCall, Continuation, RunResult
from approvals import agents, live, services


@task
async def continue_run(agent_id: str, run_id: str, version: int) -> dict[str, Any]:
    agent = agents.get(agent_id)
    stream = agent.continue_run(run_id, version=version)
    # Best effort: a page that misses output still refetches how the run ended from its events.
    async with live.RunOutput(agent_id) as output:
        async for chunk in stream:
            await output.send(chunk)
    result = await stream.result()
    return result_to_json(result)


#: Where a continuation goes instead of running at once under the Immediate backend, while set: the
#: expiry sweep's own threads (approvals/services/expiry.py), so that no continuation makes the next
#: expiry late.
handoff: ContextVar[Callable[[Continuation], None] | None] = ContextVar("handoff", default=None)


async def schedule_continuation(continuation: Continuation) -> RunResult | None:
    """The runtime's scheduler: enqueue, and return the result when the backend ran it already."""
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
