"""schemathesis against the API of a running server, from its own OpenAPI document (slow: many
requests).

Countersign runs under Daphne (the ASGI app, as in production: Mastra's routes stream), on a
database of its own (PostgreSQL when the suite runs on it: it refuses what SQLite takes, NUL in
text, offsets past 15:59) with a run waiting on each kind of call. Every operation, the native ones
and Mastra's, gets generated paths, queries and bodies, valid and not, half of them aimed at a real
agent, and half of those with one value made hostile (NUL, lone surrogates, ids past the store's
length, numbers of thousands of digits, dates at the ends of time with the largest offsets, deep
nesting): no answer is a 5xx or takes more than ``ANSWER_WITHIN`` seconds, every refusal is JSON,
every answer matches the document (status, content type, body schema, headers), what the document
calls valid is not refused as malformed, and a refused decision leaves the waiting runs and the
audit log as they were. Raw bodies no generator makes (JSON nested past any parser's recursion,
invalid UTF-8, 5,000-digit numbers) and paths under ``/api/`` that are no route get the same checks.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core import NotSet
from schemathesis.specs.openapi.checks import ignored_auth, negative_data_rejection, positive_data_acceptance

from agents_runtime import untrusted
from tests.e2e.conftest import ROOT, _start_daphne, _stop
from tests.support import templates
from tests.support.server import TEST_SETTINGS

# The module's tests share its server: one worker runs them all, so it is started once, not once per
# worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_fuzz")]

_SETUP = """
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from approvals import agents
from approvals.services.tokens import create_token
from approvals.services import requests
user = get_user_model().objects.create_user("fuzz", password=None)
user.groups.add(Group.objects.get(name="Reviewers"), Group.objects.get(name="Admins"))
waiting = async_to_sync(agents.get("approver").generate)("Please delete /tmp/a.txt")
async_to_sync(agents.get("asker").generate)("Pick a colour for bike")
requests.register("payer", name="Payments (elsewhere)")
asked = requests.Asked(agent_id="payer", tool_name="pay", args={"to": "ann"})
request, _ = async_to_sync(requests.create)(asked, started_by="fuzz", idempotency_key=None)
# Decided (withdrawn): a read of it that waits answers at once.
async_to_sync(requests.cancel)(request, actor="fuzz", reason="seeded")
print(waiting.run_id, create_token(user, name="fuzz").plaintext, request.run_id)
"""

#: JSON Schema cannot say these (rules across parameters): schema-valid yet refused, deliberately.
ACROSS_PARAMETERS = {
    "/api/v1/audit",  # "to" before "from", as on the dashboard's form
    "/api/agents/{agentId}/suspended-runs",  # perPage without page; fromDate after toDate
    "/api/ag-ui/agents/{agentId}",  # the last message is the user's (JSON Schema has no "last item")
}


#: A hang is a failure: no answer (a stream included, to its end) takes longer.
ANSWER_WITHIN = 30

#: Values a hostile client puts where an id, a filter, a number or a date goes.
HOSTILE: list[Any] = [
    "a\x00b",
    "\x00",
    "\ud800",
    "x\udfffy",
    "i" * 256,
    "1" + "0" * 5000,
    "-1" + "0" * 5000,
    "1e400",
    10**3000,
    -(10**3000),
    "0001-01-01T00:00:00+23:59",
    "9999-12-31T23:59:59-23:59",
    "9999-12-31",
    "\u202e\u200b",
]


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


#: Raw bodies: what no JSON generator sends.
RAW_BODIES = [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"runId":"r","toolCallId":"c","editedArgs":{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
    b'{"resumeData":' + b"{" * 50_000 + b"}" * 50_000 + b"}",
    b'{"runId":"r","toolCallId":"c","editedArgs":{"a":1' + b"0" * 5000 + b"}}",
    b'{"editedArgs":{"a":-1' + b"0" * 4000 + b"}}",
    b'{"runId":"\\ud800","toolCallId":"\\udfff","reason":"\\ud800"}',
    b'{"messages":"hi","memory":{"thread":"a\\u0000b","resource":"\\ud800"}}',
    b'{"runId":"\xff\xfe","toolCallId":"c"}',
    b'{"reason":"' + b"x" * 900_000 + b'"}',
]


def _database_url(tmp: Path) -> str:
    """A new database for the server: on PostgreSQL when the suite runs on it, else a SQLite file."""
    url = os.environ.get("DATABASE_URL", "")
    if urlsplit(url).scheme in {"postgres", "postgresql", "pgsql"}:
        return urlunsplit(urlsplit(url)._replace(path=f"/countersign_fuzz_{uuid.uuid4().hex[:12]}"))
    return f"sqlite:///{tmp / 'fuzz.sqlite3'}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str, str]]:
    """The server's address, the run it has waiting for approval, an admin reviewer's token, and an
    approval request of the external agent ``payer``."""
    tmp = tmp_path_factory.mktemp("api-fuzz")
    database_url = _database_url(tmp)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": TEST_SETTINGS,
        "DATABASE_URL": database_url,
        "AGENTS_RUNTIME": "tests.support.mastra_agents:runtime",
        "REDIS_URL": "",
        "TASKS_BACKEND": "immediate",
        "API_DECISION_RATE_LIMIT": "0",
        "DEBUG": "true",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONPATH": str(ROOT),
    }
    # `manage.py migrate` (a copy of what it made once: tests/support/templates.py), then the set-up's shell.
    templates.migrated(env["DATABASE_URL"], env)
    made = templates.run(env, "shell", "--command", _SETUP, timeout=120)
    run_id, token, request_id = made.strip().splitlines()[-1].split()
    process, port = _start_daphne(env, tmp / "daphne.log")
    try:
        yield f"http://127.0.0.1:{port}", run_id, token, request_id
    finally:
        _stop(process)
        if not database_url.startswith("sqlite"):
            name = urlsplit(database_url).path.lstrip("/")
            templates._admin(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def storable(case: Any) -> bool:
    """Data the runtime takes in a decision (``agents_runtime.untrusted.problems``: no NUL, no lone
    surrogates, integers of at most 100 digits, nesting at most 32 deep), which the document does
    not spell out."""
    parts = (case.body, case.query, case.path_parameters)
    return all(not untrusted.problems(part) for part in parts if not isinstance(part, NotSet))


def _make_hostile(case: Any, value: Any, pick: int) -> None:
    """Put ``value`` in one of the case's path parameters, query parameters or body fields.

    (A lone surrogate cannot be sent in a URL, which is UTF-8: only in a JSON body, escaped.)
    """
    places: list[dict[str, Any]] = []
    if isinstance(case.body, dict):
        places += [case.body]
    if not (isinstance(value, str) and untrusted.problems(value.replace("\x00", ""))):
        places += [part for part in (case.path_parameters, case.query) if isinstance(part, dict)]
    names = [(where, name) for where in places for name in where if name not in ("agentId", "agent")]
    if names:
        where, name = names[pick % len(names)]
        where[name] = value if where is case.body or not isinstance(value, int) else str(value)


def _json_refusal(response: Any, shown: Any) -> None:
    """A refusal is JSON naming its error (never an HTML page), within the time allowed."""
    assert response.status_code < 500, (shown, response.status_code, response.text[:500])
    if response.status_code >= 400:
        # (schemathesis's headers are lists under lower-case names; requests' are strings.)
        found = {name.lower(): value for name, value in response.headers.items()}.get("content-type")
        content_type = found[0] if isinstance(found, list) else found
        assert content_type == "application/json", (shown, response.text[:300])
        assert json.loads(response.text)["error"], shown


def test_the_api_keeps_to_its_document(served: tuple[str, str, str, str], tmp_path: Path) -> None:
    base, waiting_run, token, request_id = served
    auth = {"Authorization": f"Bearer {token}"}
    schema = schemathesis.openapi.from_url(f"{base}/api/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 21
    # Starting runs is what the stream and generate routes do: they go last, so the others see the
    # seeded runs.
    operations.sort(key=lambda op: op.path.endswith(("/stream", "/generate")))

    def unchanged() -> None:
        # Generated run and call ids never name a real waiting call: every decision was refused,
        # and a refused one leaves no trace. (Approval requests are asked and withdrawn for real.)
        audit = requests.get(f"{base}/api/v1/audit?agent=approver", headers=auth, timeout=30).json()
        assert audit["total"] == 0, audit
        listed = requests.get(
            f"{base}/api/agents/approver/suspended-runs?order=oldest&perPage=1&page=0",
            headers=auth,
            timeout=30,
        ).json()
        assert listed["runs"][0]["runId"] == waiting_run

    for operation in operations:
        checks_valid_data = operation.path not in ACROSS_PARAMETERS
        # A write is checked after each case (the case that left a trace is the one reported); a
        # read after all of its cases: what could change is kept (an audit row, a decided run), so
        # the check then still sees any trace a read left.
        writes = operation.method.upper() != "GET"

        @given(
            case=operation.as_strategy(),
            real_agent=st.booleans(),
            hostile=st.none() | st.sampled_from(HOSTILE) | st.builds(_deep, st.sampled_from([33, 500])),
            pick=st.integers(min_value=0, max_value=20),
        )
        @settings(
            max_examples=int(os.environ.get("FUZZ_EXAMPLES", "40")),
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def fuzz(case: Any, real_agent: bool, hostile: Any, pick: int) -> None:
            made_hostile = False
            if real_agent:
                # Half the requests reach an agent, so bodies and queries get checked, not only
                # the unknown agent's 404; half of those carry a hostile value somewhere.
                if "agentId" in (case.path_parameters or {}):
                    case.path_parameters["agentId"] = "approver"
                if "requestId" in (case.path_parameters or {}):
                    case.path_parameters["requestId"] = request_id
                if isinstance(case.body, dict) and "agent" in case.body:
                    case.body["agent"] = "payer"
                if hostile is not None:
                    _make_hostile(case, hostile, pick)
                    made_hostile = True
            response = case.call_and_validate(
                base_url=base,
                headers=auth,
                # (Checked below, on what a database can store. A case made hostile is no longer what
                # schemathesis generated it as, valid or not: only the checks of any answer apply.)
                excluded_checks=[positive_data_acceptance]
                # (ignored_auth re-validates a changed case against the body's schema, whose
                # patterns schemathesis matches on UTF-8: a lone surrogate fails the check itself.
                # Cases as generated still probe that every route refuses a request without a token.)
                + ([negative_data_rejection, ignored_auth] if made_hostile else []),
                timeout=ANSWER_WITHIN,
            )
            _json_refusal(response, (case.path, case.path_parameters, case.query, str(case.body)[:200]))
            positive = case.meta.generation.mode.is_positive and not made_hostile
            if checks_valid_data and positive and storable(case):  # noqa: B023
                # What the document calls valid is never refused as malformed.
                # (A runId the document allows may name a run an earlier case chose: that is state.)
                in_use = response.status_code == 400 and response.json().get("code") == "run_id_in_use"
                assert response.status_code != 400 or in_use, (case.path, case.body, response.text[:500])
            if writes:  # noqa: B023
                unchanged()

        fuzz()
        unchanged()


def test_raw_junk_and_unknown_paths_get_json_refusals(served: tuple[str, str, str, str]) -> None:
    base, waiting_run, token, request_id = served
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    posts = [
        "/api/agents/approver/approve-tool-call",
        "/api/agents/approver/decline-tool-call",
        "/api/agents/approver/resume-stream",
        "/api/agents/approver/stream",
        f"/api/v1/agents/approver/runs/{waiting_run}/calls/c/approve",
        f"/api/v1/agents/approver/runs/{waiting_run}/calls/c/decline",
        f"/api/v1/agents/approver/runs/{waiting_run}/calls/c/resume",
        "/api/v1/approval-requests",
        f"/api/v1/approval-requests/{request_id}/cancel",
        f"/api/v1/approval-requests/{request_id}/result",
    ]
    for path in posts:
        for body in RAW_BODIES:
            response = requests.post(f"{base}{path}", data=body, headers=auth, timeout=ANSWER_WITHIN)
            _json_refusal(response, (path, body[:80]))
            assert response.status_code >= 400, (path, body[:80], response.text[:300])

    @given(tail=st.text(st.characters(codec="utf-8"), max_size=40), method=st.sampled_from(["GET", "POST"]))
    @settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "40")), deadline=None, database=None)
    def no_route(tail: str, method: str) -> None:
        path = "/api/nothing/" + quote(tail, safe="/")
        response = requests.request(method, f"{base}{path}", headers=auth, timeout=ANSWER_WITHIN)
        _json_refusal(response, path)
        assert response.status_code == 404, path

    no_route()
    audit = requests.get(f"{base}/api/v1/audit?agent=approver", headers=auth, timeout=30).json()
    assert audit["total"] == 0, audit
