"""The bulk preview shows what each call would do (its tool's preview) and its arguments as the card
shows them: money formatted by its tool, not in raw minor units."""

from __future__ import annotations

import html as html_lib
import json
import re
from collections.abc import Iterator

import pytest
from django.test import Client

from agents_runtime import Runtime
from approvals import agents as served
from approvals import tasks
from approvals.models import Batch, BatchItem
from tests.approvals.cards.test_previews import install, start, support_agent, text_of


@pytest.fixture
def desk(transactional_db: None) -> Iterator[Runtime]:
    previous = served.runtime()
    yield install(support_agent())
    served.install(previous)


def test_the_bulk_preview_shows_each_calls_effect_and_its_money_formatted(
    desk: Runtime, reviewer_client: Client
) -> None:
    runs = [
        start(desk, "support", "Please refund $890.00 on order A-1044, it never arrived."),
        start(desk, "support", "Please refund order A-1042, $129.00 - the parcel arrived broken."),
    ]
    calls = [json.dumps([r.run_id, r.tool_calls[0].tool_call_id]) for r in runs]
    created = reviewer_client.post("/agents/support/batches/new", {"call": calls, "scope": "selected"})
    assert created.status_code == 302, created.content.decode()[:500]
    batch = Batch.objects.get(pk=int(re.fullmatch(r"/batches/(\d+)/", created["Location"]).group(1)))  # type: ignore[union-attr]

    page = html_lib.unescape(reviewer_client.get(f"/batches/{batch.pk}/").content.decode())

    table = page[page.index('<table class="table batch-calls">') : page.index("</table>")]
    assert '<th scope="col">What it would do</th>' in table
    rows = [text_of(r) for r in re.findall(r"<tbody>.*?</tbody>", table, re.S)[0].split("</tr>")[:-1]]
    by_order = {("A-1044" if "A-1044" in r else "A-1042"): r for r in rows}
    assert "$890.00" in by_order["A-1044"] and "89000" not in by_order["A-1044"]
    assert "$129.00" in by_order["A-1042"] and "12900" not in by_order["A-1042"]
    assert "$890.00 goes back to sam@example.com for order A-1044." in by_order["A-1044"]
    assert "Refundable on A-1044: $890.00 → $0.00" in by_order["A-1044"]
    assert "$129.00 goes back to dana@example.com for order A-1042." in by_order["A-1042"]
    assert "Store balance: $12,500.00 → $12,371.00" in by_order["A-1042"]


def test_a_bulk_approval_its_recheck_sent_back_reads_not_run(desk: Runtime, reviewer_client: Client) -> None:
    refund = "Please refund $890.00 on order A-1044, it never arrived."
    runs = [start(desk, "support", refund), start(desk, "support", refund)]
    calls = [json.dumps([r.run_id, r.tool_calls[0].tool_call_id]) for r in runs]
    created = reviewer_client.post("/agents/support/batches/new", {"call": calls, "scope": "selected"})
    batch = Batch.objects.get(pk=int(re.fullmatch(r"/batches/(\d+)/", created["Location"]).group(1)))  # type: ignore[union-attr]

    started = reviewer_client.post(f"/batches/{batch.pk}/start", {"action": "approve", "reason": ""})
    assert started.status_code == 302
    thread = tasks.batch_threads.get(batch.pk)
    if thread is not None:
        thread.join(timeout=60)

    # The first refund ran; the second, approved on what was left before it, did not.
    details = sorted(BatchItem.objects.filter(batch=batch).values_list("detail", flat=True))
    assert details == ["Approved", "Not run: changed since approved"]
    page = html_lib.unescape(reviewer_client.get(f"/batches/{batch.pk}/").content.decode())
    assert ">Not run: changed since approved</span>" in page
