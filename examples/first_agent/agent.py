import os

from pydantic import BaseModel

from agents_runtime import Agent, Runtime, ToolContext, tool

from . import ledger
from .script import scripted_model


class CostCentre(BaseModel):
    cost_centre: str
    note: str = ""


@tool(resume_schema=CostCentre)
def ask_cost_centre(ctx: ToolContext, invoice_id: str) -> str:
    """Ask a human which cost centre pays an invoice."""
    if ctx.resume_data is None:
        ctx.suspend({"question": f"Which cost centre pays {invoice_id}?"})
    return f"{invoice_id} is charged to {ctx.resume_data.cost_centre}"


@tool(requires_approval=lambda args: args["amount_cents"] > 10_000)
def pay_invoice(ctx: ToolContext, invoice_id: str, amount_cents: int) -> str:
    """Pay an invoice. Payments over $100.00 wait for a human's approval."""
    # A call can be offered again after a crash, always with the same tool_call_id: pay once per id.
    return ledger.pay(invoice_id, amount_cents, idempotency_key=ctx.tool_call_id)


payables = Agent(
    "payables",
    name="Accounts payable",
    instructions="You pay invoices. Ask which cost centre pays before you pay.",
    model=lambda: os.environ.get("AGENTS_MODEL") or scripted_model(),
    tools=[ask_cost_centre, pay_invoice],
)
runtime = Runtime(agents=[payables])
