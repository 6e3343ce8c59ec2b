"""The official AG-UI client (``@ag-ui/client`` 1.0.0's ``HttpAgent``) against Countersign under Daphne.

``tests/api/mastra/ag_ui.mjs`` chats with the ``concierge`` agent (``tests/support/ag_ui_agents.py``)
as its application would: a run that completes, an approval and a ``suspend()`` interrupt answered
with ``buildResumeArray``, a call the chat's user may not approve handed to a reviewer who approves
it at the desk while the chat's stream waits, and two chats answering one interrupt at once. Like
the Mastra client test, it is skipped loudly without Node or the installed client; when the suite
runs on PostgreSQL and Redis, so does the server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.api.test_mastra_client import HERE
from tests.e2e.conftest import ROOT, _start_daphne, _stop
from tests.support import templates
from tests.support.server import TEST_SETTINGS

# The module's tests share its server: one worker runs them all, so it is started once, not once per
# worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_ag_ui_client")]

ARTIFACTS = ROOT / "test-artifacts" / "ag-ui-client"

_SETUP = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from approvals.services.tokens import create_token
for name in ("rita", "victor"):
    user = get_user_model().objects.create_user(name, password=None)
    user.groups.add(Group.objects.get(name="Reviewers"))
    print(create_token(user, name="ag-ui client").plaintext)
"""


def node() -> str:
    found = shutil.which("node")
    problem = None
    if found is None:
        problem = "Node is not installed"
    elif not (HERE / "node_modules" / "@ag-ui" / "client").is_dir():
        problem = "@ag-ui/client is not installed: run `make api-client` (npm ci in tests/api/mastra)"
    if problem:
        if os.environ.get("COUNTERSIGN_REQUIRE_SERVICES"):
            pytest.fail(problem)
        pytest.skip(f"SKIPPED LOUDLY: {problem}")
    assert found is not None
    return found


def _on_postgres() -> bool:
    return urlsplit(os.environ.get("DATABASE_URL", "")).scheme in {"postgres", "postgresql", "pgsql"}


def _database_url(tmp: Path) -> str:
    if _on_postgres():
        url = urlsplit(os.environ["DATABASE_URL"])
        return urlunsplit(url._replace(path=f"/countersign_agui_client_{uuid.uuid4().hex[:12]}"))
    return f"sqlite:///{tmp / 'agui.sqlite3'}"


def serve(tmp: Path, **settings: str) -> Iterator[tuple[int, list[str]]]:
    """Countersign under Daphne serving ``concierge``; the tokens of rita and victor (reviewers)."""
    log = tmp / "daphne.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": TEST_SETTINGS,
        # On PostgreSQL and Redis when the suite runs on them (a database of its own): the stream
        # that waits for a reviewer then hears the decision through Redis.
        "DATABASE_URL": _database_url(tmp),
        "AGENTS_RUNTIME": "tests.support.ag_ui_agents:runtime",
        "REDIS_URL": os.environ.get("REDIS_URL", "") if _on_postgres() else "",
        "TASKS_BACKEND": "immediate",
        "DEBUG": "true",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        **settings,
    }
    templates.migrated(env["DATABASE_URL"], env)
    tokens = templates.run(env, "shell", "--command", _SETUP, timeout=120).strip().splitlines()[-2:]
    process, port = _start_daphne(env, log)
    try:
        yield port, tokens
    finally:
        _stop(process)
        if _on_postgres():
            name = urlsplit(env["DATABASE_URL"]).path.lstrip("/")
            templates._admin(env["DATABASE_URL"], f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, ARTIFACTS / f"{tmp.name}-daphne.log")


@pytest.fixture(scope="module")
def countersign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, list[str]]]:
    yield from serve(tmp_path_factory.mktemp("ag-ui-client"))


def drive(script: str, port: int, tokens: list[str], **env: str) -> dict[str, Any]:
    ran = subprocess.run(
        [node(), script],
        cwd=HERE,
        env={
            **os.environ,
            "TARGET_PORT": str(port),
            "API_TOKEN": tokens[0],
            "REVIEWER_TOKEN": tokens[1],
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{Path(script).stem}.log").write_text(ran.stdout + ran.stderr)
    assert ran.returncode == 0, ran.stderr[-3000:]
    got: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return got


def test_the_ag_ui_client_chats_and_hands_a_risky_call_to_the_desk(
    countersign: tuple[int, list[str]],
) -> None:
    port, tokens = countersign
    got = drive("ag_ui.mjs", port, tokens)

    completes = got["completes"]
    assert completes["outcome"] == "success" and completes["role"] == "assistant"
    assert completes["text"] == "Hello! You said: hello from node"
    assert completes["events"][0] == "RUN_STARTED" and completes["events"][-1] == "RUN_FINISHED"

    approval = got["approval"]
    interrupt = approval["interrupt"]
    assert approval["parked"] == "interrupt" and interrupt["reason"] == "tool_call"
    assert interrupt["id"] == f"int-{interrupt['toolCallId']}"
    assert interrupt["responseSchema"]["properties"]["approved"] == {"type": "boolean"}
    assert interrupt["metadata"]["countersign"]["mayDecide"] is True
    assert approval["toolCall"] == {"name": "refund", "args": {"order_id": "N1", "amount_cents": 900}}
    assert approval["outcome"] == "success" and approval["pendingAfter"] == 0
    assert approval["results"] == [{"refunded": "N1", "amount_cents": 800}]

    suspend = got["suspend"]
    assert suspend["interrupt"]["reason"] == "input_required"
    assert suspend["interrupt"]["responseSchema"]["required"] == ["colour"]
    assert suspend["outcome"] == "success" and suspend["results"] == [{"item": "fence", "colour": "blue"}]

    handed = got["handed"]
    assert handed["interrupt"]["metadata"]["countersign"]["refusal"] == "separation_of_duties"
    names = [c["name"] for c in handed["custom"]]
    assert names == ["countersign.decision_refused", "countersign.decided"]
    assert handed["custom"][1]["value"]["decidedBy"] == "victor"
    assert handed["deskStatus"] == 200
    assert handed["outcome"] == "success" and handed["results"] == [{"wired": 3000, "to": "ACME"}]

    race = got["race"]
    assert sorted(bool(r["custom"]) for r in race) == [False, True]
    [lost] = [r for r in race if r["custom"]]
    assert lost["custom"][0]["name"] == "countersign.already_decided"
    assert lost["custom"][0]["value"]["decidedBy"] == "rita"
    assert all(r["outcome"] == "success" and r["error"] is None for r in race)


def test_the_example_chat_hands_a_risky_call_to_the_desk(countersign: tuple[int, list[str]]) -> None:
    """``examples/ag_ui_chat.py``: its user may not approve the wire (separation of duties), so the
    chat waits; a reviewer approves at the desk and the chat prints how the run went on."""
    port, tokens = countersign
    env = {
        **os.environ,
        "COUNTERSIGN_URL": f"http://127.0.0.1:{port}",
        "COUNTERSIGN_TOKEN": tokens[0],
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    }
    command = [
        sys.executable,
        "-m",
        "examples.ag_ui_chat",
        "--agent",
        "concierge",
        "--answer",
        "approve",
        "wire 4200",
    ]
    chat = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    try:
        assert chat.stdout is not None
        for line in chat.stdout:
            lines.append(line.rstrip("\n"))
            # The desk's word that it follows the call: approved sooner, the run could end before
            # the chat's resume reached the desk (the chat would get its answer, not its output).
            if line.startswith("[desk] waiting"):
                break
        dashboard = next(line for line in lines if "waiting for a reviewer" in line).rsplit(" at ", 1)[-1]
        run_id = dashboard.rstrip("/").rsplit("/", 1)[-1]
        parked = _get(port, tokens[1], f"/api/v1/agents/concierge/runs/{run_id}")
        [call] = parked["toolCalls"]
        assert (
            _post(
                port, tokens[1], f"/api/v1/agents/concierge/runs/{run_id}/calls/{call['toolCallId']}/approve"
            )
            == 200
        )
        out, err = chat.communicate(timeout=60)
    finally:
        if chat.poll() is None:
            chat.kill()
    lines += out.splitlines()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "example-chat.log").write_text("\n".join(lines) + "\n" + err)
    assert chat.returncode == 0, err[-3000:]
    assert lines[0].startswith("-> wire") and '"amount_cents": 4200' in lines[0]
    assert any(line.startswith("[paused] Approve wire(") for line in lines)
    assert any("not yours to decide (separation_of_duties)" in line for line in lines)
    assert any(line.startswith("[desk] decided by victor") for line in lines)
    # (The result's keys in any order: relayed through PostgreSQL's outbox, jsonb sorts them.)
    assert {"to": "ACME", "wired": 4200} in [json.loads(line[3:]) for line in lines if line.startswith("<- ")]
    assert lines[-1].startswith("Result: ")


def _get(port: int, token: str, path: str) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def _post(port: int, token: str, path: str) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=b"{}",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        status: int = answer.status
        answer.read()
        return status
