"""Benchmark: the test suite's wall time against its floor, the CPU it spends over the machine's cores.

Runs the suite as ``make test`` does (``pytest -n WORKERS --dist loadgroup``, with ``-p no:cacheprovider``
so that no earlier run's cache orders it), on the database and channel layer the environment names
(SQLite and the in-process layer when ``DATABASE_URL`` / ``REDIS_URL`` are unset), and samples the
whole machine's busy CPU time (``/proc/stat``) every second meanwhile: the workers, the servers,
``manage.py`` processes and browsers the tests start, whatever their parent. The floor is that CPU
over the cores: a run cannot end sooner without doing less work. The run's figures:

- ``wall_s``: the pytest command, start to end (collection and the workers' set-up included);
- ``cpu_s``: the machine's busy CPU over that time, and ``floor_s`` = ``cpu_s`` / cores;
- ``busy_cores``: ``cpu_s`` / ``wall_s``, and the least busy 30-second window (where the run waits);
- the test counts, and the slowest tests (``--junitxml``'s times).

Run it on an otherwise idle machine: another process's CPU counts as the suite's (on a virtual
machine, time the hypervisor gives other machines, steal, is reported apart and not counted).
Prints a table and writes ``bench/results/test_run.json``.

    .venv/bin/python bench/test_run.py
    .venv/bin/python bench/test_run.py --workers 6 -- tests/e2e
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "test_run.json"
WINDOW_SECONDS = 30


def busy_seconds() -> float:
    """The machine's busy CPU time since boot (every core): user, nice, system, interrupts; not idle,
    I/O wait, nor the time the hypervisor gave other machines (steal: reported apart)."""
    user, nice, system, _idle, _iowait, irq, softirq = _ticks()[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def steal_seconds() -> float:
    """CPU time this virtual machine wanted and another one got."""
    ticks = _ticks()
    return (ticks[7] if len(ticks) > 7 else 0) / os.sysconf("SC_CLK_TCK")


def _ticks() -> list[int]:
    with open("/proc/stat") as stat:
        return [int(value) for value in stat.readline().split()[1:]]


class Sampler(threading.Thread):
    """The busy CPU of each second while the suite runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        before = busy_seconds()
        while not self.stopping.wait(1.0):
            now = busy_seconds()
            self.samples.append(now - before)
            before = now


def _counts(report: Path) -> tuple[dict[str, int], list[tuple[float, str]]]:
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    times: list[tuple[float, str]] = []
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        times.append((float(case.get("time") or 0), name))
        if case.find("skipped") is not None:
            counts["skipped"] += 1
        elif case.find("failure") is not None:
            counts["failed"] += 1
        elif case.find("error") is not None:
            counts["errors"] += 1
        else:
            counts["passed"] += 1
    return counts, sorted(times, reverse=True)


def measure(workers: int, pytest_args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        if workers:
            command += ["-n", str(workers), "--dist", "loadgroup"]
        command += pytest_args
        sampler = Sampler()
        stolen = steal_seconds()
        started = time.monotonic()
        sampler.start()
        done = subprocess.run(command, cwd=ROOT, check=False)
        wall = time.monotonic() - started
        stolen = steal_seconds() - stolen
        sampler.stopping.set()
        sampler.join()
        counts, slowest = _counts(report) if report.exists() else ({}, [])
    cpu = sum(sampler.samples)
    cores = os.cpu_count() or 1
    windows = [
        sum(sampler.samples[i : i + WINDOW_SECONDS]) / len(sampler.samples[i : i + WINDOW_SECONDS])
        for i in range(0, len(sampler.samples), WINDOW_SECONDS)
    ]
    return {
        "command": command,
        "exit_code": done.returncode,
        "workers": workers,
        "cores": cores,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "floor_s": round(cpu / cores, 1),
        "busy_cores": round(cpu / wall, 2),
        "steal_s": round(stolen, 1),
        "least_busy_window_cores": round(min(windows), 2) if windows else None,
        "tests": counts,
        "slowest": [{"seconds": round(t, 1), "test": name} for t, name in slowest[:15]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=4, help="pytest-xdist workers, as make test's WORKERS")
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    options = parser.parse_args()
    figures = measure(options.workers, options.pytest_args)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    tests = figures["tests"]
    print(f"\n{tests.get('passed', 0)} passed, {tests.get('skipped', 0)} skipped, ", end="")
    print(f"{tests.get('failed', 0)} failed, {tests.get('errors', 0)} errors (exit {figures['exit_code']})")
    print(f"wall {figures['wall_s']} s   CPU {figures['cpu_s']} s on {figures['cores']} cores")
    print(f"stolen by other machines meanwhile {figures['steal_s']} s (not counted as the suite's)")
    over = figures["wall_s"] / figures["floor_s"]
    print(f"floor (CPU / cores) {figures['floor_s']} s   wall / floor {over:.2f}")
    least = figures["least_busy_window_cores"]
    print(f"busy cores {figures['busy_cores']} on average, {least} in the least busy 30 s")
    print("slowest:")
    for row in figures["slowest"]:
        print(f"  {row['seconds']:7.1f} s  {row['test']}")
    print(f"saved {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
