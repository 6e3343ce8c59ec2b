"""A call's row written by the ``call_head`` and ``folded_body`` tags is the markup the template
wrote before (kept here as it was), escaping included, whatever the values hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.template import engines

from approvals.cards.args import ArgView
from approvals.cards.call import DeadlineView

#: The row as run_card.html wrote it before the tags (its head, "|", a folded row's body).
BEFORE = engines["django"].from_string((Path(__file__).parent / "call_row_before.html").read_text())
AFTER = engines["django"].from_string(
    "{% load countersign %}{% call_head card cv %}|{% folded_body card cv %}"
)

HOSTILE = "<script>alert(\"x\")</script> & 'q' \u202eevil\u200b"


def _row(**changes: Any) -> dict[str, Any]:
    call = SimpleNamespace(tool_name="deploy_service", tool_call_id="call_1")
    cv = SimpleNamespace(
        call=call,
        run_id="run1",
        dom_id="call-run1-call_1",
        title="Deploy billing-api",
        is_approval=True,
        kind_label="Approval",
        via_agent="",
        deadline=None,
        claim=None,
        risky_args=[],
        held_by="",
        open=False,
        body_key="waiting",
        body_url="/runs/run1/calls/call_1/",
    )
    card = SimpleNamespace(
        run_id="run1",
        agent_id="ops",
        agent_name="Release engineer",
        thread_id="release-1",
        resource_id="team-1",
        suspended_at=datetime(2026, 10, 1, 4, 29, 16, tzinfo=UTC),
        interrupted=False,
        parent_run_id=None,
        next_url="/agents/ops/?per_page=50&page=2",
        run_url="/runs/run1/",
    )
    for key, value in changes.items():
        owner, _, name = key.partition("__")
        setattr(cv if owner == "cv" else card, name, value)
    return {"card": card, "cv": cv}


def _deadline(**changes: Any) -> DeadlineView:
    shown = {
        "expires_at": datetime.now(UTC) + timedelta(minutes=3),
        "remaining_seconds": 180,
        "on_expiry": "approve",
        "escalated_to": "",
        "extend_url": "/x",
    }
    return DeadlineView(**(shown | changes))


CASES = {
    "plain": {},
    "input call, no thread nor resource": {
        "cv__is_approval": False,
        "cv__kind_label": "Input",
        "card__thread_id": None,
        "card__resource_id": "",
    },
    "hostile values everywhere": {
        "cv__title": HOSTILE,
        "cv__via_agent": HOSTILE,
        "cv__held_by": HOSTILE,
        "cv__call": SimpleNamespace(tool_name=HOSTILE, tool_call_id=HOSTILE),
        "cv__risky_args": [
            ArgView("env", HOSTILE, "enum", HOSTILE, risky=True),
            ArgView("n", "N", "number", "1"),
        ],
        "cv__claim": SimpleNamespace(username=HOSTILE),
        "cv__body_key": HOSTILE,
        "card__agent_name": HOSTILE,
        "card__thread_id": HOSTILE,
        "card__resource_id": HOSTILE,
        "card__run_id": HOSTILE,
        "card__agent_id": HOSTILE,
        "card__next_url": "/agents/ops/?q=" + HOSTILE,
    },
    "open, interrupted, a sub-agent's": {
        "cv__open": True,
        "card__interrupted": True,
        "card__parent_run_id": "p1",
    },
    "deadline due soon": {"cv__deadline": _deadline()},
    "escalated, with a second deadline": {"cv__deadline": _deadline(escalated_to=HOSTILE)},
    "escalated, no deadline": {"cv__deadline": _deadline(escalated_to="ops-leads", expires_at=None)},
    "deadline far off": {"cv__deadline": _deadline(remaining_seconds=86_400, on_expiry="escalate")},
    "claimed by the viewer": {"cv__claim": SimpleNamespace(username="rita")},
    "not waiting any more": {"card__suspended_at": None},
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("bulk", [True, False])
def test_the_row_is_what_the_template_wrote(case: str, bulk: bool) -> None:
    context = _row(**CASES[case]) | {
        "bulk": bulk,
        "can_decide": True,
        "user": SimpleNamespace(get_username=lambda: "rita"),
    }

    after = AFTER.render(context)

    assert after == BEFORE.render(context)
    assert "<script>" not in after


def test_without_a_user_every_claim_is_someone_elses() -> None:
    context = _row(cv__claim=SimpleNamespace(username="rita"))

    assert AFTER.render(context) == BEFORE.render(context)
    assert "chip-claim" in AFTER.render(context)
