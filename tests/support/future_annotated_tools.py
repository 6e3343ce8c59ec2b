"""Tools written under ``from __future__ import annotations`` with ``ToolContext`` imported only for
type checking: at run time the names ``ToolContext`` and ``agents_runtime`` do not exist in this
module, so evaluating these annotations would raise ``NameError``. The runtime must recognise the
context parameter from the annotation string alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import agents_runtime
    from agents_runtime import ToolContext

#: (tool name, what the context said) for every call, in order.
seen: list[tuple[str, dict[str, Any]]] = []


def _describe(ctx: Any) -> dict[str, Any]:
    return {
        "run_id": ctx.run_id,
        "tool_call_id": ctx.tool_call_id,
        "agent_id": ctx.agent_id,
        "thread_id": ctx.thread_id,
        "resource_id": ctx.resource_id,
    }


def lookup_order(ctx: ToolContext, order_id: str) -> str:
    """Look an order up."""
    seen.append(("lookup_order", {**_describe(ctx), "order_id": order_id}))
    return f"order {order_id}: shipped"


async def lookup_customer(ctx: agents_runtime.ToolContext, email: str) -> str:
    """Look a customer up."""
    seen.append(("lookup_customer", {**_describe(ctx), "email": email}))
    return f"customer {email}: gold"
