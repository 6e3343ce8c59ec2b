"""The demo's interruption budget before and after accepting the grants suggested from its history.

On a scratch SQLite database (or ``DATABASE_URL`` if given), ``manage.py demo_setup`` seeds the demo
(its week of decided calls, then the runs left waiting), and the queue-health figures
(``approvals.health.figures.budget``, last 7 days) give interruptions per 100 calls per agent and
tool: *before*. Then the demo login accepts every grant the grants page suggests to it
(``approvals.services.suggestions``), and the same call mix is run again and decided the same way
(``demo.seed.seed_demo_history``): the figures of that replay alone (the budget after, less the
budget before) are *after*. Beside them, what ``history.trial`` says the accepted grants would have
taken of the seeded history's interruptions.

Prints a table and writes ``bench/results/interruptions.json``.

    .venv/bin/python bench/interruptions.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import ROOT

RESULTS = ROOT / "bench" / "results" / "interruptions.json"


def _setup(database: Path) -> None:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{database}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["AGENTS_RUNTIME"] = "demo.agents:runtime"
    django.setup()


def _week(now: Any) -> dict[tuple[str, str], Any]:
    from approvals.health.figures import budget

    return {(r.agent_id, r.tool_name): r.week for r in budget(None, now=now)}


def _per_100(asked: int, calls: int) -> float | None:
    return None if not calls else round(100 * asked / calls, 1)


def measure() -> dict[str, Any]:
    from asgiref.sync import async_to_sync
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from approvals import agents
    from approvals.management.commands.demo_setup import DEMO_USERNAME
    from approvals.policy import Access
    from approvals.services import suggestions
    from demo.seed import seed_demo_history

    call_command("migrate", verbosity=0)
    call_command("demo_setup", verbosity=0)
    before = _week(timezone.now())
    access = Access.of(get_user_model()._default_manager.get(username=DEMO_USERNAME))
    offered = suggestions.suggestions(access)
    accepted = []
    for suggestion in offered:
        grant = suggestions.accept(access, suggestion.terms)
        # The seeded interruptions the grant would have taken: matched calls a person decided.
        taken = suggestion.trial.approved_by_person
        accepted.append({"grant": grant.id, "summary": suggestion.summary, "would_have_taken": taken})
    async_to_sync(seed_demo_history)(agents.runtime(), DEMO_USERNAME)
    after = _week(timezone.now())
    rows = []
    for key in sorted(before):
        b, a = before[key], after.get(key)
        calls_after = (a.calls - b.calls) if a else 0
        asked_after = (a.asked - b.asked) if a else 0
        rows.append(
            {
                "agent": key[0],
                "tool": key[1],
                "before": {"calls": b.calls, "interruptions": b.asked, "per_100": _per_100(b.asked, b.calls)},
                "after": {
                    "calls": calls_after,
                    "interruptions": asked_after,
                    "per_100": _per_100(asked_after, calls_after),
                },
            }
        )
    total_b = {k: sum(r["before"][k] for r in rows) for k in ("calls", "interruptions")}
    total_a = {k: sum(r["after"][k] for r in rows) for k in ("calls", "interruptions")}
    return {
        "accepted": accepted,
        "rows": rows,
        "total": {
            "before": {**total_b, "per_100": _per_100(total_b["interruptions"], total_b["calls"])},
            "after": {**total_a, "per_100": _per_100(total_a["interruptions"], total_a["calls"])},
        },
    }


def _show(report: dict[str, Any]) -> None:
    for a in report["accepted"]:
        print(f"accepted grant #{a['grant']}: {a['summary']}")
    print(f"{'agent · tool':36} {'before /100':>12} {'after /100':>12}  (interruptions / calls)")
    for r in [*report["rows"], {"agent": "all", "tool": "", **report["total"]}]:
        b, a = r["before"], r["after"]
        name = f"{r['agent']} · {r['tool']}" if r["tool"] else r["agent"]
        print(
            f"{name:36} {b['per_100'] if b['per_100'] is not None else '—':>12} "
            f"{a['per_100'] if a['per_100'] is not None else '—':>12}  "
            f"({b['interruptions']}/{b['calls']} -> {a['interruptions']}/{a['calls']})"
        )


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        _setup(Path(scratch) / "interruptions.sqlite3")
        report = measure()
    _show(report)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
