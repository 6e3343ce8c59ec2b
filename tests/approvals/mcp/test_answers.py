"""What the gateway answers a client asking again for a call someone else claimed."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from approvals.mcp.gateway import _answered
from approvals.models import ApprovalRequest, RequestExecution


def _request() -> ApprovalRequest:
    return ApprovalRequest.objects.create(
        run_id="req_1", agent_id="g", tool_call_id="request", tool_name="files.rm", args={"path": "/a"}
    )


@pytest.mark.django_db(transaction=True)
async def test_a_claim_whose_process_died_is_not_run_again() -> None:
    row = await sync_to_async(_request)()
    an_hour_ago = timezone.now() - timedelta(hours=1)
    stale = await RequestExecution.objects.acreate(request=row, started_at=an_hour_ago, alive_at=an_hour_ago)
    answer = await _answered(stale)
    assert answer.is_error and "not known" in answer.content[0].text  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)
async def test_a_call_still_running_elsewhere_is_awaited() -> None:
    row = await sync_to_async(_request)()
    running = await RequestExecution.objects.acreate(request=row)

    async def finishes() -> None:
        await asyncio.sleep(0.5)
        kept = {"content": [{"type": "text", "text": "removed /a"}], "isError": False}
        await RequestExecution.objects.filter(pk=running.pk).aupdate(finished_at=timezone.now(), result=kept)

    answer, _ = await asyncio.gather(_answered(running), finishes())
    assert answer.content[0].text == "removed /a"  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)
async def test_a_kept_answer_is_given_again() -> None:
    row = await sync_to_async(_request)()
    kept = {"content": [{"type": "text", "text": "removed /a"}], "isError": False}
    done = await RequestExecution.objects.acreate(request=row, finished_at=timezone.now(), result=kept)
    answer = await _answered(done)
    assert not answer.is_error and answer.content[0].text == "removed /a"  # type: ignore[union-attr]
