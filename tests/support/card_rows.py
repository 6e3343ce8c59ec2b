"""Browser-test helpers for the inbox's call rows: they start folded, and declining is its own step."""

from __future__ import annotations

import re

from playwright.sync_api import Locator, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

#: How long ``expanded`` waits for a card still on its way.
ARRIVAL_MS = 3_000

#: How long ``expanded`` waits for the bodies of the rows it opened: a round trip to the server, which a
#: loaded CI machine (the whole suite, a browser and the server on two cores) can take seconds over.
BODY_MS = 15_000

#: The accessible name of a call's plain Approve button ("Approve Refund $890.00 · A-1044"), not of
#: its "Approve ... with these arguments" buttons.
APPROVE = re.compile(r"^Approve\b(?!.*with these)")
DECLINE = re.compile(r"^Decline\b(?!…)")


def expanded(card: Locator) -> Locator:
    """``card`` with its call rows opened, as a reviewer clicks a row open (rows start folded), and
    their bodies in (a folded row's body is fetched when it opens).

    Waits a little for a card that is still arriving (a live insert); a card the test expects gone
    is left alone. Rows the reviewer opened stay open across live refetches (app.js)."""
    try:
        card.first.wait_for(state="attached", timeout=ARRIVAL_MS)
    except PlaywrightTimeoutError:
        return card
    closed = card.locator("details.call-row:not([open]) > summary")
    closed.evaluate_all("(rows) => rows.forEach((r) => r.click())")
    try:
        expect(card.locator(".call-body-lazy")).to_have_count(0, timeout=BODY_MS // 3)
    except AssertionError:
        # Seen now and then on a loaded CI machine, not understood yet: a row found
        # folded again with its body never fetched. Say so in the log, open it again, and go on.
        folded = closed.count()
        print(f"!!! expanded(): {folded} row(s) folded again with their body unloaded; opening again")
        closed.evaluate_all("(rows) => rows.forEach((r) => r.click())")
        expect(card.locator(".call-body-lazy")).to_have_count(0, timeout=BODY_MS)
    # htmx wires up new content when it settles: a click before that would post without htmx.
    expect(card.locator(".call-body.htmx-added")).to_have_count(0, timeout=BODY_MS)
    return card


def declining(card: Locator) -> Locator:
    """``card`` with its calls' "Decline…" opened: the reason field and the Decline button shown."""
    expanded(card).locator("details.decline:not([open]) > summary").evaluate_all(
        "(steps) => steps.forEach((s) => s.click())"
    )
    return card


#: The edit form's JSON view's approve button ("Approve ... with these JSON arguments").
APPROVE_JSON = re.compile(r"with these JSON arguments$")
