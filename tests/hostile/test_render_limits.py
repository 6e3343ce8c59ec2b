"""Rendering limits: money in cards and titles, from values an external agent or a model supplies.

``Money`` formats an amount exactly (``presentation.Money.format``: "Never rounded"), from a number or
a Decimal-like string. Decimal arithmetic in the default context is neither exact past 28 digits nor
safe past an exponent of 999999 (``decimal.Overflow``): a ten-character argument must not make a card
unapprovable, nor a long amount read as another amount.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient

from agents_runtime import Runtime
from agents_runtime.presentation import Money, title_for
from approvals.services import requests as service
from tests.api.conftest import mastra  # noqa: F401 - the served runtime
from tests.support.api import Api

REQUESTS = "/api/v1/approval-requests"
MONEY_SCHEMA = {
    "type": "object",
    "properties": {
        "to": {"type": "string"},
        "amount_cents": {"type": ["integer", "string"], "x-money": {"currency": "USD", "unit": "minor"}},
    },
}
HUGE = ["1e1000002", "-1E+2000000", "9" * 30 + "e999999"]


@pytest.fixture
def payer(mastra: Runtime) -> Api:  # noqa: F811
    service.register("payer", name="Payments (elsewhere)")
    return Api(service.agent_token("payer", name="payer's token").plaintext)


@pytest.mark.parametrize("amount", HUGE)
async def test_a_money_argument_with_a_huge_exponent_leaves_the_card_approvable(
    payer: Api, reviewer: User, amount: str
) -> None:
    """``Money.format`` takes ``abs()`` in the default decimal context: past Emax it raises
    ``decimal.Overflow``, the card falls back to "cannot be shown" and the request can only be declined."""
    asked = await payer.post(
        REQUESTS,
        {
            "agent": "payer",
            "tool": "pay",
            "args": {"to": "ann", "amount_cents": amount},
            "argsSchema": MONEY_SCHEMA,
        },
    )
    assert asked.status_code == 201, asked.content
    client = AsyncClient()
    await sync_to_async(client.force_login)(reviewer)
    started = time.monotonic()
    card = await client.get(f"/runs/{asked.json()['id']}/")
    assert card.status_code == 200
    html = card.content.decode()
    assert "cannot be shown properly" not in html
    assert 'class="primary approve"' in html
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("amount", HUGE)
def test_money_format_of_a_huge_exponent_never_raises(amount: str) -> None:
    for money in (Money(), Money(cents=True), Money(currency="JPY", cents=True)):
        shown = money.format(amount)
        assert shown is None or len(shown) < 10_000


@pytest.mark.parametrize("template", ["Refund {amount|money}", None])
def test_a_title_never_raises_on_a_huge_money_string(template: Any) -> None:
    """``title_for`` says it never raises; ``{amount|money}`` (and a ``Money`` hint) on a Decimal-like
    string argument raises ``decimal.Overflow`` from ``Money.format``."""
    for hints in ({}, {"amount": Money()}):
        title = title_for(template, "refund", {"amount": "1e1000000"}, hints)
        assert isinstance(title, str) and len(title) <= 120


@pytest.mark.parametrize(
    ("money", "value", "expected"),
    [
        # 10**30 + 1 cents: one cent past ten nonillion dollars, not ten nonillion dollars even.
        (Money(cents=True), 10**30 + 1, "$10,000,000,000,000,000,000,000,000,000.01"),
        (Money(), -(10**28) - 1, "-$10,000,000,000,000,000,000,000,000,001.00"),
        # 31 significant digits: the last three must not read as "000".
        (Money(), "0.1234567890123456789012345678901", "$0.1234567890123456789012345678901"),
    ],
)
def test_money_is_never_rounded(money: Money, value: Any, expected: str) -> None:
    """``abs()`` rounds to the context's 28 digits: a reviewer reads an amount the tool never gets."""
    assert money.format(value) == expected
