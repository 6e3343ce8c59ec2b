"""The real client: ``@mastra/client-js`` 1.47.0 against Countersign under Daphne, compared with Mastra.

``tests/api/mastra/record.mjs`` (the seed system's recording script) drives the official client
through the 53 scenarios of ``golden.json`` (recorded against Mastra 1.71's own server), here against
Countersign serving the same agents (``tests/support/mastra_agents.py``). Both recordings are normalised
(ids, times, what a scripted model words differently) and compared exchange by exchange: every
difference that remains must be one listed in ``DELIBERATE`` below, and every listed one must occur.

``tests/api/mastra/typed.ts`` is application code as a TypeScript app writes it: TypeScript checks
it against the client's own types, then it runs against a server of its own and calls every route
(``listAgents``, ``details``, ``stream`` with a ``runId``, the decisions, ``generate`` and the
``*-generate`` decisions), reading the ``finish`` fields Mastra's types declare.

``make test`` installs the client (and TypeScript) first (``npm ci`` in tests/api/mastra, the
``api-client`` target); without Node or the installed client the test is skipped, loudly (a failure
in CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, _start_daphne, _stop
from tests.support import templates
from tests.support.golden_compare import differences, normalise
from tests.support.server import TEST_SETTINGS

# The module's tests share its server: one worker runs them all, so it is started once, not once per
# worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_mastra_client"), pytest.mark.own_sqlite]

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


def _schema_of_suspend(entry: dict[str, Any]) -> bool:
    schema = json.loads(entry["events"][3]["payload"]["resumeSchema"])
    return schema["properties"]["color"]["type"] == "string" and schema["required"] == ["color"]


def _refusal(status: int, code: str) -> Any:
    def check(entry: dict[str, Any]) -> bool:
        return bool(
            entry["status"] == status and entry["body"]["code"] == code and entry["exchangeCount"] == 1
        )

    return check


def _finish(entry: dict[str, Any]) -> dict[str, Any]:
    [finish] = [e["payload"] for e in entry["events"] if isinstance(e, dict) and e["type"] == "finish"]
    payload: dict[str, Any] = finish
    return payload


def _thread_filter_filters(entry: dict[str, Any]) -> bool:
    return bool(entry["status"] == 200 and entry["body"] == {"runs": [], "total": 0})


#: Every difference from Mastra's wire format that remains, by scenario: why, and what we answer.
DELIBERATE: dict[str, tuple[str, Any]] = {
    **{
        name: (
            "resumeSchema of a suspend() call is the tool's own JSON Schema (pydantic's, with titles and "
            "without additionalProperties: false), not zod's",
            _schema_of_suspend,
        )
        for name in ("start_E", "start_F", "start_H")
    },
    **{
        name: (
            "No thread-ownership 403: a token acts as its user, who sees every run of the agents they may "
            "see; threadId / resourceId only filter (Countersign has no memory store that owns threads)",
            _thread_filter_filters,
        )
        for name in ("list_threadId_resourceId_mismatch", "list_threadId_unknown", "list_nomem_threadId")
    },
    "approve_again_after_completion": (
        "409 already_decided naming who decided and when, instead of Mastra's 500 (retried 4 times)",
        lambda e: (
            _refusal(409, "already_decided")(e)
            and e["body"]["decidedBy"] == "client"
            and e["body"]["decidedAt"] == "<iso>"
        ),
    ),
    "approve_wrong_toolCallId": (
        "404 tool_call_not_found instead of 500 (retried 4 times)",
        _refusal(404, "tool_call_not_found"),
    ),
    **{
        name: ("404 run_not_found instead of 500 (retried 4 times)", _refusal(404, "run_not_found"))
        for name in ("approve_unknown_runId", "decline_unknown_runId", "resume_unknown_runId")
    },
    "resume_invalid_resumeData": (
        "400 invalid_decision with field issues: the tool never runs with resume data that breaks its "
        "schema, and the run keeps waiting (Mastra runs it and streams a validation error as the result)",
        lambda e: (
            _refusal(400, "invalid_decision")(e) and e["body"]["issues"][0]["field"] == "resumeData.color"
        ),
    ),
    "approve_ok_no_memory_run": (
        "No uiMessages for a run without a thread: Countersign's agents have no memory setting, a run's "
        "memory is its thread (Mastra sends them for every run of an agent with memory configured)",
        lambda e: "uiMessages" not in _finish(e)["response"] and _finish(e)["messages"]["user"],
    ),
    "resume_approval_run_with_approved_true": (
        "finish carries response (optional in Mastra's FinishPayload) for every run: Mastra leaves it out "
        "for an agent without memory, and Countersign's agents have no memory setting",
        lambda e: "uiMessages" not in _finish(e)["response"] and _finish(e)["response"]["messages"],
    ),
    "list_asker_after": (
        "Run H still waits for a valid answer (see resume_invalid_resumeData)",
        lambda e: (
            e["body"]["total"] == 1 and e["body"]["runs"][0]["toolCalls"][0]["toolCallId"] == "asker-call_3"
        ),
    ),
}

#: Differences allowed in every scenario: error bodies carry a ``code`` (ours) besides ``error``.
EVERYWHERE = {".body.code"}


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


def _serve(tmp: Path) -> Iterator[tuple[int, str, Path]]:
    """Countersign under Daphne serving the recording's agents, and a reviewer's API token."""
    log = tmp / "daphne.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": TEST_SETTINGS,
        "DATABASE_URL": f"sqlite:///{tmp / 'api.sqlite3'}",
        "AGENTS_RUNTIME": "tests.support.mastra_agents:runtime",
        "REDIS_URL": "",
        "TASKS_BACKEND": "immediate",
        "DEBUG": "true",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    }
    # `manage.py migrate` (a copy of what it made once: tests/support/templates.py), then the set-up's shell.
    templates.migrated(env["DATABASE_URL"], env)
    token = templates.run(env, "shell", "--command", _SETUP, timeout=120).strip().splitlines()[-1]
    process, port = _start_daphne(env, log)
    try:
        yield port, token, tmp
    finally:
        _stop(process)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, ARTIFACTS / f"{tmp.name}-daphne.log")


@pytest.fixture(scope="module")
def countersign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, Path]]:
    yield from _serve(tmp_path_factory.mktemp("api-client"))


@pytest.fixture(scope="module")
def fresh_countersign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, Path]]:
    """A server of its own: the recording's scenarios count on the agents' first call ids."""
    yield from _serve(tmp_path_factory.mktemp("typed-client"))


def record(node: str, port: int, token: str, out: Path) -> list[dict[str, Any]]:
    env = {
        **os.environ,
        "TARGET_PORT": str(port),
        "OUT": str(out),
        "API_TOKEN": token,
        "STEP_TIMEOUT_MS": "20000",
    }
    done = subprocess.run(
        [node, "record.mjs"], cwd=HERE, env=env, capture_output=True, text=True, timeout=600
    )
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
    # What the client handed its caller is exactly what was on the wire, for every stream.
    assert all(e["clientView"].get("chunksEqualWireData", True) for e in ours)

    found = differences(golden, ours)
    left = {
        name: [d for d in diffs if not (d[0] in EVERYWHERE and d[1] == "<absent>")]
        for name, diffs in found.items()
    }
    left = {name: diffs for name, diffs in left.items() if diffs}
    unexpected = {name: diffs[:5] for name, diffs in left.items() if name not in DELIBERATE}
    assert not unexpected, json.dumps(unexpected, indent=1, default=str)[:6000]
    assert set(left) == set(DELIBERATE), f"listed but no longer different: {set(DELIBERATE) - set(left)}"
    mine = {e["name"]: normalise(e) for e in ours}
    wrong = [name for name, (_, check) in DELIBERATE.items() if not check(mine[name])]
    assert not wrong, {name: mine[name] for name in wrong}


def _typescript() -> Path:
    tsc = HERE / "node_modules" / "typescript" / "bin" / "tsc"
    if not tsc.is_file():
        problem = "TypeScript is not installed: run `make api-client` (npm ci in tests/api/mastra)"
        if os.environ.get("COUNTERSIGN_REQUIRE_SERVICES"):
            pytest.fail(problem)
        pytest.skip(f"SKIPPED LOUDLY: {problem}")
    return tsc


def test_typed_client_code_calls_every_route_and_reads_the_finish_fields(
    fresh_countersign: tuple[int, str, Path],
) -> None:
    """``typed.ts``: TypeScript checks it against the client's own types, then it runs against us."""
    node, tsc = _node(), _typescript()
    port, token, _ = fresh_countersign
    out = HERE / ".typed"
    compiled = subprocess.run(
        [node, str(tsc), "-p", "tsconfig.json", "--outDir", str(out)],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]
    env = {**os.environ, "TARGET_PORT": str(port), "API_TOKEN": token}
    ran = subprocess.run(
        [node, str(out / "typed.js")], cwd=HERE, env=env, capture_output=True, text=True, timeout=300
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "typed.log").write_text(ran.stdout + ran.stderr)
    assert ran.returncode == 0, ran.stderr[-3000:]
    got = json.loads(ran.stdout.strip().splitlines()[-1])

    assert got["agents"] == ["approver", "asker", "nomem"]
    assert got["details"] == {
        "id": "approver",
        "name": "approver",
        "modelId": "scripted-approver",
        "requireApproval": True,
    }
    assert got["parked"]["runId"] == "typed-run-1"
    assert (got["clash"], got["invalid"]) == (400, 400)
    for name in ("approved", "declined", "resumed"):
        finish = got[name]
        assert finish["totalTokens"] == finish["inputTokens"] + finish["outputTokens"], name
        # The run's total: the parked response's step and the answer's.
        assert finish["totalTokens"] > finish["stepTokens"] > 0, name
        assert finish["modelId"] == f"scripted-{_agent_of(name)}", name
        assert finish["messages"] == 4 and finish["nonUser"] == 3, name
        assert "MODEL_SAW_TOOL_RESULTS" in finish["text"], name
    assert got["approved"]["runId"] == "typed-run-1"
    # uiMessages for the runs on a thread (the tool's turn, the answer's).
    assert (got["approved"]["uiMessages"], got["declined"]["uiMessages"], got["resumed"]["uiMessages"]) == (
        2,
        None,
        2,
    )
    assert "Keep it" in got["declined"]["text"]
    generated = got["generated"]
    assert generated["finishReason"] == "suspended" and generated["runId"] == "typed-run-2"
    assert generated["toolName"] == "deleteFile" and generated["totalTokens"] > 0
    approved = got["afterApproval"]
    assert approved["finishReason"] == "stop" and "MODEL_SAW_TOOL_RESULTS" in approved["text"]
    assert approved["allTokens"] > approved["totalTokens"] > 0
    assert approved["modelId"] == "scripted-approver"
    assert got["afterDecline"]["finishReason"] == "stop" and "Not today" in got["afterDecline"]["text"]


def _agent_of(name: str) -> str:
    return {"approved": "approver", "declined": "nomem", "resumed": "asker"}[name]
