"""Running an approved request's call once (``approvals.services.executions``): one claim wins, the
answer is kept for whoever asks again (the gateway's side: tests/approvals/mcp/test_answers.py)."""

from __future__ import annotations

import pytest

from approvals.models import ApprovalRequest
from approvals.services import executions


def _request() -> ApprovalRequest:
    return ApprovalRequest.objects.create(
        run_id="req_1", agent_id="g", tool_call_id="request", tool_name="files.rm", args={"path": "/a"}
    )


@pytest.mark.django_db
def test_one_claim_wins_and_the_answer_is_kept() -> None:
    row = _request()
    first, mine = executions.claim(row)
    again, theirs = executions.claim(row)
    assert (mine, theirs) == (True, False) and first.pk == again.pk
    answer = {"content": [{"type": "text", "text": "x" * 2_000_000}], "isError": False}
    executions.finish(first, result=answer, ok=True, output="removed", actor="external:g")
    kept = executions.kept(first)
    assert kept.finished_at is not None
    # Too large to keep whole: a note says so (the request was not approved: no report either).
    assert kept.result is not None and "over 1,000,000 bytes" in kept.result["content"][0]["text"]
    row.refresh_from_db()
    assert row.result_reported_at is None
