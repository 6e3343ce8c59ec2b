"""Resume forms generated from JSON Schema: what they render and how they validate (no database)."""

from __future__ import annotations

from typing import Literal

from django import forms
from pydantic import BaseModel, Field

from approvals.forms.schema import WHOLE_ANSWER, resume_form

MIXED = {
    "type": "object",
    "properties": {
        "start": {"type": "string", "title": "Start time", "description": "When", "minLength": 2},
        "minutes": {"type": "integer", "minimum": 5, "maximum": 60, "default": 30},
        "ratio": {"type": "number"},
        "notify": {"type": "boolean", "default": True},
        "risk": {"enum": ["low", "high"]},
        "level": {"enum": [1, 2, 3]},
    },
    "required": ["start", "risk"],
}


def test_fields_follow_the_schema_types_titles_defaults_and_required() -> None:
    form = resume_form(MIXED)

    fields = form.fields
    assert isinstance(fields["start"], forms.CharField) and fields["start"].required
    assert (fields["start"].label, fields["start"].help_text) == ("Start time", "When")
    assert isinstance(fields["minutes"], forms.IntegerField)
    assert (fields["minutes"].initial, fields["minutes"].required) == (30, False)
    assert isinstance(fields["ratio"], forms.FloatField) and fields["ratio"].label == "ratio"
    assert isinstance(fields["notify"], forms.BooleanField) and fields["notify"].initial is True
    assert isinstance(fields["risk"].widget, forms.Select) and fields["risk"].required
    # A required enum without a default preselects nothing: the reviewer must choose.
    assert [c[0] for c in fields["risk"].choices] == ["", "low", "high"]  # type: ignore[attr-defined]
    assert [c[0] for c in fields["level"].choices] == ["", "1", "2", "3"]  # type: ignore[attr-defined]
    assert not form.is_json_fallback


def test_valid_answer_becomes_typed_resume_data() -> None:
    form = resume_form(
        MIXED, data={"start": "22:00", "minutes": "45", "ratio": "0.5", "risk": "high", "level": "2"}
    )

    assert form.is_valid(), form.errors
    assert form.resume_data == {
        "start": "22:00",
        "minutes": 45,
        "ratio": 0.5,
        "notify": False,  # an unchecked checkbox is an answer
        "risk": "high",
        "level": 2,
    }


def test_optional_fields_left_empty_are_left_out() -> None:
    form = resume_form(MIXED, data={"start": "now", "risk": "low"})

    assert form.is_valid(), form.errors
    assert form.resume_data == {"start": "now", "notify": False, "risk": "low"}


def test_a_required_enum_left_unchosen_is_an_error() -> None:
    form = resume_form(MIXED, data={"start": "now", "risk": ""})

    assert not form.is_valid()
    assert form.errors["risk"] == ["This field is required."]


def test_invalid_values_are_field_errors() -> None:
    form = resume_form(MIXED, data={"start": "x", "minutes": "600", "ratio": "lots", "risk": "medium"})

    assert not form.is_valid()
    assert set(form.errors) == {"start", "minutes", "ratio", "risk"}
    assert form.resume_data is None


def test_jsonschema_checks_what_the_fields_cannot() -> None:
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["code"],
    }

    form = resume_form(schema, data={"code": "abc"})

    assert not form.is_valid()
    assert "does not match" in form.errors["code"][0]


def test_pydantic_schemas_with_refs_optionals_and_literals() -> None:
    class Answer(BaseModel):
        colour: Literal["red", "blue"]
        size: int | None = None
        note: str = Field(default="", title="Note")

    form = resume_form(Answer.model_json_schema(), data={"colour": "blue", "size": ""})

    assert isinstance(form.fields["colour"].widget, forms.Select)
    assert not form.fields["size"].required
    assert form.fields["note"].label == "Note"
    assert form.is_valid(), form.errors
    assert form.resume_data == {"colour": "blue"}


def test_nested_properties_get_a_json_field() -> None:
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}}, "name": {"type": "string"}},
        "required": ["tags"],
    }

    form = resume_form(schema, data={"tags": '["a", 1]', "name": "n"})

    assert isinstance(form.fields["tags"], forms.JSONField)
    assert not form.is_valid()
    assert form.errors["tags"] == ["[1]: 1 is not of type 'string'"]
    assert resume_form(schema, data={"tags": '["a"]'}).is_valid()


def test_a_schema_that_is_not_an_object_is_answered_as_json() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}

    form = resume_form(schema, data={WHOLE_ANSWER: "[1, 2]"})

    assert form.is_json_fallback
    assert form.is_valid(), form.errors
    assert form.resume_data == [1, 2]
    bad = resume_form(schema, data={WHOLE_ANSWER: "not json"})
    assert not bad.is_valid() and WHOLE_ANSWER in bad.errors


def test_no_schema_takes_any_json_object() -> None:
    form = resume_form(None, data={WHOLE_ANSWER: '{"anything": true}'})

    assert form.is_valid(), form.errors
    assert form.resume_data == {"anything": True}


def test_runtime_errors_are_attached_to_fields() -> None:
    form = resume_form(MIXED, data={"start": "now", "risk": "low"})
    assert form.is_valid()

    form.add_field_errors([{"loc": ("start",), "msg": "too early"}, {"loc": (), "msg": "no"}])

    assert form.errors["start"] == ["too early"]
    assert form.non_field_errors() == ["no"]
