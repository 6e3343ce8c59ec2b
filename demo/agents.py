"""The demo runtime: agents with scripted models (no network), or a real model via AGENTS_MODEL."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from agents_runtime import Agent, Call, Reply, Runtime, ScriptContext, scripted_model

from . import tools


def _model(*steps: Any) -> Callable[[], Any]:
    """The scripted model, unless AGENTS_MODEL names a real one (read when the agent first runs)."""

    def resolve() -> Any:
        name = os.environ.get("AGENTS_MODEL", "").strip()
        return name or scripted_model(*steps)

    return resolve


def _order_id(prompt: str) -> str:
    match = re.search(r"\b[A-Z]-\d{3,}\b", prompt)
    return match.group(0) if match else "A-1042"


def _amount_cents(prompt: str) -> int:
    match = re.search(r"\$\s?(\d+(?:\.\d{1,2})?)", prompt)
    return round(float(match.group(1)) * 100) if match else 2_000


def _support_first_step(ctx: ScriptContext) -> Any:
    prompt = ctx.prompt
    order_id = _order_id(prompt)
    if "refund" in prompt.lower():
        return [
            Call("lookup_order", {"order_id": order_id}, say=f"Let me look up {order_id} and refund it."),
            Call(
                "issue_refund",
                {"order_id": order_id, "amount_cents": _amount_cents(prompt), "reason": prompt[:200]},
            ),
        ]
    if "email" in prompt.lower() or "write" in prompt.lower():
        customer = tools.ORDERS.get(order_id, {}).get("customer", "customer@example.com")
        return Call(
            say=f"I drafted an email to {customer} about {order_id}.",
            tool="send_customer_email",
            args={
                "to": customer,
                "subject": f"About your order {order_id}",
                "body": f"Hello,\n\n{prompt}\n\nBest regards,\nSupport",
            },
        )
    return Reply("I can look up orders, refund them and email customers. What do you need?")


def _service(prompt: str) -> str:
    match = re.search(r"deploy\s+([a-z][\w-]*)", prompt.lower())
    return match.group(1) if match else "billing-api"


def _ops_first_step(ctx: ScriptContext) -> Any:
    if "deploy" not in ctx.prompt.lower():
        return Reply("Tell me which service to deploy, e.g. 'deploy billing-api to production'.")
    service = _service(ctx.prompt)
    if "production" in ctx.prompt.lower():
        return Call(
            "request_change_window", {"service": service}, say="Production needs a change window first."
        )
    return Call(
        "deploy_service",
        {"service": service, "version": "v2.4.1", "environment": "staging"},
        say=f"Deploying {service} v2.4.1 to staging.",
    )


def _ops_second_step(ctx: ScriptContext) -> Any:
    window = str(ctx.results.get("request_change_window", ""))
    if not window.startswith("Window for"):
        return Reply(f"No deployment: {window or 'nothing to do'}")
    version = window.rsplit("version ", 1)[-1]
    return Call(
        "deploy_service",
        {"service": _service(ctx.prompt), "version": version, "environment": "production"},
        say=f"The change window is agreed; deploying {version} to production.",
    )


support = Agent(
    "support",
    name="Customer support",
    description="Answers customers: looks up orders, refunds them, emails them.",
    instructions="You are a customer support agent. Refund only what the customer paid.",
    model=_model(_support_first_step),
    tools=[tools.lookup_order, tools.issue_refund, tools.send_customer_email],
)

ops = Agent(
    "ops",
    name="Release engineer",
    description="Deploys services; production needs a change window and an approval.",
    instructions="You deploy services. Production deploys need a change window first.",
    model=_model(_ops_first_step, _ops_second_step),
    tools=[tools.request_change_window, tools.deploy_service],
)


def _finance_first_step(ctx: ScriptContext) -> Any:
    invoice = re.search(r"\bINV-\d+\b", ctx.prompt)
    vendor = re.search(r"\bto ([A-Z][\w&.-]*(?: [A-Z][\w&.-]*)*)", ctx.prompt)
    if "pay" not in ctx.prompt.lower():
        return Reply("Tell me which invoice to pay, e.g. 'pay INV-2231 to Acme Supplies, $1,250.00'.")
    return Call(
        "pay_invoice",
        {
            "vendor": vendor.group(1) if vendor else "Acme Supplies",
            "invoice": invoice.group(0) if invoice else "INV-2231",
            "amount_cents": _amount_cents(ctx.prompt.replace(",", "")),
        },
        say="This payment needs two approvals.",
    )


finance = Agent(
    "finance",
    name="Accounts payable",
    description="Pays suppliers' invoices; every payment needs two reviewers other than the requester.",
    instructions="You pay invoices the team asks you to pay.",
    model=_model(_finance_first_step),
    tools=[tools.pay_invoice],
)

coordinator = Agent(
    "coordinator",
    name="Coordinator",
    description="Takes requests from the team and delegates them to the release engineer.",
    instructions="Delegate deployment work to the ops agent.",
    model=_model(lambda ctx: Call("agent_ops", {"prompt": ctx.prompt})),
    agents=[ops],
)


# No store here: the dashboard gives a runtime without one its database store (approvals.agents);
# used on its own, the runtime keeps runs in memory.
runtime = Runtime(agents=[support, ops, coordinator, finance])
