"""Property: whatever a model says and whatever schema a tool author stored, no page answers 5xx.

Hypothesis generates argument values (NaN, infinities, huge integers, NUL, lone surrogates, deep
nesting), tool call ids, final replies and resume schemas (valid or not, set past ``tool()``'s
checks as an older version could have stored them); each example starts a run, shows the inbox,
the run page, the audit page and the CSV export, answers or approves through the page's own form,
and shows them all again. Bounded: 50 examples, no deadline.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_runtime import tool
from tests.hostile.conftest import HX, assert_no_5xx
from tests.support.hostile_runtime import Call, Hostile, RawCall, Reply, with_schema
from tests.support.markup import elements

#: Text with the characters that break storage and markup.
NASTY = st.text(
    alphabet=st.one_of(
        st.sampled_from(
            ["\x00", "\ud800", "\udfff", "/", "%", "?", "#", ":", "<", "&", '"', "\n", " ", "é", "😀"]
        ),
        st.characters(codec="utf-8"),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    ),
    max_size=40,
)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**130), max_value=10**130),
    st.sampled_from([10**400, -(10**200), math.nan, -math.inf, 0, -0.0]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, NASTY)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(NASTY, inner, max_size=3)),
    max_leaves=12,
)
IDS = st.one_of(
    NASTY.filter(bool), st.text(min_size=200, max_size=600), st.sampled_from(["a/b", "/", "x/approve"])
)

KEYWORDS = {
    "type": st.sampled_from(
        ["string", "integer", "number", "boolean", "object", "array", "null", "strnig", 3]
    ),
    "maxLength": st.one_of(st.integers(-2, 500), st.just("10"), st.floats()),
    "minLength": st.one_of(st.integers(-2, 5), st.just("3")),
    "minimum": st.one_of(NUMBERS, st.just("abc")),
    "maximum": st.one_of(NUMBERS, st.none()),
    "pattern": st.sampled_from(["^a", "(unclosed", "[", "\\d+"]),
    "enum": st.lists(SCALARS, max_size=3),
    "const": SCALARS,
    "default": JSONISH,
    "title": st.one_of(NASTY, st.integers()),
    "description": NASTY,
    "$ref": st.sampled_from(["#", "#/$defs/a", "#/$defs/missing", "https://example.com/s.json", 5]),
    "format": st.sampled_from(["date", "email", "nope"]),
}
PROPERTY = st.fixed_dictionaries({}, optional=KEYWORDS)
SCHEMAS = st.one_of(
    st.none(),
    st.builds(
        lambda props, required, defs: {
            "type": "object",
            "properties": props,
            "required": required,
            "$defs": {"a": defs},
        },
        st.dictionaries(NASTY, PROPERTY, max_size=3),
        st.lists(NASTY, max_size=2),
        PROPERTY,
    ),
    PROPERTY,
)

STEP = st.one_of(
    st.builds(lambda a, i: Call("pay", {"target": "t", "data": a}, tool_call_id=i), JSONISH, IDS),
    st.builds(lambda t, i: Call("ask", {"topic": t}, tool_call_id=i), NASTY, IDS),
    st.builds(lambda t: Call("fill", {"topic": t}), NASTY),
    st.builds(
        lambda a: RawCall("pay", '{"target": "t", "amount": ' + a + "}"),
        st.sampled_from(["-1e400", "NaN", "1" * 5000, "1e999"]),
    ),
)


def _forms(html: str) -> list[tuple[str, str]]:
    return [
        (str(a.get("class") or "approve"), str(a["action"]))
        for t, a, _ in elements(html)
        if t == "form" and str(a.get("action", "")).startswith("/runs/")
    ]


@settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(step=STEP, reply=NASTY, schema=SCHEMAS, answer=st.one_of(NASTY, JSONISH.map(repr)))
def test_no_page_answers_5xx_whatever_the_model_or_the_tool_author_stored(
    hostile: Hostile,
    reviewer_client: Client,
    admin_member_client: Client,
    step: Any,
    reply: str,
    schema: Any,
    answer: str,
) -> None:
    fill = hostile.agent().find_tool("fill")
    assert fill is not None
    # Refused with a clear error (ValueError), never anything else; set past the check all the same,
    # as an older version may have stored it.
    with contextlib.suppress(ValueError):
        tool(resume_schema=schema)(lambda topic: topic)
    with_schema(fill, schema)

    run = hostile.start(step, reply=Reply(reply))

    pages = ["/agents/hostile/?per_page=3", f"/runs/{run.run_id}/"]
    for url in pages:
        assert_no_5xx(reviewer_client, url, **HX)
    if run.status == "suspended":
        html = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
        kind, action = _forms(html)[0]
        # Forms post UTF-8: a lone surrogate cannot be sent (it arrives as "?").
        text = answer.encode("utf-8", "replace").decode()
        posted = {"agent": "hostile", "reason": text, "resume-__json__": text, "resume-name": text}
        response = reviewer_client.post(action, posted, **HX)
        assert response.status_code < 500, (kind, response.status_code)
        for url in pages:
            assert_no_5xx(reviewer_client, url)
    for url in ["/audit/", "/audit/export.csv"]:
        assert_no_5xx(admin_member_client, url)
