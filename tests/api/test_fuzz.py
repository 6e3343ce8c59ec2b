"""schemathesis against the API of a running server, from its own OpenAPI document (slow: many
requests).

Countersign runs under Daphne (the ASGI app, as in production: Mastra's routes stream), on a
database of its own with a run waiting on each kind of call. Every operation, the native ones and
Mastra's, gets generated paths, queries and bodies, valid and not, half of them aimed at a real
agent: no answer is a 5xx, every answer matches the document (status, content type, body schema,
headers), what the document calls valid is not refused as malformed, and a refused decision leaves
the waiting runs and the audit log as they were.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core import NotSet
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests import templates
from tests.e2e.conftest import ROOT, _start_daphne, _stop

pytestmark = pytest.mark.slow

_SETUP = """
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from approvals import agents
from approvals.services.tokens import create_token
user = get_user_model().objects.create_user("fuzz", password=None)
user.groups.add(Group.objects.get(name="Reviewers"), Group.objects.get(name="Admins"))
waiting = async_to_sync(agents.get("approver").generate)("Please delete /tmp/a.txt")
async_to_sync(agents.get("asker").generate)("Pick a colour for bike")
print(waiting.run_id, create_token(user, name="fuzz").plaintext)
"""

#: JSON Schema cannot say these (rules across parameters): schema-valid yet refused, deliberately.
ACROSS_PARAMETERS = {
    "/api/v1/audit",  # "to" before "from", as on the dashboard's form
    "/api/agents/{agentId}/suspended-runs",  # perPage without page; fromDate after toDate
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """The server's address, the run it has waiting for approval, and an admin reviewer's token."""
    tmp = tmp_path_factory.mktemp("api-fuzz")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": f"sqlite:///{tmp / 'fuzz.sqlite3'}",
        "AGENTS_RUNTIME": "tests.api.mastra_agents:runtime",
        "REDIS_URL": "",
        "TASKS_BACKEND": "immediate",
        "API_DECISION_RATE_LIMIT": "0",
        "DEBUG": "true",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONPATH": str(ROOT),
    }
    # `manage.py migrate` (a copy of what it made once: tests/templates.py), then the set-up's shell.
    templates.migrated(env["DATABASE_URL"], env)
    made = templates.run(env, "shell", "--command", _SETUP, timeout=120)
    run_id, token = made.strip().splitlines()[-1].split()
    process, port = _start_daphne(env, tmp / "daphne.log")
    try:
        yield f"http://127.0.0.1:{port}", run_id, token
    finally:
        _stop(process)


def storable(case: Any) -> bool:
    """No text a database refuses (NUL, unpaired surrogates): the runtime refuses it in decisions,
    which the document does not spell out."""

    def text_ok(value: Any) -> bool:
        if isinstance(value, str):
            return "\x00" not in value and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
        if isinstance(value, dict):
            return all(text_ok(k) and text_ok(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return all(text_ok(v) for v in value)
        return True

    parts = (case.body, case.query, case.path_parameters)
    return all(text_ok(part) for part in parts if not isinstance(part, NotSet))


def test_the_api_keeps_to_its_document(served: tuple[str, str, str], tmp_path: Path) -> None:
    base, waiting_run, token = served
    auth = {"Authorization": f"Bearer {token}"}
    schema = schemathesis.openapi.from_url(f"{base}/api/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 11
    # Starting runs is what the stream route does: it goes last, so the others see the seeded runs.
    operations.sort(key=lambda op: op.path.endswith("/stream"))

    def unchanged() -> None:
        # Generated run and call ids never name a real waiting call: every decision was refused,
        # and a refused one leaves no trace.
        audit = requests.get(f"{base}/api/v1/audit", headers=auth, timeout=30).json()
        assert audit["total"] == 0, audit
        listed = requests.get(
            f"{base}/api/agents/approver/suspended-runs?order=oldest&perPage=1&page=0",
            headers=auth,
            timeout=30,
        ).json()
        assert listed["runs"][0]["runId"] == waiting_run

    for operation in operations:
        checks_valid_data = operation.path not in ACROSS_PARAMETERS

        @given(case=operation.as_strategy(), real_agent=st.booleans())
        @settings(
            max_examples=int(os.environ.get("FUZZ_EXAMPLES", "40")),
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def fuzz(case: Any, real_agent: bool) -> None:
            if real_agent and "agentId" in (case.path_parameters or {}):
                # Half the requests reach an agent, so bodies and queries get checked, not only
                # the unknown agent's 404.
                case.path_parameters["agentId"] = "approver"
            response = case.call_and_validate(
                base_url=base,
                headers=auth,
                # (Checked below, on what a database can store.)
                excluded_checks=[positive_data_acceptance],
            )
            if checks_valid_data and case.meta.generation.mode.is_positive and storable(case):  # noqa: B023
                # What the document calls valid is never refused as malformed.
                assert response.status_code != 400, (case.path, case.body, response.text[:500])
            unchanged()

        fuzz()
