"""Demo runs that wait for a reviewer, so the dashboard has something to show on first start, and
a week's worth of decided calls before them (the history the queue-health page and the grants
page's suggestions read)."""

from __future__ import annotations

from collections import Counter

from agents_runtime import DecisionRequest, Runtime
from agents_runtime.store import DecisionAction

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


#: Routing rules the demo starts with: (agent id, tool, condition, route, reason).
DEMO_RULES: list[tuple[str, str, str, str, str]] = [
    (
        "support",
        "issue_refund",
        "amount_cents > 500000",
        "deny",
        "Refunds over $5,000 go to the finance team",
    ),
    (
        "ops",
        "deploy_service",
        'service == "payments" && environment == "production"',
        "two",
        "Payments goes to production with two people",
    ),
]


async def seed_demo_rules(runtime: Runtime, created_by: str) -> int:
    """Make the demo's routing rules (made by ``created_by``, an admin) unless some exist; how many
    were made ("deploy payments to production" then waits for two people; "refund $6000 on A-1" is
    declined at once)."""
    for agent in runtime.agents:
        if await agent.routing_rules():
            return 0
    for agent_id, tool_name, condition, route, reason in DEMO_RULES:
        agent = runtime.get_agent(agent_id)
        request = agent.rule_request(
            tool_name, route=route, created_by=created_by, condition=condition, reason=reason
        )
        await agent.add_rule(request)
    return len(DEMO_RULES)


async def seed_demo_runs(runtime: Runtime) -> int:
    """Start every demo run; returns how many are now waiting for a human."""
    waiting = 0
    for agent_id, prompt, thread_id, resource_id in DEMO_RUNS:
        result = await runtime.get_agent(agent_id).generate(
            prompt, thread_id=thread_id, resource_id=resource_id
        )
        waiting += result.status == "suspended"
    return waiting


#: What reviewers did before the demo starts: (agent, prompt, thread, resource, verdict). Refunds
#: under $50 need no approval; reviewers approved every refund up to $120 as proposed and declined
#: the large ones, edited some emails, and approved a few staging deploys.
HISTORY: list[tuple[str, str, str, str, str]] = [
    *(
        ("support", f"Refund ${amount}.00 on A-1042, damaged item.", f"ticket-7{n:03d}", customer, "approve")
        for n, (amount, customer) in enumerate(
            zip(
                (55, 60, 64, 70, 72, 75, 80, 85, 90, 95, 99, 105, 110, 115, 120),
                ("dana", "lee", "sam", "kim", "ana", "dana", "lee", "sam", "kim", "ana") * 2,
                strict=False,
            )
        )
    ),
    *(
        ("support", f"Refund ${amount}.00 on A-1043, late delivery.", f"ticket-75{n:02d}", "lee", "none")
        for n, amount in enumerate((5, 9, 12, 15, 20, 24))
    ),
    ("support", "Refund $450.00 on A-1044, customer changed mind.", "ticket-7600", "sam", "decline"),
    ("support", "Refund $890.00 on A-1044, the customer cancelled.", "ticket-7601", "sam", "decline"),
    ("support", "Write an email about order A-1043 being late.", "ticket-7700", "lee", "edit"),
    ("support", "Write an email about order A-1042 arriving broken.", "ticket-7701", "dana", "approve"),
    *(
        ("ops", f"deploy {service} to staging", f"release-3{n}", "platform-team", "approve")
        for n, service in enumerate(("search", "billing-api", "checkout", "search"))
    ),
]


async def seed_demo_history(runtime: Runtime, reviewer: str) -> Counter[str]:
    """Run every call of ``HISTORY`` and decide those that wait as ``reviewer`` did; how many calls
    waited for a reviewer, by agent and tool ("support.issue_refund")."""
    waited: Counter[str] = Counter()
    for agent_id, prompt, thread_id, resource_id, verdict in HISTORY:
        agent = runtime.get_agent(agent_id)
        result = await agent.generate(prompt, thread_id=thread_id, resource_id=resource_id)
        if result.status != "suspended":
            continue
        for call in result.tool_calls:
            waited[f"{agent_id}.{call.tool_name}"] += 1
            action = DecisionAction.DECLINE if verdict == "decline" else DecisionAction.APPROVE
            edited = None
            if verdict == "edit" and call.args is not None:
                edited = {**call.args, "body": f"{call.args['body']}\n\nSorry for the wait."}
            await agent.decide(
                DecisionRequest(result.run_id, call.tool_call_id, action, actor=reviewer, edited_args=edited)
            )
    return waited
