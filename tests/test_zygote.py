"""The processes the tests start from the zygote (``tests/support/zygote.py``) behave as the ones
``python`` would start: what a test asserts of a forked process holds of a real one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.support import zygote

ROOT = zygote.ROOT

#: What a ``python -c`` process sees of itself (and whether the libraries were imported before it
#: started), a line on stderr, and an uncaught exception (its traceback, exit status 1).
CODE = """
import os, sys
print(__name__, sys.argv, repr(sys.path[0]), os.getcwd(), os.environ["ZYGOTE_PROBE"])
print("preloaded" if "pydantic_ai" in sys.modules else "fresh")
print("to stderr", file=sys.stderr)
if sys.argv[1:] == ["fail"]:
    raise LookupError("raised by the probe")
"""


def _both(*args: str) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    command = [sys.executable, "-c", CODE, *args]
    env = {**os.environ, "ZYGOTE_PROBE": "from the environment"}
    real = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    forked = zygote.zygote.run(command, env=env, cwd=ROOT)
    return real, forked


def test_python_dash_c_runs_as_python_would_run_it() -> None:
    real, forked = _both("an argument")
    assert forked.returncode == real.returncode == 0
    (seen, fresh), (seen_forked, preloaded) = real.stdout.splitlines(), forked.stdout.splitlines()
    assert seen_forked == seen
    assert seen.startswith("__main__ ['-c', 'an argument'] '' ")
    # Forked from the zygote (its imports already made), not started afresh.
    assert (fresh, preloaded) == ("fresh", "preloaded")
    assert forked.stderr == real.stderr == "to stderr\n"


def test_an_uncaught_exception_ends_it_as_python_would() -> None:
    real, forked = _both("fail")
    assert forked.returncode == real.returncode == 1
    assert (
        forked.stderr.splitlines()[-1] == real.stderr.splitlines()[-1] == "LookupError: raised by the probe"
    )
    assert "Traceback (most recent call last):" in forked.stderr


def test_a_launched_process_is_forked_and_ends_as_python_would() -> None:
    """``Zygote.launcher``: the command a library that starts its own processes runs (the MCP SDK)."""
    env = {**os.environ, "ZYGOTE_PROBE": "from the environment"}
    launched = subprocess.run(
        zygote.zygote.launcher([sys.executable, "-c", CODE, "fail"]),
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    seen, preloaded = launched.stdout.splitlines()
    assert seen.startswith("__main__ ['-c', 'fail'] '' ")
    assert preloaded == "preloaded"
    assert launched.stderr.splitlines()[-1] == "LookupError: raised by the probe"
    assert launched.returncode == 1


def test_a_signal_to_the_launcher_reaches_the_forked_process() -> None:
    waits = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
print("waiting", flush=True)
time.sleep(60)
"""
    launcher = zygote.zygote.launcher([sys.executable, "-c", waits])
    with subprocess.Popen(launcher, cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None and process.stdout.readline() == "waiting\n"
        process.terminate()
        # The forked process ended as its handler said (the launcher itself would have died of SIGTERM).
        assert process.wait(timeout=30) == 3


def test_a_launched_process_killed_by_a_signal_ends_its_launcher_the_same_way() -> None:
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    launched = subprocess.run(
        zygote.zygote.launcher([sys.executable, "-c", killed]), cwd=ROOT, capture_output=True, timeout=60
    )
    assert launched.returncode == -signal.SIGKILL, launched.stderr
