"""Characters that hide or reorder text are shown as visible marks on the cards."""

from __future__ import annotations

import json
import re
from typing import Any

from django.test import Client

from agents_runtime.untrusted import reveal_invisible
from approvals.models import AuditEntry, Notification
from approvals.notifications import messages
from tests.support.runtime_fixtures import DashboardAgents


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


RLO, ZWSP = "\u202e", "\u200b"
RLO_MARK, ZWSP_MARK = "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧", "⟦U+200B ZERO WIDTH SPACE⟧"


def _raw_in_text(html: str) -> list[str]:
    """Text between tags that still holds a bidi control or zero-width space (form fields aside:
    what a reviewer edits is kept exact)."""
    html = re.sub(r"<textarea.*?</textarea>", "", html, flags=re.S)
    return [t for t in re.findall(r">([^<]*)<", html) if RLO in t or ZWSP in t]


def test_ids_reasons_and_addresses_are_shown_marked_on_every_page_and_kept_exact_in_the_csv(
    agents: DashboardAgents, reviewer_client: Client, admin_member_client: Client, reviewer: Any
) -> None:
    run = agents.start("helpdesk", "refund please", thread=f"t-1{RLO}7", resource=f"cust{ZWSP}-9")
    thread_shown = f"t-1{RLO_MARK}7"
    inbox = reviewer_client.get("/agents/helpdesk/").content.decode()
    card = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    for page in (inbox, card):
        assert thread_shown in page and f"cust{ZWSP_MARK}-9" in page
        assert _raw_in_text(page) == []

    call = run.tool_calls[0]
    reviewer_client.post(
        f"/runs/{run.run_id}/calls/{call.tool_call_id}/decline",
        {"agent": "helpdesk", "reason": f"IBAN 12{RLO}3456 is wrong"},
        HTTP_HX_REQUEST="true",
    )
    record = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    audit = admin_member_client.get("/audit/").content.decode()
    for page in (record, audit):
        assert f"IBAN 12{RLO_MARK}3456 is wrong" in page
        assert _raw_in_text(page) == []
    assert thread_shown in audit
    admin_list = admin_member_client.get("/admin/approvals/auditentry/").content.decode()
    declined = AuditEntry.objects.get(run_id=run.run_id)
    admin_row = admin_member_client.get(f"/admin/approvals/auditentry/{declined.pk}/change/").content.decode()
    assert f"IBAN 12{RLO_MARK}3456 is wrong" in admin_row
    for page in (admin_list, admin_row):
        assert _raw_in_text(page) == []

    export = b"".join(admin_member_client.get("/audit/export.csv").streaming_content).decode()
    assert f"IBAN 12{RLO}3456 is wrong" in export and f"t-1{RLO}7" in export  # the data, exact

    reviewer.email = f"rita{ZWSP}@example.com"
    reviewer.save()
    settings_page = reviewer_client.get("/account/notifications/").content.decode()
    users = admin_member_client.get("/admin/auth/user/").content.decode()
    for page in (settings_page, users):
        assert f"rita{ZWSP_MARK}@example.com" in page
        assert _raw_in_text(page) == []


def test_a_notification_shows_the_calls_title_marked_in_every_part(reviewer: Any) -> None:
    notification = Notification.objects.create(
        recipient=reviewer, channel="email", kind="waiting", agent_id="helpdesk", call_count=1
    )
    notification.calls.create(
        agent_id="helpdesk",
        run_id="run-1",
        tool_call_id="call-1",
        tool_name="refund",
        # (The title is made from the arguments as the call joins: ``notifications.events.call_fields``.)
        title=f"Refund DE12{RLO}3456 · zero{ZWSP}width",
        args={"iban": f"DE12{RLO}3456", "note": f"zero{ZWSP}width"},
    )

    message = messages.build(notification)

    for part in (message.text, message.html, json.dumps(message.chat, ensure_ascii=False)):
        assert f"DE12{RLO_MARK}3456" in part and f"zero{ZWSP_MARK}width" in part
        assert RLO not in part and ZWSP not in part
