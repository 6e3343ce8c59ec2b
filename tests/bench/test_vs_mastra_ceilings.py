"""``bench/vs_mastra.py`` says how far each ratio could go: a listing's ceiling is Mastra's time over the
same rows fetched by psycopg alone, an approval's floor pydantic-ai's continuation over Mastra's; a
result file from before the floors were timed still compares, without them."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

LISTINGS = ("list no filter", "list thread", "list resource", "list per_page=20 page=0")


def _case(p50: float) -> dict[str, Any]:
    return {"p50_ms": p50, "p95_ms": p50 * 2, "calls": 20, "total": 200, "runs": 200}


@pytest.fixture
def vs_mastra(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("vs_mastra")


def _sides(with_floors: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    ours: dict[str, Any] = {"cases": {case: _case(10.0) for case in LISTINGS}}
    ours["cases"]["approve e2e"] = {"p50_ms": 16.0, "p95_ms": 20.0, "calls": 20}
    if with_floors:
        ours["cases"].update({f"bare sql {case}": _case(5.0) for case in LISTINGS})
        ours["cases"]["pydantic-ai continuation alone"] = {"p50_ms": 4.0, "p95_ms": 5.0, "calls": 20}
        ours["cases"]["approve e2e in-memory store"] = {"p50_ms": 8.0, "p95_ms": 9.0, "calls": 20}
    theirs: dict[str, Any] = {"cases": {case: _case(60.0) for case in LISTINGS}}
    theirs["cases"]["approve e2e"] = {"p50_ms": 20.0, "p95_ms": 30.0, "calls": 20}
    return ours, theirs


def test_each_ratio_comes_with_the_best_its_floor_allows(vs_mastra: Any, capsys: Any) -> None:
    ours, theirs = _sides(with_floors=True)
    rows = {row["case"]: row for row in vs_mastra.compare(10_000, ours, theirs)}

    thread = rows["list thread"]
    assert (thread["value"], thread["met"]) == (6.0, False)
    assert (thread["floor_ms"], thread["ceiling_value"]) == (5.0, 12.0)  # Mastra 60 / bare 5
    approve = rows["approve e2e"]
    assert (approve["value"], approve["met"]) == (0.8, False)
    assert (approve["floor_ms"], approve["ceiling_value"]) == (4.0, 0.2)  # pydantic-ai 4 / Mastra 20

    vs_mastra.print_size(
        10_000,
        {**ours, "seconds": 1, "seed_seconds": 1, "load_before": [], "load_after": []},
        {**theirs, "source": "reused", "result_file": "x.json"},
        list(rows.values()),
    )
    printed = capsys.readouterr().out
    assert "no listing of them from this database could be more than 12x faster" in printed
    assert "pydantic-ai's continuation alone: 4.00 ms, so 0.2 of Mastra's" in printed


def test_a_result_from_before_the_floors_still_compares(vs_mastra: Any) -> None:
    ours, theirs = _sides(with_floors=False)
    rows = vs_mastra.compare(10_000, ours, theirs)
    assert [row["value"] for row in rows] == [6.0, 6.0, 6.0, 6.0, 0.8]
    assert not any("ceiling" in row for row in rows)
