"""A card of folded rows only, written by the ``waiting_card`` tag, is the markup the ``run-card``
partial writes for it, byte for byte: every list of cards (inbox, queue) and whoever looks."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from approvals.cards.run import RunCard
from approvals.models import CallClaim
from tests.support.runtime_fixtures import XSS, DashboardAgents
from tests.support.users import make_user

HX = {"HTTP_HX_REQUEST": "true"}
ARTICLE = re.compile(r'<article id="run-[^"]*" class="card run-card[^"]*".*?</article>', re.S)


def cards_both_ways(client: Client, url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """The page's cards as the tag writes them, then as the template alone writes them."""
    by_tag = ARTICLE.findall(client.get(url, **HX).content.decode())
    with monkeypatch.context() as patched:
        patched.setattr(RunCard, "folded_rows_only", property(lambda card: False))
        by_template = ARTICLE.findall(client.get(url, **HX).content.decode())
    return by_tag, by_template


def test_a_waiting_card_is_written_as_the_template_writes_it(
    agents: DashboardAgents,
    reviewer: User,
    viewer: User,
    client_for: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agents.start("helpdesk", f"refund {XSS}", thread=XSS, resource="team <b>&</b> \u202eevil")
    agents.start("helpdesk", "schedule")  # an input call
    agents.start("helpdesk", "both")  # two calls on one card
    claimed = agents.start("helpdesk", "refund claimed")
    CallClaim.objects.create(
        agent_id="helpdesk",
        run_id=claimed.run_id,
        tool_call_id=claimed.tool_calls[0].tool_call_id,
        user=make_user("sam", "Reviewers"),
        username="sam",
        claimed_at=timezone.now(),
        expires_at=timezone.now() + timedelta(hours=1),
    )
    agents.start("boss", "delegate")  # the worker's card: decided through its supervisor

    for client in (client_for(reviewer), client_for(viewer)):  # with the bulk ticks, and without
        for url in ("/agents/helpdesk/", "/agents/worker/", "/queue/"):
            by_tag, by_template = cards_both_ways(client, url, monkeypatch)
            assert by_tag == by_template, url
    inbox, _ = cards_both_ways(client_for(reviewer), "/agents/helpdesk/", monkeypatch)
    assert len(inbox) == 4 and sum(card.count('class="call ') for card in inbox) == 5
    assert XSS not in "".join(inbox) and "&lt;script&gt;" in "".join(inbox)
