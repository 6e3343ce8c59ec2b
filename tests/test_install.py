"""The two installs: `make run` only what the app needs, `make test` the development tools too.

The locks are checked as files (the app's is the development one's subset, at the same versions and
hashes, without the tools); the Makefile with dry runs (``make -n``) in a copy of the project, since a
real install takes minutes; and the app is run with the development packages made unimportable.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN_LOCK = ROOT / "requirements.lock"
DEV_LOCK = ROOT / "requirements-dev.lock"
TOOLS = ["pytest", "pytest-django", "ruff", "mypy", "playwright", "hypothesis", "uv", "import-linter"]


def _pins(lock: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (version, hashes) of every requirement in a uv-compiled lock."""
    pins = {}
    for block in re.split(r"\n(?=[a-z0-9])", lock.read_text()):
        match = re.match(r"([a-z0-9._-]+)==(\S+)", block)
        if match:
            hashes = frozenset(re.findall(r"--hash=(sha256:[0-9a-f]{64})", block))
            pins[match.group(1)] = (match.group(2), hashes)
    return pins


def _normal(requirement: str) -> str:
    return re.split(r"[\[=<>!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_app_lock_is_the_dev_lock_minus_the_tools() -> None:
    run, dev = _pins(RUN_LOCK), _pins(DEV_LOCK)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert run and all(hashes for _, hashes in run.values()), "every requirement hash-pinned"
    assert all(hashes for _, hashes in dev.values())
    assert {name: dev.get(name) for name in run} == run, "same versions and hashes in both locks"
    assert {_normal(r) for r in project["project"]["dependencies"]} <= set(run)
    assert {_normal(r) for r in project["dependency-groups"]["dev"]} <= set(dev)
    assert [tool for tool in TOOLS if tool in run] == []


# -- the Makefile, dry ----------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """What the install targets read: the Makefile, the locks and scripts/, without a .venv."""
    for name in ("Makefile", "requirements.lock", "requirements-dev.lock"):
        shutil.copy2(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    client = tmp_path / "tests" / "api" / "mastra"
    client.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy2(ROOT / "tests" / "api" / "mastra" / name, client / name)
    return tmp_path


def _dry(project: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k not in {"DEBUG", "HOST"}}
    done = subprocess.run(
        ["make", "-n", *args], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _venv(project: Path, *stamps: str) -> None:
    """A .venv whose Python works and whose stamps are newer than the locks."""
    bin_dir = project / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    newer = (project / "requirements-dev.lock").stat().st_mtime + 10
    for stamp in stamps:
        (project / ".venv" / stamp).touch()
        os.utime(project / ".venv" / stamp, (newer, newer))


INSTALL_RUN = "pip install --quiet --require-hashes -r requirements.lock"
INSTALL_DEV = "pip install --quiet --require-hashes -r requirements-dev.lock"


def test_make_run_installs_only_the_app_lock(project: Path) -> None:
    dry = _dry(project, "run")
    assert INSTALL_RUN in dry
    assert "requirements-dev.lock" not in dry


def test_make_test_installs_the_dev_lock(project: Path) -> None:
    for target in ("test", "test-fast", "lint"):
        assert INSTALL_DEV in _dry(project, target), target


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_make_test_installs_the_locked_mastra_client(project: Path) -> None:
    assert "npm ci" in _dry(project, "test")
    assert "npm" not in _dry(project, "run")


def test_a_run_only_venv_gains_the_tools_at_the_first_make_test(project: Path) -> None:
    _venv(project, ".installed-run")
    assert "pip install" not in _dry(project, "run")
    assert INSTALL_DEV in _dry(project, "test")


def test_a_dev_venv_is_complete_for_make_run(project: Path) -> None:
    _venv(project, ".installed-run", ".installed-dev")
    assert "pip install" not in _dry(project, "run")
    assert "pip install" not in _dry(project, "test")
    # A new app lock reaches both (the dev stamp depends on it too).
    later = (project / ".venv" / ".installed-dev").stat().st_mtime + 10
    os.utime(project / "requirements.lock", (later, later))
    assert INSTALL_RUN in _dry(project, "run")
    assert INSTALL_DEV in _dry(project, "test")


# -- the app without the development packages ------------------------------------------------------

_WITHOUT_TOOLS = """
import importlib.abc, importlib.metadata, os, sys

blocked_dists = set(sys.argv[1].split(","))
blocked = {
    module for module, dists in importlib.metadata.packages_distributions().items()
    if {d.lower().replace("_", "-") for d in dists} <= blocked_dists
}

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ImportError(f"{name} is a development package")
        return None

sys.meta_path.insert(0, Blocker())

import django
django.setup()
from django.core.management import call_command
from django.test import Client

import config.asgi  # noqa: F401  the server's entry point
call_command("migrate", verbosity=0)
call_command("demo_setup", verbosity=0)
client = Client()
login = {"username": "reviewer", "password": "countersign-demo"}
assert client.post("/accounts/login/", login).status_code == 302
assert client.get("/").status_code == 200
assert "pytest" in blocked and "ruff" not in sys.modules
print("ok")
"""


@pytest.mark.own_sqlite
def test_the_app_runs_without_the_development_packages(tmp_path: Path) -> None:
    dev_only = sorted(set(_pins(DEV_LOCK)) - set(_pins(RUN_LOCK)))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": "true",
        "ALLOWED_HOSTS": "testserver",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": "",
        "TASKS_BACKEND": "",
        "AGENTS_RUNTIME": "demo.agents:runtime",
    }
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TOOLS, ",".join(dev_only)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")
