"""Daphne under cProfile, for ``bench/decide_throughput.py --profile``: the arguments are Daphne's.

The profiler runs only between SIGUSR1 (start) and SIGUSR2 (stop, then the stats are written to
``BENCH_PROFILE``), so that start-up, logins and the warm-up stay out of the profile.

Python 3.12's cProfile sees every thread of the process through one call stack (``sys.monitoring``
is process-wide), so its ``tottime`` column is exact, while a ``cumtime`` can hold work another thread
did meanwhile: the request's thread and the event loop take turns, so a blocking call (a future's
``result()``, the reactor's ``poll``) holds what ran on the other side while it waited.
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys

from daphne.cli import CommandLineInterface

# The wall clock (the default): timed by the process's CPU clock, a system call here, the profiler's own
# cost tripled a decision's CPU and went mostly to the functions called most often. Waits for
# PostgreSQL therefore show, as psycopg's ``wait``, and the reactor's ``poll`` holds the idle time.
profiler = cProfile.Profile()


def _start(*_: object) -> None:
    profiler.enable()


def _stop(*_: object) -> None:
    profiler.disable()
    # Renamed once complete: the bench waits for the file to appear.
    path = os.environ["BENCH_PROFILE"]
    profiler.dump_stats(path + ".part")
    os.replace(path + ".part", path)


signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
sys.argv = ["daphne", *sys.argv[1:]]
CommandLineInterface.entrypoint()
