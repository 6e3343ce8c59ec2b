"""Characters that hide or reorder text are shown as visible marks on the cards."""

from __future__ import annotations

import re

from django.test import Client

from approvals.cards.text import reveal_invisible
from tests.approvals.runtime_fixtures import DashboardAgents


def test_a_right_to_left_override_in_arguments_is_shown_marked(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    # Shown raw, "IBAN 12\u202e3456" reads "IBAN 126543" on screen.
    run = agents.start("helpdesk", "refund IBAN 12\u202e3456 zero\u200bwidth")

    page = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    shown = re.search(r'<pre class="json">(.*?)</pre>', page, re.S)

    assert shown is not None
    assert "12⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧3456" in shown.group(1)
    assert "zero⟦U+200B ZERO WIDTH SPACE⟧width" in shown.group(1)
    assert "\u202e" not in shown.group(1) and "\u200b" not in shown.group(1)


def test_plain_text_is_left_as_it_is() -> None:
    assert reveal_invisible("Grüße, 東京 ok") == "Grüße, 東京 ok"
    assert (
        reveal_invisible("a\u2066b\u2069")
        == "a⟦U+2066 LEFT-TO-RIGHT ISOLATE⟧b⟦U+2069 POP DIRECTIONAL ISOLATE⟧"
    )
