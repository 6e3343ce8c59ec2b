"""Before/after pairs: run one benchmark on an older commit and on this checkout, in turns, and
print the ratios (after / before), so that the machine's noise cancels out of the comparison.

The older commit is checked out in a temporary git worktree (sharing this checkout's ``.venv``); the
benchmark runs there and here alternately, each round in the other order than the last (before,
after, after, before...: an even number of rounds puts each side first as often), each run writing its
usual ``bench/results/<name>.json`` in its own tree, which is read after each run. For every figure
(a row's p50 and p95) the median over the rounds is kept; the ratio is after / before. This
checkout's own ``bench/results/<name>.json`` is put back as it was afterwards: a pair compares, it
does not replace the figures the benchmark saved at its full size.

Prints a table and writes ``bench/results/pair_<name>.json``:
``{"before": <commit>, "after": <commit>, "rounds": N, "command": [...], "rows": [...]}`` with each
row's key fields, its before and after medians and their ratios. ``bench/decide_throughput.py``'s
levels are rows of their own (server processes, reviewers), with decisions per second and the
server's CPU per decision besides p50 and p95.

    .venv/bin/python bench/pair.py --before c08140a -- bench/inbox_page.py --backends postgres
    .venv/bin/python bench/pair.py --before c08140a --rounds 3 -- bench/push_latency.py --clients 500
    .venv/bin/python bench/pair.py --before 583071d -- bench/decide_throughput.py --levels 1 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ("p50_ms", "p95_ms", "ratio", "decisions_per_s", "server_cpu_ms")


def _commit(tree: Path, ref: str = "HEAD") -> str:
    out = subprocess.run(["git", "rev-parse", "--short", ref], cwd=tree, capture_output=True, text=True)
    return out.stdout.strip()


def _run(tree: Path, command: list[str], result: Path) -> list[dict[str, Any]]:
    """One run of the benchmark in ``tree``; the rows it wrote."""
    result.unlink(missing_ok=True)
    print(f"--- {tree} ({_commit(tree)}): {' '.join(command)}", flush=True)
    subprocess.run([sys.executable, *command], cwd=tree, check=True, env=os.environ.copy())
    rows: list[dict[str, Any]] = json.loads(result.read_text())
    return [row for entry in rows for row in _levels(entry)]


def _levels(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """``bench/decide_throughput.py``'s entries (one per number of server processes, each with its
    levels) as one row per level, keyed by processes and reviewers; other benches' rows as they are."""
    if "levels" not in entry:
        return [entry]
    return [
        {
            "server_processes": entry["server_processes"],
            "reviewers": level["reviewers"],
            "p50_ms": level["p50_ms"],
            "p95_ms": level["p95_ms"],
            "decisions_per_s": level["decisions_per_s"],
            "server_cpu_ms": level["cpu_ms_per_decision"]["daphne"],
        }
        for level in entry["levels"]
    ]


#: The fields that say which case a row is (any others are measurements a pair does not compare).
IDENTITY = ("backend", "n", "case", "setup", "clients", "server_processes", "reviewers")


def _key(row: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple((k, row[k]) for k in IDENTITY if k in row)


def _medians(runs: list[list[dict[str, Any]]]) -> dict[tuple[tuple[str, Any], ...], dict[str, float]]:
    collected: dict[tuple[tuple[str, Any], ...], dict[str, list[float]]] = {}
    for rows in runs:
        for row in rows:
            figures = collected.setdefault(_key(row), {f: [] for f in FIGURES})
            for figure in FIGURES:
                if row.get(figure) is not None:
                    figures[figure].append(float(row[figure]))
    return {
        key: {f: round(statistics.median(v), 2) for f, v in figures.items() if v}
        for key, figures in collected.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="the older commit (anything git rev-parse takes)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, taken in turns")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- bench/<name>.py [its arguments]")
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"]
    if not command or not command[0].startswith("bench/"):
        parser.error("give the benchmark after --, e.g. -- bench/inbox_page.py --backends postgres")
    name = Path(command[0]).stem
    saved = ROOT / "bench" / "results" / f"{name}.json"
    kept = saved.read_bytes() if saved.exists() else None
    try:
        runs, before_commit = _pair(args.before, args.rounds, command, name)
    finally:
        if kept is None:
            saved.unlink(missing_ok=True)
        else:
            saved.write_bytes(kept)
    _report(name, command, args.rounds, runs, before_commit)


def _pair(
    ref: str, rounds: int, command: list[str], name: str
) -> tuple[dict[str, list[list[dict[str, Any]]]], str]:
    """The benchmark's rows from each run, before and after in turns, and the older commit."""
    with tempfile.TemporaryDirectory(prefix="bench-before-") as tmp:
        before = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(before), ref], cwd=ROOT, check=True)
        try:
            (before / ".venv").symlink_to(ROOT / ".venv")
            runs: dict[str, list[list[dict[str, Any]]]] = {"before": [], "after": []}
            sides = [("before", before), ("after", ROOT)]
            for round_ in range(rounds):
                # Which side goes first alternates (before, after, after, before...): on this
                # machine the first run of a round came out slower whatever its code.
                for side, tree in sides if round_ % 2 == 0 else sides[::-1]:
                    runs[side].append(_run(tree, command, tree / "bench" / "results" / f"{name}.json"))
            return runs, _commit(before)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)


def _report(
    name: str,
    command: list[str],
    rounds: int,
    runs: dict[str, list[list[dict[str, Any]]]],
    before_commit: str,
) -> None:
    """Prints the table and writes ``bench/results/pair_<name>.json``."""
    old, new = _medians(runs["before"]), _medians(runs["after"])
    rows = []
    print(f"\n{name}: after {_commit(ROOT)} / before {before_commit}, median of {rounds} runs each")
    for key, figures in new.items():
        if key not in old:
            continue
        row: dict[str, Any] = dict(key)
        label = " ".join(str(v) for _, v in key)
        parts = []
        for figure in FIGURES:
            if figure in figures and figure in old[key] and old[key][figure] > 0:
                ratio = round(figures[figure] / old[key][figure], 3)
                row |= {f"before_{figure}": old[key][figure], f"after_{figure}": figures[figure]}
                row[f"ratio_{figure.removesuffix('_ms')}"] = ratio
                parts.append(f"{figure} {old[key][figure]:>8} -> {figures[figure]:>8} ({ratio:.2f}x)")
        rows.append(row)
        print(f"  {label:<45} " + "   ".join(parts))
    out = ROOT / "bench" / "results" / f"pair_{name}.json"
    report = {
        "before": before_commit,
        "after": _commit(ROOT),
        "rounds": rounds,
        "command": command,
        "rows": rows,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
