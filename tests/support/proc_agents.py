"""A child process for the multi-process store tests: one command, one JSON line on stdout.

Run as ``python -m tests.support.proc_agents <command> ...`` from the project root with
``DJANGO_SETTINGS_MODULE=config.settings`` and ``DATABASE_URL`` pointing at a migrated database.
Environment:

- ``PROC_TOOL_LOG``: the tools append one line per execution here (O_APPEND, so lines from several
  processes never interleave): how the tests count that a tool ran once.
- ``PROC_LEASE_SECONDS``: the store's lease (default 300).
- ``PROC_BLOCK_FILE``: when set, ``refund`` writes a ``started`` line and then waits until this file
  exists before it finishes (the crash test kills the process meanwhile).

The agent's model is a scripted ``FunctionModel``: the prompt picks the tool (``refund <order>`` asks
for approval, ``ask <order>`` calls a tool that suspends), and once a tool result is in, the model
answers ``done: <result>``. The same prompt gives the same calls in every process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.settings")
django.setup()

from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from agents_runtime import (  # noqa: E402
    Agent,
    AgentsRuntimeError,
    Runtime,
    ToolContext,
    tool,
)
from agents_runtime.store import Deadline  # noqa: E402
from approvals.store import DjangoRunStore  # noqa: E402

AGENT_ID = "proc-support"


def _log(line: str) -> None:
    path = os.environ.get("PROC_TOOL_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@tool(requires_approval=True)
def refund(ctx: ToolContext, order: str, amount: int) -> str:
    """Refund an order (needs a human's approval)."""
    block = os.environ.get("PROC_BLOCK_FILE")
    if block:
        _log(f"started refund {ctx.run_id} {ctx.tool_call_id} pid={os.getpid()}")
        while not Path(block).exists():
            time.sleep(0.02)
    _log(f"ran refund {ctx.run_id} {ctx.tool_call_id} {order} {amount} pid={os.getpid()}")
    return f"refunded {amount} for {order}"


@tool(
    resume_schema={
        "type": "object",
        "properties": {"environment": {"type": "string"}},
        "required": ["environment"],
    }
)
def ask_environment(ctx: ToolContext, order: str) -> str:
    """Ask a human which environment to use."""
    if ctx.resume_data is None:
        ctx.suspend({"question": f"Which environment for {order}?"})
    _log(f"ran ask_environment {ctx.run_id} {ctx.tool_call_id} {order} {ctx.resume_data['environment']}")
    return f"using {ctx.resume_data['environment']} for {order}"


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    if isinstance(last, ModelRequest):
        results = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if results:
            return ModelResponse(parts=[TextPart("done: " + "; ".join(str(r.content) for r in results))])
    prompt = next(
        str(p.content)
        for m in reversed(messages)
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    )
    verb, _, order = prompt.partition(" ")
    if verb == "refund":
        return ModelResponse(
            parts=[ToolCallPart("refund", {"order": order, "amount": 42}, tool_call_id=f"rf-{order}")]
        )
    if verb == "ask":
        return ModelResponse(
            parts=[ToolCallPart("ask_environment", {"order": order}, tool_call_id=f"ask-{order}")]
        )
    return ModelResponse(parts=[TextPart(f"nothing to do for {prompt!r}")])


def build_agent() -> Agent:
    lease = timedelta(seconds=float(os.environ.get("PROC_LEASE_SECONDS", "300")))
    agent = Agent(AGENT_ID, model=FunctionModel(script), tools=[refund, ask_environment])
    Runtime(agents=[agent], storage=DjangoRunStore(lease))
    return agent


def _wait_for_go(ready: str | None, go: str | None) -> None:
    """Barrier across processes: announce readiness, then wait for the parent's go file."""
    if ready:
        Path(ready).touch()
    if go:
        while not Path(go).exists():
            time.sleep(0.001)


async def _listing(agent: Agent, thread_id: str | None) -> list[dict[str, Any]]:
    result = await agent.list_suspended_runs(thread_id=thread_id)
    return [
        {
            "run_id": run.run_id,
            "thread_id": run.thread_id,
            "interrupted": run.interrupted,
            "suspended_at": run.suspended_at.isoformat(),
            "tool_calls": [
                {
                    "tool_call_id": c.tool_call_id,
                    "tool_name": c.tool_name,
                    "args": c.args,
                    "interrupted_after_start": c.interrupted_after_start,
                }
                for c in run.tool_calls
            ],
        }
        for run in result.runs
    ]


async def main(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="proc_agents")
    parser.add_argument(
        "command", choices=["start", "list", "show", "approve", "decline", "resume", "expire"]
    )
    parser.add_argument("--prompt", action="append", default=[])
    parser.add_argument("--thread")
    parser.add_argument("--run")
    parser.add_argument("--call")
    parser.add_argument("--actor", default=f"pid-{os.getpid()}")
    parser.add_argument("--reason")
    parser.add_argument("--data")
    parser.add_argument("--ready")
    parser.add_argument("--go")
    parser.add_argument("--confirm-rerun", action="store_true")
    #: start: the run's deadline (approved when it passes), in seconds.
    parser.add_argument("--approve-after", type=float)
    args = parser.parse_args(argv)
    agent = build_agent()

    if args.command == "start":
        deadline = (
            None
            if args.approve_after is None
            else Deadline(timedelta(seconds=args.approve_after), on_expiry="approve")
        )
        results = [await agent.generate(p, thread_id=args.thread, deadline=deadline) for p in args.prompt]
        return {
            "runs": [{"run_id": r.run_id, "status": r.status} for r in results],
            "listing": await _listing(agent, args.thread),
        }
    if args.command == "list":
        return {"runs": await _listing(agent, args.thread)}
    if args.command == "show":
        run = await asyncio.to_thread(agent.storage.get_run, args.run)
        if run is None:
            return {"run": None}
        return {
            "run": {
                "status": run.status,
                "interrupted": run.interrupted,
                "has_snapshot": run.snapshot is not None,
                "history": list(run.history),
                "undecided": [c.tool_call_id for c in run.undecided],
            }
        }

    _wait_for_go(args.ready, args.go)
    if args.command == "expire":
        assert agent._runtime is not None
        expired = await agent._runtime.expire_due()  # type: ignore[attr-defined]
        return {"outcome": "decided" if expired else "nothing due", "expired": expired}
    try:
        if args.command == "approve":
            stream = await agent.approve_tool_call(
                run_id=args.run, tool_call_id=args.call, actor=args.actor, confirm_rerun=args.confirm_rerun
            )
        elif args.command == "decline":
            stream = await agent.decline_tool_call(
                run_id=args.run, tool_call_id=args.call, reason=args.reason, actor=args.actor
            )
        else:
            stream = await agent.resume_stream(
                json.loads(args.data), run_id=args.run, tool_call_id=args.call, actor=args.actor
            )
        result = await stream.result()
    except AgentsRuntimeError as error:
        return {"outcome": type(error).__name__, "message": str(error)}
    return {"outcome": "decided", "status": result.status, "text": result.text, "error": result.error}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))), flush=True)
