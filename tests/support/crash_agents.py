"""A runtime whose tool can be killed half-way (``test_crash_recovery``): ``AGENTS_RUNTIME`` points here.

The tool writes its ``tool_call_id`` to ``CRASH_TOOL_LOG`` as it starts, then takes
``CRASH_TOOL_SECONDS`` (long in the worker that gets killed, 0 in the one that takes over).
"""

from __future__ import annotations

import os
import time

from agents_runtime import Agent, Call, Reply, Runtime, ToolContext, scripted_model, tool


@tool(requires_approval=True)
def deploy(ctx: ToolContext, service: str) -> str:
    """Deploy ``service`` to production."""
    with open(os.environ["CRASH_TOOL_LOG"], "a", encoding="utf-8") as log:
        log.write(ctx.tool_call_id + "\n")
    time.sleep(float(os.environ.get("CRASH_TOOL_SECONDS", "0")))
    return f"deployed {service}"


runtime = Runtime(
    [
        Agent(
            "ops",
            name="Ops",
            model=scripted_model(Call("deploy", {"service": "api"}), Reply("Deployed api.")),
            tools=[deploy],
        )
    ]
)
