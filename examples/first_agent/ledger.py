"""A stand-in for a payments API that takes an idempotency key, as real ones (Stripe, Adyen) do.

Kept in memory: the example shows the contract a tool relies on, not a payment system.
"""

from __future__ import annotations

payments: dict[str, tuple[str, int]] = {}


def pay(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> str:
    """Pay once per key: a repeated key returns the first payment's receipt and moves no money."""
    payments.setdefault(idempotency_key, (invoice_id, amount_cents))
    paid_invoice, paid_cents = payments[idempotency_key]
    return f"Paid ${paid_cents / 100:.2f} on {paid_invoice} (ref {idempotency_key[-8:]})"
