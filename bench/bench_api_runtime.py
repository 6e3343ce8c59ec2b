"""The runtime ``bench/api.py`` serves (``AGENTS_RUNTIME=bench_api_runtime:runtime``): the agents
``list_suspended_runs.py`` seeds runs for, stored in the app's database (``compose`` adds the store)."""

from __future__ import annotations

import os

from list_suspended_runs import AGENTS, _agent

from agents_runtime import Agent, Call, Reply, Runtime, ToolContext, scripted_model, tool

runtime = Runtime(agents=[_agent(f"agent-{i}") for i in range(AGENTS)])


# -- bench/decide_throughput.py's runtime (``AGENTS_RUNTIME=bench_api_runtime:decide_runtime``) ----

#: The one agent ``decide_throughput.py`` seeds runs for; its tool waits on a reviewer's approval.
DECIDE_AGENT = "bench-decide"


@tool(requires_approval=True)
def refund(ctx: ToolContext, order: str, amount: int) -> str:
    """Refund an order: records the execution (``record_execution``), so a second run shows."""
    record_execution(ctx.run_id, ctx.tool_call_id)
    return f"refunded {amount} for {order}"


def record_execution(run_id: str, tool_call_id: str) -> None:
    """Append ``<run_id> <tool_call_id> <pid>`` to ``BENCH_TOOL_LOG``: one ``write`` on a file opened
    with ``O_APPEND``, so lines from threads and processes at once never mix; kept on disk whatever
    the server does next (a tool that ran twice leaves two lines)."""
    line = f"{run_id} {tool_call_id} {os.getpid()}\n".encode()
    fd = os.open(os.environ["BENCH_TOOL_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


decide_runtime = Runtime(
    agents=[
        Agent(
            DECIDE_AGENT,
            name="Bench decide",
            model=scripted_model(Call("refund", {"order": "A-1001", "amount": 120}), Reply("Refund done.")),
            tools=[refund],
        )
    ]
)
