"""The demo agents' tools: realistic shapes, harmless effects."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from agents_runtime import Change, Preview, ToolContext, tool
from agents_runtime.presentation import ApprovalRule, Money

REFUND_APPROVAL_LIMIT_CENTS = 5_000

ORDERS = {
    "A-1042": {"customer": "dana@example.com", "total_cents": 12_900, "status": "delivered"},
    "A-1043": {"customer": "lee@example.com", "total_cents": 2_450, "status": "delivered"},
    "A-1044": {"customer": "sam@example.com", "total_cents": 89_000, "status": "shipped"},
}
#: The store's payout balance the demo's refunds come out of (never changed: the demo is harmless).
STORE_BALANCE_CENTS = 1_250_000
#: What the demo's refunds gave back so far, per ticket (thread) and order, in this process's memory
#: only (harmless, and one ticket's refunds never change another's previews): what is left to refund
#: shrinks, so a refund approved before another one on the same order ran is rechecked and sent back
#: (``tool(recheck=True)``) rather than run on what is no longer true.
REFUNDED_CENTS: dict[tuple[str | None, str], int] = {}
#: What runs where, as the demo's deploys find it.
DEPLOYED = {"staging": "v2.4.0", "production": "v2.4.0"}


def _dollars(cents: int) -> str:
    return f"{'-' if cents < 0 else ''}${abs(cents) / 100:,.2f}"


@tool(key_results=("status", "total_cents"), fields={"total_cents": Money(cents=True, currency="USD")})
def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order by its id (e.g. A-1042)."""
    order = ORDERS.get(order_id)
    if order is None:
        return {"order_id": order_id, "found": False}
    return {"order_id": order_id, "found": True, **order}


def refund_preview(args: dict[str, Any], ctx: ToolContext) -> Preview:
    """What a refund would do: the money leaving the store's balance, and what is left to refund."""
    order_id, amount = args["order_id"], args["amount_cents"]
    order = ORDERS.get(order_id)
    if order is None:
        return Preview(sentence=f"Order {order_id} does not exist: the refund would fail.")
    total = int(str(order["total_cents"])) - REFUNDED_CENTS.get((ctx.thread_id, order_id), 0)
    changes = [
        Change("Store balance", _dollars(STORE_BALANCE_CENTS), _dollars(STORE_BALANCE_CENTS - amount)),
        Change(f"Refundable on {order_id}", _dollars(total), _dollars(total - amount)),
    ]
    sentence = f"{_dollars(amount)} goes back to {order['customer']} for order {order_id}."
    if amount > total:
        sentence += f" That is more than is left to refund on it ({_dollars(total)})."
    return Preview(sentence=sentence, changes=tuple(changes))


@tool(
    requires_approval=ApprovalRule(
        lambda args: args["amount_cents"] > REFUND_APPROVAL_LIMIT_CENTS,
        because="Refunds over $50.00 need a human's approval",
    ),
    title="Refund {amount_cents|money} · {order_id}",
    fields={"amount_cents": Money(cents=True, currency="USD")},
    preview=refund_preview,
    # What is left to refund may change between the approval and the refund (another refund on
    # the order): the preview runs again first, and a refund that would now do otherwise waits again.
    recheck=True,
)
def issue_refund(ctx: ToolContext, order_id: str, amount_cents: int, reason: str) -> str:
    """Refund part or all of an order. Refunds over $50.00 need a human's approval.

    Args:
        order_id: The order to refund.
        amount_cents: How much to refund, in cents.
        reason: Why, in the customer's words.
    """
    # ctx.tool_call_id is the idempotency key a real payment API would get.
    if order_id in ORDERS:
        key = (ctx.thread_id, order_id)
        REFUNDED_CENTS[key] = REFUNDED_CENTS.get(key, 0) + amount_cents
    return f"Refunded ${amount_cents / 100:.2f} on {order_id} (ref {ctx.tool_call_id[-8:]})"


@tool(
    requires_approval=ApprovalRule(because="Every email to a customer is reviewed"),
    title="Email {to} · {subject}",
)
def send_customer_email(to: str, subject: str, body: str) -> str:
    """Send an email to a customer. Always reviewed by a human first."""
    return f"Email to {to} queued: {subject!r}"


def deploy_preview(args: dict[str, Any]) -> Preview:
    """What a deploy would do: the version running on the environment, before and after."""
    environment, version = args["environment"], args["version"]
    running = DEPLOYED.get(environment, "nothing")
    return Preview(
        sentence=f"{args['service']} on {environment} goes from {running} to {version}.",
        changes=(Change(f"{args['service']} on {environment}", running, version),),
        diff=f"- image: {args['service']}:{running}\n+ image: {args['service']}:{version}",
    )


@tool(
    requires_approval=ApprovalRule(because="Every deploy is approved by a human"),
    title="Deploy {service} {version} to {environment}",
    risky={"environment": ["production"]},
    preview=deploy_preview,
)
def deploy_service(service: str, version: str, environment: Literal["staging", "production"]) -> str:
    """Deploy a version of a service to an environment."""
    return f"{service} {version} is live on {environment}"


@tool(
    requires_approval=ApprovalRule(because="Payments need two reviewers, neither of them the requester"),
    title="Pay {amount_cents|money} to {vendor}",
    fields={"amount_cents": Money(cents=True, currency="USD")},
    approvals=2,
    separate_duties=True,
)
def pay_invoice(vendor: str, invoice: str, amount_cents: int) -> str:
    """Pay a supplier's invoice: two reviewers approve it, and not whoever asked for it."""
    return f"Paid ${amount_cents / 100:.2f} to {vendor} for {invoice}"


class ChangeWindowRequest(BaseModel):
    service: str
    question: str


class ChangeWindow(BaseModel):
    """When and how the change may happen."""

    start: datetime = Field(title="Start time", description="When the window opens")
    duration_minutes: int = Field(default=30, ge=5, le=480, title="Duration (minutes)")
    notify_oncall: bool = Field(default=True, title="Notify on-call", description="Page the on-call engineer")
    risk: Literal["low", "medium", "high"] = Field(title="Risk", description="Your estimate of the risk")
    version: str = Field(default="v2.4.1", title="Version to deploy")


@tool(suspend_schema=ChangeWindowRequest, resume_schema=ChangeWindow)
def request_change_window(ctx: ToolContext, service: str) -> str:
    """Ask a human to schedule a change window before deploying to production."""
    if ctx.resume_data is None:
        ctx.suspend({"service": service, "question": f"When may we deploy {service} to production?"})
    window: ChangeWindow = ctx.resume_data
    start = window.start.isoformat(timespec="minutes")
    oncall = "on-call notified" if window.notify_oncall else "on-call not notified"
    return (
        f"Window for {service}: {start}, {window.duration_minutes} min, risk {window.risk}, "
        f"{oncall}, version {window.version}"
    )
