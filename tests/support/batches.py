"""Bulk decisions as a reviewer makes them: calls picked on the inbox, a draft batch previewed, then
started; and the preview's groups as the page words them."""

from __future__ import annotations

import html
import json
import re

from django.test import Client

from agents_runtime import RunResult
from approvals import tasks
from approvals.models import Batch


def key(run: RunResult, index: int = 0) -> str:
    """A call's checkbox value on the inbox."""
    return json.dumps([run.run_id, run.tool_calls[index].tool_call_id])


def prepare(client: Client, calls: list[str], query: str = "") -> Batch:
    response = client.post(f"/agents/helpdesk/batches/new{query}", {"call": calls, "scope": "selected"})
    assert response.status_code == 302, response.content.decode()[:500]
    match = re.fullmatch(r"/batches/(\d+)/", response["Location"])
    assert match, response["Location"]
    return Batch.objects.get(pk=int(match.group(1)))


def start(client: Client, batch: Batch, action: str, reason: str = "") -> None:
    response = client.post(f"/batches/{batch.pk}/start", {"action": action, "reason": reason})
    assert response.status_code == 302 and response["Location"] == f"/batches/{batch.pk}/"
    thread = tasks.batch_threads.get(batch.pk)
    if thread is not None:
        thread.join(timeout=60)
    batch.refresh_from_db()


def rules_of(page: str) -> list[str]:
    """The preview's groups, as read: "2 will get your vote, 1 of 2: nothing runs yet"."""
    start = page.index('<section class="batch-rules"')
    section = page[start : page.index("</section>", start)]
    items = section.split('<li class="batch-rule')[1:]
    return [
        html.unescape(
            " ".join(
                i.split(">", 1)[1].split("</li>")[0].replace("<strong>", "").replace("</strong>", "").split()
            )
        )
        for i in items
    ]
