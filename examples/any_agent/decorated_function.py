"""A plain function behind a reviewer: ``python -m examples.any_agent.decorated_function A-1042 4200``.

Any process can do this, whatever it is built on: the call waits in Countersign's queue, a reviewer
approves (perhaps lowering the amount), declines or lets the deadline pass; approved, the function runs
once with the approved arguments and its result is reported back to the run record. Set
``COUNTERSIGN_URL`` and ``COUNTERSIGN_TOKEN`` (an external agent's token: ``manage.py external_agent``).
"""

from __future__ import annotations

import os
import sys

from countersign_client import Countersign, NotApproved

AGENT = os.environ.get("COUNTERSIGN_AGENT", "billing-scripts")
URL = os.environ.get("COUNTERSIGN_URL", "http://127.0.0.1:8000")
client = Countersign(URL, os.environ["COUNTERSIGN_TOKEN"])


@client.requires_approval(
    agent=AGENT,
    title=lambda args: f"Refund {args['amount_cents'] / 100:.2f} USD on {args['order_id']}",
    deadline={"in_seconds": 3600, "default": "decline"},
)
def refund(order_id: str, amount_cents: int, note: str = "") -> str:
    # Stands in for the payment provider's call; it runs only once a reviewer approved it.
    return f"refunded {amount_cents} cents on {order_id}" + (f" ({note})" if note else "")


def main(argv: list[str]) -> int:
    order_id, amount = argv[0], int(argv[1])
    try:
        print(refund(order_id, amount))
    except NotApproved as refusal:
        print(f"not refunded: {refusal}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
