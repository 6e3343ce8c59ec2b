"""``bench/decide_throughput.py``'s exactly-once check can fail: a clean record passes, and each kind of
duplicate (a second audit row, a tool run twice, a decision nobody posted) is reported."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

POSTED = [("r1", "c1", "approve", "ann"), ("r2", "c2", "decline", "bob")]
AUDIT = [("r1", "c1", "approve", "completed", "ann"), ("r2", "c2", "decline", "completed", "bob")]
RAN = [("r1", "c1")]
#: A seeded run nobody decided, still waiting.
STORE = [("r3", "c3", None)]


@pytest.fixture
def check(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[str]]:
    monkeypatch.syspath_prepend(str(BENCH))
    module: Any = importlib.import_module("decide_throughput")
    checker: Callable[..., list[str]] = module.check_exactly_once
    return checker


def test_a_clean_record_passes(check: Callable[..., list[str]]) -> None:
    assert check(POSTED, AUDIT, RAN, STORE) == []


@pytest.mark.parametrize(
    ("audit", "ran", "store", "found"),
    [
        ([*AUDIT, ("r1", "c1", "approve", "completed", "ann")], RAN, STORE, "2 audit rows took effect"),
        (AUDIT, [*RAN, ("r1", "c1")], STORE, "approved, the tool ran 2 times"),
        (AUDIT, [*RAN, ("r2", "c2")], STORE, "declined, the tool ran 1 times"),
        (AUDIT, [*RAN, ("r3", "c3")], STORE, "the tool ran 1 times on a call nobody decided"),
        ([*AUDIT, ("r3", "c3", "approve", "completed", "eve")], RAN, STORE, "no reviewer posted it"),
        (AUDIT[:1], RAN, STORE, "0 audit rows took effect"),
        (AUDIT, RAN, [*STORE, ("r1", "c1", "approve")], "still in the run store"),
    ],
)
def test_a_duplicate_or_a_missing_effect_is_reported(
    check: Callable[..., list[str]], audit: Any, ran: Any, store: Any, found: str
) -> None:
    problems = check(POSTED, audit, ran, store)
    assert any(found in p for p in problems), problems


def test_a_lost_race_row_is_no_second_decision(check: Callable[..., list[str]]) -> None:
    assert check(POSTED, [*AUDIT, ("r1", "c1", "approve", "lost_race", "bob")], RAN, STORE) == []
