"""Demo runs that wait for a reviewer, so the dashboard has something to show on first start."""

from __future__ import annotations

from agents_runtime import Runtime

DEMO_RUNS: list[tuple[str, str, str, str]] = [
    # (agent id, prompt, thread, resource)
    ("support", "Please refund order A-1042, $129.00 - the parcel arrived broken.", "ticket-8812", "dana"),
    ("support", "Refund $12.50 on A-1043, late delivery.", "ticket-8813", "lee"),
    ("support", "Write an email to the customer about order A-1044 being delayed.", "ticket-8814", "sam"),
    ("support", "Refund $890.00 on A-1044, the customer cancelled.", "ticket-8815", "sam"),
    ("ops", "deploy billing-api to production", "release-42", "platform-team"),
    ("ops", "deploy search to staging", "release-43", "platform-team"),
    ("coordinator", "deploy checkout to staging please", "standup-11-30", "alex"),
]


async def seed_demo_runs(runtime: Runtime) -> int:
    """Start every demo run; returns how many are now waiting for a human."""
    waiting = 0
    for agent_id, prompt, thread_id, resource_id in DEMO_RUNS:
        result = await runtime.get_agent(agent_id).generate(
            prompt, thread_id=thread_id, resource_id=resource_id
        )
        waiting += result.status == "suspended"
    return waiting
