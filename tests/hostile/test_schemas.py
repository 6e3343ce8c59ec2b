"""Tool authors' schemas: refused when the tool is defined, and never a 500 when an old one is stored.

``tool(...)`` checks a JSON Schema dict against its draft's metaschema (2020-12 unless ``$schema``
says otherwise), the types of keywords, defaults against their own schema, and ``$ref`` loops. A run
stored with a schema that fails those (by an older version) is still listed and shown, with a note;
it cannot be answered through the form (the answer is refused, nothing runs) but can be declined.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from agents_runtime import InvalidResumeData, tool
from approvals.models import AuditEntry
from tests.hostile.conftest import HX
from tests.support.hostile_runtime import FILL_SCHEMA, Call, Hostile, with_schema
from tests.support.markup import elements


def _obj(prop: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": prop}, **extra}


LOOP = {
    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
    "type": "object",
    "properties": {"name": {"$ref": "#/$defs/a"}},
}
#: (schema, words the error must name)
BAD_SCHEMAS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "maxLength string": (_obj({"type": "string", "maxLength": "10"}), ("maxLength", "name")),
    "enum dict default": (_obj({"type": "string", "enum": ["a", "b"], "default": {"x": 1}}), ("default",)),
    "minimum string": (_obj({"type": "integer", "minimum": "abc"}), ("minimum",)),
    "minLength string": (_obj({"type": "string", "minLength": "3"}), ("minLength",)),
    "invalid pattern": (_obj({"type": "string", "pattern": "(unclosed"}), ("pattern",)),
    "unknown type": (_obj({"type": "strnig"}), ("type",)),
    "ref loop": (LOOP, ("$ref",)),
    "self ref": ({"$ref": "#"}, ("$ref",)),
    "allOf loop": (
        {
            "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}},
            "type": "object",
            "properties": {"name": {"$ref": "#/$defs/a"}},
        },
        ("$ref",),
    ),
    "dangling ref": (_obj({"$ref": "#/$defs/missing"}), ("$ref",)),
    "remote ref": (_obj({"$ref": "https://example.com/schema.json"}), ("$ref",)),
    "not an object": (["type", "object"], ("resume_schema",)),
    "nul in a title": (_obj({"type": "string", "title": "a\x00b"}), ("title",)),
    "non-finite maximum": (_obj({"type": "number", "maximum": float("inf")}), ("maximum",)),
    "default of the wrong type": (_obj({"type": "integer", "default": "ten"}), ("default",)),
    "unknown draft": ({"$schema": "https://example.com/my-draft", "type": "object"}, ("$schema",)),
}


@pytest.mark.parametrize("name", list(BAD_SCHEMAS))
@pytest.mark.parametrize("field", ["resume_schema", "suspend_schema"])
def test_tool_refuses_an_invalid_schema_naming_the_field(name: str, field: str) -> None:
    schema, words = BAD_SCHEMAS[name]

    def ask(topic: str) -> str:
        return topic

    with pytest.raises(ValueError) as refused:
        tool(**{field: schema})(ask)

    message = str(refused.value)
    assert field in message and "'ask'" in message
    for word in words:
        assert word.replace("resume_schema", field) in message, message


def test_recursive_schemas_pydantic_writes_are_fine() -> None:
    tree = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            }
        },
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}, "mode": {"enum": ["a", "b"], "default": "a"}},
    }

    tool(resume_schema=tree)(lambda topic: topic)
    tool(resume_schema=FILL_SCHEMA, suspend_schema={"type": "object"})(lambda topic: topic)


def _forms(html: str) -> dict[str, str]:
    return {
        str(a.get("class") or "approve"): str(a["action"])
        for t, a, _ in elements(html)
        if t == "form" and str(a.get("action", "")).startswith("/runs/")
    }


#: Bad schemas that can be stored (the others cannot be set on a tool past its checks, or are
#: normalised into a usable schema: a NUL in a title becomes U+FFFD).
STORABLE_BAD = [n for n in BAD_SCHEMAS if n not in {"not an object", "nul in a title"}]


def test_a_stored_invalid_schema_is_shown_with_a_note_and_refused_when_answered(
    hostile: Hostile, reviewer_client: Client
) -> None:
    good = hostile.start(Call("pay", {"target": "bob"}))
    fill = hostile.agent().find_tool("fill")
    assert fill is not None

    for name in STORABLE_BAD:
        with_schema(fill, BAD_SCHEMAS[name][0])
        bad = hostile.start(Call("fill", {"topic": "t"}))
        assert bad.status == "suspended", (name, bad.error)

        page = reviewer_client.get(f"/runs/{bad.run_id}/")
        assert page.status_code == 200, name
        html = page.content.decode()
        assert "resume schema is invalid" in html, name
        inbox = reviewer_client.get("/agents/hostile/?per_page=100").content.decode()
        assert good.run_id in inbox and bad.run_id in inbox, name

        action = _forms(html)["resume-form"]
        posted = {"agent": "hostile", "resume-name": "x", "resume-__json__": '{"name": "x"}'}
        for extra in ({}, HX):
            answered = reviewer_client.post(action, posted, **extra)
            assert answered.status_code == (200 if extra else 400), name
            assert "resume schema is invalid" in answered.content.decode(), name
        with pytest.raises(InvalidResumeData, match="schema is invalid"):
            async_to_sync(hostile.agent().resume_stream)({"name": "x"}, run_id=bad.run_id)
    assert hostile.ran == 0


def test_a_call_with_a_stored_invalid_schema_can_be_declined(serve: Any, reviewer_client: Client) -> None:
    hostile: Hostile = serve(fill_schema=LOOP)
    good = hostile.start(Call("pay", {"target": "bob"}))
    bad = hostile.start(Call("fill", {"topic": "t"}))
    html = reviewer_client.get(f"/runs/{bad.run_id}/").content.decode()

    declined = reviewer_client.post(
        _forms(html)["decline-form"], {"agent": "hostile", "reason": "broken"}, **HX
    )

    assert declined.status_code == 200
    assert [r.run_id for r in hostile.suspended()] == [good.run_id]
    assert AuditEntry.objects.get().action == "decline"
    assert hostile.ran == 0


INBOX_QUERIES = [
    "",
    "kind=input",
    "kind=approval",
    "tool=fill",
    "sort=oldest",
    "per_page=1",
    "per_page=1&page=2",
    "per_page=1&page=3",
    "per_page=100",
    "from=2000-01-01&to=9999-12-31",
]


def test_one_run_with_a_broken_schema_never_hides_the_others(serve: Any, reviewer_client: Client) -> None:
    hostile: Hostile = serve(fill_schema=BAD_SCHEMAS["enum dict default"][0])
    good = hostile.start(Call("pay", {"target": "bob"}))
    hostile.start(Call("fill", {"topic": "t"}))
    also_good = hostile.start(Call("ask", {"topic": "t"}))

    for query in INBOX_QUERIES:
        for extra in ({}, HX):
            response = reviewer_client.get(f"/agents/hostile/?{query}", **extra)
            assert response.status_code == 200, query
            if query in ("", "per_page=100"):
                html = response.content.decode()
                assert good.run_id in html and also_good.run_id in html, query
    assert reviewer_client.get("/").status_code == 200
