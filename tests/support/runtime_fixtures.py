"""A small runtime for the dashboard tests: scripted models (the only double), real tools, real store.

Agents:
- ``helpdesk``: ``refund`` (always needs approval), ``transfer`` (needs approval over 100),
  ``schedule_maintenance`` (calls ``suspend()``; its resume schema mixes string, integer, boolean and
  enum fields) and ``file_report`` (suspends with a nested resume schema the form cannot render field
  by field: the JSON fallback), ``payout`` (two distinct reviewers must approve, and not whoever
  started the run). The prompt picks the call: "refund <note>", "transfer <n>", "schedule",
  "report", "payout", "both" (a refund and a schedule in one run).
- ``boss`` supervises ``worker``, whose ``wipe_disk`` needs approval; "two disks" makes the worker
  park two calls, listed on the boss as ``<delegation id>:<inner id>``.

``AGENTS_RUNTIME`` points at ``runtime`` in this module; the ``runtime`` fixture (conftest) rebuilds it
for every test.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from asgiref.sync import async_to_sync
from pydantic import BaseModel, Field

from agents_runtime import Agent, Call, Reply, RunResult, Runtime, ScriptContext, ToolContext, tool
from approvals.store import DjangoRunStore
from tests.support.runtime_helpers import ModelSpy, ToolLog

#: What ``AGENTS_RUNTIME`` imports (set by ``build_runtime``).
runtime: Runtime | None = None

XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>"


class Window(BaseModel):
    """When the maintenance may happen."""

    start: str = Field(title="Start time", description="When the window opens, e.g. 22:00 UTC")
    duration_minutes: int = Field(default=30, ge=5, le=480, title="Duration (minutes)")
    notify_oncall: bool = Field(default=True, title="Notify on-call")
    risk: Literal["low", "medium", "high"] = Field(title="Risk", description="Your estimate")


class Step(BaseModel):
    title: str
    owner: str


class Report(BaseModel):
    summary: str
    steps: list[Step]


#: How long the refund tool takes for the note "slowly" (the prompt "refund slowly").
SLOW_REFUND_SECONDS = 2.0


@dataclass
class DashboardAgents:
    runtime: Runtime
    helpdesk_model: ModelSpy
    worker_model: ModelSpy
    executed: dict[str, ToolLog] = field(default_factory=dict)

    def agent(self, agent_id: str) -> Agent:
        return self.runtime.get_agent(agent_id)

    def start(
        self,
        agent_id: str,
        prompt: str,
        *,
        thread: str | None = None,
        resource: str | None = None,
        started_by: str | None = None,
    ) -> RunResult:
        return async_to_sync(self.agent(agent_id).generate)(
            prompt, thread_id=thread, resource_id=resource, started_by=started_by
        )

    def suspended(self, agent_id: str, **filters: Any) -> list[Any]:
        return list(async_to_sync(self.agent(agent_id).list_suspended_runs)(**filters).runs)


def _helpdesk_first_step(ctx: ScriptContext) -> Any:
    prompt = ctx.prompt
    if prompt.startswith("refund"):
        return Call(
            "refund", {"order_id": "A-1", "amount_cents": 500, "note": prompt.removeprefix("refund ")}
        )
    if prompt.startswith("transfer"):
        match = re.search(r"\d+", prompt)
        return Call("transfer", {"amount": int(match.group(0)) if match else 1})
    if prompt.startswith("schedule"):
        return Call("schedule_maintenance", {"system": "db-1"})
    if prompt.startswith("report"):
        return Call("file_report", {"incident": "INC-7"})
    if prompt.startswith("payout"):
        return Call("payout", {"vendor": "Acme", "amount_cents": 90000})
    if prompt.startswith("both"):
        return [
            Call("refund", {"order_id": "A-2", "amount_cents": 900, "note": "both"}),
            Call("schedule_maintenance", {"system": "db-2"}),
        ]
    return Reply("Nothing to do.")


def _helpdesk_second_step(ctx: ScriptContext) -> Any:
    # The final answer repeats what the tools returned, so tests can see what the model received.
    return Reply("; ".join(f"{name}: {value}" for name, value in sorted(ctx.results.items())) or "Done.")


def _worker_first_step(ctx: ScriptContext) -> Any:
    if "two disks" in ctx.prompt:
        return [Call("wipe_disk", {"disk": "sda"}), Call("wipe_disk", {"disk": "sdb"})]
    return Call("wipe_disk", {"disk": "sda"})


def build_runtime() -> DashboardAgents:
    """A fresh runtime on the test database; also what ``AGENTS_RUNTIME`` imports from now on."""
    global runtime
    executed = {
        name: ToolLog() for name in ("refund", "transfer", "schedule_maintenance", "wipe_disk", "payout")
    }

    @tool(requires_approval=True)
    def refund(order_id: str, amount_cents: int, note: str) -> str:
        """Refund an order."""
        if note == "slowly":
            time.sleep(SLOW_REFUND_SECONDS)  # a payment provider taking its time
        executed["refund"].record(order_id=order_id, amount_cents=amount_cents, note=note)
        return f"refunded {amount_cents} on {order_id}"

    @tool(requires_approval=lambda args: args["amount"] > 100)
    def transfer(amount: int) -> str:
        """Move money; over 100 needs approval."""
        executed["transfer"].record(amount=amount)
        return f"moved {amount}"

    @tool(resume_schema=Window)
    def schedule_maintenance(ctx: ToolContext, system: str) -> str:
        """Ask a human for a maintenance window."""
        if ctx.resume_data is None:
            ctx.suspend({"system": system, "question": f"When may we take {system} down?"})
        window: Window = ctx.resume_data
        executed["schedule_maintenance"].record(window=window.model_dump())
        return f"{system} at {window.start} for {window.duration_minutes} min, risk {window.risk}"

    @tool(resume_schema=Report)
    def file_report(ctx: ToolContext, incident: str) -> str:
        """Ask a human for an incident report."""
        if ctx.resume_data is None:
            ctx.suspend({"incident": incident})
        report: Report = ctx.resume_data
        return f"{incident}: {report.summary} ({len(report.steps)} steps)"

    @tool(requires_approval=True, approvals=2, separate_duties=True)
    def payout(vendor: str, amount_cents: int) -> str:
        """Pay a vendor: two reviewers, neither of them whoever asked for it."""
        executed["payout"].record(vendor=vendor, amount_cents=amount_cents)
        return f"paid {amount_cents} to {vendor}"

    # Never let through ahead of time: every erase is looked at.
    @tool(requires_approval=True, grantable=False)
    def wipe_disk(disk: str) -> str:
        """Erase a disk."""
        executed["wipe_disk"].record(disk=disk)
        return f"wiped {disk}"

    helpdesk_model = ModelSpy(_helpdesk_first_step, _helpdesk_second_step, name="helpdesk")
    worker_model = ModelSpy(_worker_first_step, name="worker")
    helpdesk = Agent(
        "helpdesk",
        name="Help desk",
        model=helpdesk_model.model,
        tools=[refund, transfer, schedule_maintenance, file_report, payout],
    )
    worker = Agent("worker", name="Worker", model=worker_model.model, tools=[wipe_disk])
    boss = Agent(
        "boss",
        name="Boss",
        model=ModelSpy(lambda ctx: Call("agent_worker", {"prompt": ctx.prompt}), name="boss").model,
        agents=[worker],
    )
    runtime = Runtime(agents=[helpdesk, boss], storage=DjangoRunStore())
    return DashboardAgents(
        runtime=runtime, helpdesk_model=helpdesk_model, worker_model=worker_model, executed=executed
    )
