"""An approval its recheck sent back (``tool(recheck=True)``, the demo's refund): the card shows what
was approved beside what the call would do now, the audit row says why it did not run, and the run
page shows each decision's chain (shown, decided on which fingerprint, executed)."""

from __future__ import annotations

import html as html_lib
import itertools
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core import signing
from django.test import Client

from agents_runtime import Runtime
from agents_runtime.store import Outcome
from approvals import agents as served
from approvals.models import AuditEntry
from demo import tools as demo_tools
from tests.approvals.cards.test_previews import SEEN, install, start, support_agent, text_of, wirer
from tests.support.inbox_rows import HX

REFUND = "Please refund $890.00 on order A-1044, it never arrived."


@pytest.fixture
def desk(transactional_db: None) -> Iterator[Runtime]:
    previous = served.runtime()
    yield install(support_agent(), wirer())
    served.install(previous)


def seen_on_run_page(client: Client, run_id: str) -> str:
    (seen,) = set(SEEN.findall(client.get(f"/runs/{run_id}/").content.decode()))
    return seen


def approve(client: Client, run: Any, seen: str) -> str:
    url = f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/approve"
    answer = client.post(url, {"agent": "support", "seen": seen}, **HX)
    assert answer.status_code == 200, answer.content.decode()[:500]
    return answer.content.decode()


def side_by_side(page: str) -> tuple[str, str]:
    found = re.search(
        r'<div class="recheck-approved">(.*?)</div>\s*<div class="recheck-now">(.*?)</div>', page, re.S
    )
    assert found is not None, "no previews side by side"
    return text_of(found.group(1)), text_of(found.group(2))


def test_a_refund_whose_order_changed_before_it_ran_waits_again_showing_both_previews(
    desk: Runtime, reviewer_client: Client, admin_member_client: Client
) -> None:
    first, second = start(desk, "support", REFUND), start(desk, "support", REFUND)
    seen_second = seen_on_run_page(reviewer_client, second.run_id)
    first_seen = seen_on_run_page(reviewer_client, first.run_id)
    assert "Refunded $890.00" in approve(reviewer_client, first, first_seen)

    # The second card was shown before the first refund ran: approved on it, it does not run.
    answer = html_lib.unescape(approve(reviewer_client, second, seen_second))

    assert "Not run: what it would do changed since it was approved" in answer
    assert "What you approved" in answer and "What it would do now" in answer

    assert demo_tools.REFUNDED_CENTS == {(None, "A-1044"): 89_000}
    row = AuditEntry.objects.get(run_id=second.run_id, action="approve")
    assert row.outcome == Outcome.RECHECK_CHANGED
    assert "Not run: what it would do changed since it was approved" in row.outcome_detail
    assert row.fingerprint == seen_second
    page = html_lib.unescape(reviewer_client.get(f"/runs/{second.run_id}/").content.decode())
    assert "but not run:" in page and "what it would do changed since it was approved" in page
    approved, now = side_by_side(page)
    assert approved.startswith("What you approved $890.00 goes back to sam@example.com")
    assert "Refundable on A-1044 $890.00 $0.00" in approved
    assert now.startswith("What it would do now $890.00 goes back")
    assert "more than is left to refund on it ($0.00)" in now
    assert "Refundable on A-1044 $0.00 -$890.00" in now
    # The v1 API tells an API decider the same: what was approved, what it would do now, the recheck.
    (api_call,) = reviewer_client.get(f"/api/v1/agents/support/runs/{second.run_id}").json()["toolCalls"]
    assert api_call["approvedPreview"]["sentence"].startswith("$890.00 goes back to sam@example.com")
    assert "more than is left to refund" in api_call["preview"]["sentence"]
    assert api_call["recheck"]["error"] is None and api_call["recheck"]["at"]
    assert api_call["fingerprint"] == seen_on_run_page(reviewer_client, second.run_id)

    # The approval is bound to what it would do now: the old card decides nothing, the fresh one runs it.
    stale = approve(reviewer_client, second, seen_second)
    assert "The call changed since you saw it" in html_lib.unescape(stale)
    fresh = seen_on_run_page(reviewer_client, second.run_id)
    assert fresh != seen_second
    assert "Refunded $890.00 on A-1044" in approve(reviewer_client, second, fresh)
    assert demo_tools.REFUNDED_CENTS == {(None, "A-1044"): 178_000}
    rows = AuditEntry.objects.filter(run_id=second.run_id, action="approve").order_by("id")
    assert [(r.outcome, r.fingerprint) for r in rows] == [
        (Outcome.RECHECK_CHANGED, seen_second),
        (Outcome.REFUSED, ""),  # the stale card's attempt
        (Outcome.COMPLETED, fresh),
    ]
    audit = html_lib.unescape(admin_member_client.get("/audit/").content.decode())
    assert "Not run: changed since approved" in audit


def test_a_recheck_that_fails_sends_the_call_back_with_its_error(
    desk: Runtime, reviewer_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = start(desk, "support", REFUND)
    seen = seen_on_run_page(reviewer_client, run.run_id)
    monkeypatch.setattr(demo_tools, "ORDERS", None)  # the order book is unreachable now

    approve(reviewer_client, run, seen)

    assert demo_tools.REFUNDED_CENTS == {}
    row = AuditEntry.objects.get(run_id=run.run_id, action="approve")
    assert row.outcome == Outcome.RECHECK_FAILED
    assert "its preview could not be run again" in row.outcome_detail
    page = html_lib.unescape(reviewer_client.get(f"/runs/{run.run_id}/").content.decode())
    assert "its preview could not be run again before the tool (The preview failed (AttributeError" in page
    _, now = side_by_side(page)
    assert now.startswith("What it would do now No preview: The preview failed (AttributeError")


def test_the_run_page_shows_each_decisions_chain(desk: Runtime, reviewer_client: Client) -> None:
    first, second = start(desk, "support", REFUND), start(desk, "support", REFUND)
    seen_second = seen_on_run_page(reviewer_client, second.run_id)
    approve(reviewer_client, first, seen_on_run_page(reviewer_client, first.run_id))
    approve(reviewer_client, second, seen_second)
    fresh = seen_on_run_page(reviewer_client, second.run_id)
    approve(reviewer_client, second, fresh)

    page = reviewer_client.get(f"/runs/{second.run_id}/").content.decode()

    chains = [text_of(c) for c in re.findall(r'<ol class="decision-chain">(.*?)</ol>', page, re.S)]
    assert len(chains) == 2
    user = reviewer_client.get("/").wsgi_request.user.get_username()
    assert re.fullmatch(
        rf"Shown from .+, with its preview Decided by {user} on {seen_second[:12]} "
        r"Not run: changed since approved",
        chains[0],
    ), chains[0]
    assert re.fullmatch(
        rf"Shown from .+, with its preview Decided by {user} on {fresh[:12]} Ran; the run completed",
        chains[1],
    ), chains[1]


SHOWN = re.compile(r'name="shown" value="([^"]+)"')


def test_every_form_of_a_card_carries_the_moment_the_card_was_shown(
    desk: Runtime, reviewer_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The card is shown once: its forms (approve, decline, ...) carry one stamp, however long the
    page takes to render. Here a clock that moves a second at each reading (before, each form read
    it: a page rendered across a second's turn gave its forms different stamps)."""
    run = start(desk, "support", REFUND)
    seconds = itertools.count(1_800_000_000)
    monkeypatch.setattr(signing.TimestampSigner, "timestamp", lambda self: signing.b62_encode(next(seconds)))

    stamps = SHOWN.findall(reviewer_client.get(f"/runs/{run.run_id}/").content.decode())

    assert len(stamps) >= 2 and len(set(stamps)) == 1, stamps


def test_a_card_decision_records_when_its_decider_was_shown_the_call(
    desk: Runtime, reviewer_client: Client
) -> None:
    run, other = start(desk, "support", REFUND), start(desk, "support", REFUND)
    before = datetime.now(UTC).replace(microsecond=0)
    page = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    (seen,), (shown,) = set(SEEN.findall(page)), set(SHOWN.findall(page))
    url = f"/runs/{run.run_id}/calls/{run.tool_calls[0].tool_call_id}/approve"

    reviewer_client.post(url, {"agent": "support", "seen": seen, "shown": shown}, **HX)

    row = AuditEntry.objects.get(run_id=run.run_id, action="approve")
    assert row.shown_at is not None and before <= row.shown_at <= datetime.now(UTC)
    user = row.username
    chain = text_of(
        re.findall(
            r'<ol class="decision-chain">(.*?)</ol>',
            reviewer_client.get(f"/runs/{run.run_id}/").content.decode(),
            re.S,
        )[0]
    )
    assert chain.startswith(f"Shown to {user} at "), chain
    # A stamp not signed by the desk (typed, or moved to another time) is not taken as the truth.
    forged = shown.rsplit(":", 2)[0] + ":1:" + shown.rsplit(":", 1)[1]
    url = f"/runs/{other.run_id}/calls/{other.tool_calls[0].tool_call_id}/approve"
    other_seen = seen_on_run_page(reviewer_client, other.run_id)
    reviewer_client.post(url, {"agent": "support", "seen": other_seen, "shown": forged}, **HX)
    taken = AuditEntry.objects.get(run_id=other.run_id, action="approve")
    assert taken.outcome != Outcome.REFUSED and taken.shown_at is None
