"""Complexity attacks on JSON Schema validation: a schema and arguments that someone other than an
admin supplies (an external agent brings both to ``/api/v1/approval-requests``; a reviewer's edits are
checked against the agent's schema) must never keep a worker busy for long nor fill its memory.

Each request here is small (well under 64 KB) and answered within seconds; on a validator that
backtracks on regular expressions, compares every pair of items or follows every branch of a schema
whose ``$ref``s fan out, the same request runs for seconds to hours.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.api.conftest import mastra, reviewer, reviewer_token, token_for  # noqa: F401 - fixtures
from tests.api.test_approval_requests import (  # noqa: F401 - fixtures
    REQUESTS,
    approve_path,
    body,
    payer,
    payer_token,
)
from tests.support.api import Api

pytestmark = pytest.mark.timeout(180)

#: The CPU a request may take here (generous): the attacks below take ten times this and more on an
#: unbounded validator.
SECONDS = 5.0


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


async def _timed(api: Api, path: str, sent: dict[str, Any]) -> tuple[Any, float]:
    """The answer, and the CPU seconds this process spent on it (the server runs in it, its request
    on a thread): a machine loaded by other processes stretches the wall clock, not the work."""
    warm = await api.post(REQUESTS, body())  # the first request's own costs are not the attack's
    assert warm.status_code == 201, warm.content
    started = time.process_time()
    response = await api.post(path, sent)
    return response, time.process_time() - started


def _issues(response: Any) -> list[dict[str, Any]]:
    issues: list[dict[str, Any]] = json.loads(response.content).get("issues") or []
    return issues


async def test_a_backtracking_pattern_in_an_agents_schema_does_not_freeze_the_server(
    payer: Api,  # noqa: F811 (the fixture)
) -> None:
    # Python's re takes 2^n steps for ^(a+)+$ on n a's and a mismatch (30: ~1 min; 40: a day).
    sent = body(
        args={"code": "a" * 30 + "!"}, argsSchema=_object(code={"type": "string", "pattern": "^(a+)+$"})
    )
    response, seconds = await _timed(payer, REQUESTS, sent)
    assert response.status_code == 422, response.content
    assert [i["field"] for i in _issues(response)] == ["args.code"]
    assert seconds < SECONDS, f"validating one 31-character string took {seconds:.1f} s of CPU"


async def test_a_backtracking_pattern_property_does_not_freeze_the_server(
    payer: Api,  # noqa: F811 (the fixture)
) -> None:
    schema = {
        "type": "object",
        "patternProperties": {"^(a+)+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    response, seconds = await _timed(payer, REQUESTS, body(args={"a" * 30 + "!": 1}, argsSchema=schema))
    assert response.status_code == 422, response.content
    assert seconds < SECONDS, f"matching one 31-character key took {seconds:.1f} s of CPU"


async def test_a_reviewers_edit_cannot_freeze_the_server_through_the_agents_pattern(
    payer: Api,  # noqa: F811 (the fixture)
    reviewer_token: str,  # noqa: F811
) -> None:
    schema = _object(code={"type": "string", "pattern": "^(a+)+$"})
    asked = await payer.post(REQUESTS, body(args={"code": "aaa"}, argsSchema=schema))
    assert asked.status_code == 201, asked.content
    run_id = json.loads(asked.content)["id"]
    edit = {"editedArgs": {"code": "a" * 30 + "!"}}
    response, seconds = await _timed(Api(reviewer_token), approve_path(run_id), edit)
    assert response.status_code == 400, response.content
    assert seconds < SECONDS, f"checking one edited 31-character string took {seconds:.1f} s of CPU"


def _fanning_out(levels: int) -> dict[str, Any]:
    """Each definition refers twice to the next: 2^levels checks of one value, in ~70 bytes a level."""
    defs: dict[str, Any] = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "integer"}
    return {**_object(n={"$ref": "#/$defs/d0"}), "$defs": defs}


async def test_a_schema_whose_refs_fan_out_is_refused_not_followed_down_every_branch(
    payer: Api,  # noqa: F811 (the fixture)
) -> None:
    # 20 levels: 2^20 checks, ~1 min; the same 1.5 KB schema with 30 levels would take a day.
    response, seconds = await _timed(payer, REQUESTS, body(args={"n": 1}, argsSchema=_fanning_out(20)))
    assert response.status_code == 422, response.content
    assert "steps" in json.loads(response.content)["error"], response.content
    assert seconds < SECONDS, f"a 1.5 KB schema over one number took {seconds:.1f} s of CPU"


async def test_a_big_schema_over_big_arguments_is_refused_within_a_budget(
    payer: Api,  # noqa: F811 (the fixture)
) -> None:
    # 800 subschemas applied to each of 6,000 items: 4.8 million checks (~40 s) from 29 KB.
    schema = _object(xs={"type": "array", "items": {"allOf": [{"type": "integer"}] * 800}})
    response, seconds = await _timed(payer, REQUESTS, body(args={"xs": [0] * 6000}, argsSchema=schema))
    assert response.status_code == 422, response.content
    assert "steps" in json.loads(response.content)["error"], response.content
    assert seconds < SECONDS, f"29 KB of schema and data took {seconds:.1f} s of CPU"


async def test_unique_items_over_an_array_of_objects_is_not_quadratic(
    payer: Api,  # noqa: F811 (the fixture)
) -> None:
    # 4,000 distinct objects (51 KB): jsonschema compares each pair, 8 million comparisons (~20 s).
    schema = _object(rows={"type": "array", "uniqueItems": True})
    sent = body(args={"rows": [{"a": i} for i in range(4000)]}, argsSchema=schema)
    response, seconds = await _timed(payer, REQUESTS, sent)
    assert response.status_code == 201, response.content
    assert seconds < SECONDS, f"checking 4,000 items are unique took {seconds:.1f} s of CPU"


async def test_an_enum_over_many_items_is_answered_fast_with_a_bounded_list_of_problems(
    payer: Api,  # noqa: F811 (the fixture)
) -> None:
    # 5,000 allowed values (35 KB) against 5,000 items (10 KB): 25 million comparisons (~40 s), and one
    # error per item that repeats the whole enum (a 350 MB answer, all of it held in memory).
    allowed = list(range(10_000, 15_000))
    schema = _object(codes={"type": "array", "items": {"enum": allowed}})
    response, seconds = await _timed(payer, REQUESTS, body(args={"codes": [0] * 5000}, argsSchema=schema))
    assert response.status_code == 422, response.content
    assert len(response.content) < 64 * 1024, f"the answer is {len(response.content):,} bytes"
    assert 1 <= len(_issues(response)) <= 10
    assert seconds < SECONDS, f"checking 5,000 items against an enum took {seconds:.1f} s of CPU"
