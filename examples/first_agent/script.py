"""A scripted model for the example (no network, no API key): what a real model would ask for.

"Pay INV-7 for $250" asks which cost centre pays INV-7, then pays 25,000 cents.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic_ai.models.function import FunctionModel

from agents_runtime import Call, ScriptContext
from agents_runtime import scripted_model as _scripted


def _invoice(ctx: ScriptContext) -> str:
    match = re.search(r"\bINV-\d+\b", ctx.prompt)
    return match.group(0) if match else "INV-1"


def _amount_cents(ctx: ScriptContext) -> int:
    match = re.search(r"\$\s?(\d+(?:\.\d{1,2})?)", ctx.prompt)
    return round(float(match.group(1)) * 100) if match else 0


def _ask(ctx: ScriptContext) -> Any:
    return Call("ask_cost_centre", {"invoice_id": _invoice(ctx)})


def _pay(ctx: ScriptContext) -> Any:
    return Call("pay_invoice", {"invoice_id": _invoice(ctx), "amount_cents": _amount_cents(ctx)})


def scripted_model() -> FunctionModel:
    return _scripted(_ask, _pay, name="first-agent-script")
