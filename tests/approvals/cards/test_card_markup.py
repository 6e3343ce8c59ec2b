"""The run card's forms in plain markup: every field keeps what Django's widgets gave it, and more.

The card renders its fields from ``approvals.cards.fields.FieldView`` (no widget templates: an inbox page has
a hundred fields); Django forms still validate the posts and carry the errors back.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from django import forms
from django.template.loader import render_to_string
from django.test import Client

from approvals.cards import fields as field_views
from approvals.cards import run as cards
from approvals.forms.decisions import DeclineForm
from approvals.forms.schema import ResumeForm, resume_form, resume_form_class
from tests.support.markup import by_id, controls, elements
from tests.support.runtime_fixtures import DashboardAgents

HX = {"HTTP_HX_REQUEST": "true"}
AUTO_ID = "call-r1-c1-%s"

SCHEMA = {
    "type": "object",
    "properties": {
        "start": {"type": "string", "title": "Start time", "description": "When it opens", "minLength": 2},
        "minutes": {"type": "integer", "minimum": 5, "maximum": 60, "default": 30},
        "ratio": {"type": "number"},
        "notify": {"type": "boolean", "title": "Notify on-call", "default": True},
        "risk": {"enum": ["low", "high"], "title": "Risk"},
        "level": {"enum": [1, 2, 3], "default": 2},
        "notes": {"type": "string", "maxLength": 500},
        "steps": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["start", "risk", "steps"],
}


def render_fields(fields: list[field_views.FieldView]) -> str:
    return "".join(render_to_string("approvals/partials/run_card.html#form-field", {"f": f}) for f in fields)


def empty_resume_fields(schema: dict[str, Any] | None) -> list[field_views.FieldView]:
    return field_views.unbound_fields(resume_form_class(schema), auto_id=AUTO_ID, prefix="resume")


# --- What each field type renders -------------------------------------------------------------------


def test_each_schema_type_gets_its_control_label_name_and_help() -> None:
    html = render_fields(empty_resume_fields(SCHEMA))

    start = by_id(html, "call-r1-c1-resume-start")
    assert start[0] == "input" and start[1]["type"] == "text" and start[1]["name"] == "resume-start"
    assert "required" in start[1] and start[1]["minlength"] == "2"
    assert start[1]["aria-describedby"] == "call-r1-c1-resume-start_helptext"
    assert by_id(html, "call-r1-c1-resume-start_helptext")[2] == "When it opens"
    assert 'for="call-r1-c1-resume-start">Start time <abbr class="required" title="required">*</abbr>' in html

    minutes = by_id(html, "call-r1-c1-resume-minutes")[1]
    assert (minutes["type"], minutes["value"], minutes["min"], minutes["max"]) == ("number", "30", "5", "60")
    assert "required" not in minutes  # a default makes a property optional
    assert by_id(html, "call-r1-c1-resume-ratio")[1]["step"] == "any"  # numbers take decimals

    notify = by_id(html, "call-r1-c1-resume-notify")[1]
    assert notify["type"] == "checkbox" and "checked" in notify and "required" not in notify
    assert '<label for="call-r1-c1-resume-notify">Notify on-call</label>' in html

    risk = by_id(html, "call-r1-c1-resume-risk")
    assert risk[0] == "select" and "required" in risk[1]
    options = [(a["value"], "selected" in a, text) for tag, a, text in controls(html) if tag == "option"]
    # Nothing chosen yet: the reviewer must pick one.
    assert options[:3] == [("", True, "Choose…"), ("low", False, "low"), ("high", False, "high")]
    assert options[3:] == [("", False, "—"), ("1", False, "1"), ("2", True, "2"), ("3", False, "3")]

    notes = by_id(html, "call-r1-c1-resume-notes")
    assert notes[0] == "textarea" and notes[1]["maxlength"] == "500"
    steps = by_id(html, "call-r1-c1-resume-steps")
    assert steps[0] == "textarea" and steps[1]["class"] == "json" and "required" in steps[1]
    assert by_id(html, "call-r1-c1-resume-steps_helptext")[2] == "Enter JSON."


def test_a_schema_without_properties_is_one_json_answer() -> None:
    html = render_fields(empty_resume_fields({"type": "array", "items": {"type": "integer"}}))

    (answer,) = controls(html)
    assert answer[0] == "textarea" and answer[1]["name"] == "resume-__json__" and "required" in answer[1]
    assert '<label for="call-r1-c1-resume-__json__">Answer' in html


def test_the_markup_has_what_djangos_widgets_render() -> None:
    """Same controls, attributes and values as ``str(bound_field)``, empty and with posted errors."""
    posted = {
        "resume-start": "x",
        "resume-minutes": "600",
        "resume-ratio": "lots",
        "resume-risk": "medium",
        "resume-level": "3",
        "resume-notes": "\n\nkept as typed",
        "resume-steps": "[1",
    }
    cases: list[tuple[forms.Form, list[field_views.FieldView]]] = []
    empty = resume_form(SCHEMA, prefix="resume", auto_id=AUTO_ID)
    cases.append((empty, empty_resume_fields(SCHEMA)))
    invalid = resume_form(SCHEMA, data=posted, prefix="resume", auto_id=AUTO_ID)
    assert not invalid.is_valid()
    cases.append((invalid, field_views.bound_fields(invalid)))
    cases.append((DeclineForm(auto_id=AUTO_ID), field_views.unbound_fields(DeclineForm, auto_id=AUTO_ID)))
    too_long = DeclineForm(data={"reason": "x" * 4001}, auto_id=AUTO_ID)
    assert not too_long.is_valid()
    cases.append((too_long, field_views.bound_fields(too_long)))

    for form, fields in cases:
        django_html = "".join(str(bound) for bound in form)
        assert controls(render_fields(fields)) == controls(django_html)


# --- Errors next to the fields ----------------------------------------------------------------------


def test_a_field_error_is_shown_next_to_it_and_describes_it() -> None:
    form = resume_form(
        SCHEMA, data={"resume-start": "x", "resume-risk": "low"}, prefix="resume", auto_id=AUTO_ID
    )
    assert not form.is_valid()

    html = render_fields(field_views.bound_fields(form))

    start = by_id(html, "call-r1-c1-resume-start")[1]
    assert start["aria-invalid"] == "true" and start["value"] == "x"
    assert start["aria-describedby"] == "call-r1-c1-resume-start_helptext call-r1-c1-resume-start_error"
    error = by_id(html, "call-r1-c1-resume-start_error")
    assert "at least 2 characters" in error[2] and error[1]["class"] == "field-errors"
    assert "aria-invalid" not in by_id(html, "call-r1-c1-resume-risk")[1]


def test_invalid_resume_post_describes_each_field_by_its_error(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "schedule")
    call = run.tool_calls[0]
    bad = {"agent": "helpdesk", "resume-start": "", "resume-duration_minutes": "2", "resume-risk": "low"}

    response = reviewer_client.post(f"/runs/{run.run_id}/calls/{call.tool_call_id}/resume", bad, **HX)

    html = response.content.decode()
    invalid = [attrs for tag, attrs, _ in controls(html) if attrs.get("aria-invalid") == "true"]
    assert {attrs["name"] for attrs in invalid} == {"resume-start", "resume-duration_minutes"}
    for attrs in invalid:
        error_id = f"{attrs['id']}_error"
        assert error_id in (attrs["aria-describedby"] or "").split()
        assert by_id(html, error_id)[2]  # the message, next to the field
    assert by_id(html, f"{invalid[1]['id']}")[1]["value"] == "2"  # what was typed is kept


def test_decline_reason_error_is_the_reasons_description(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call = run.tool_calls[0]

    response = reviewer_client.post(
        f"/runs/{run.run_id}/calls/{call.tool_call_id}/decline",
        {"agent": "helpdesk", "reason": "x" * 2001},
        **HX,
    )

    html = response.content.decode()
    (reason,) = [attrs for tag, attrs, _ in controls(html) if attrs.get("name") == "reason"]
    assert reason["aria-invalid"] == "true"
    described = (reason["aria-describedby"] or "").split()
    assert described == [f"{reason['id']}_helptext", f"{reason['id']}_error"]
    assert "at most 2000 characters" in by_id(html, f"{reason['id']}_error")[2]
    assert agents.executed["refund"].count == 0


def test_inbox_filter_error_is_the_fields_description(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    html = reviewer_client.get("/agents/helpdesk/?per_page=0").content.decode()

    per_page = by_id(html, "id_per_page")[1]
    assert per_page["aria-describedby"] == "id_per_page_error"
    assert "greater than or equal to 1" in by_id(html, "id_per_page_error")[2]


def test_audit_filter_error_is_the_fields_description(
    agents: DashboardAgents, admin_member_client: Client
) -> None:
    html = admin_member_client.get("/audit/?from=soon").content.decode()

    start = by_id(html, "id_from")[1]
    assert start["aria-describedby"] == "id_from_error"
    assert "Enter an ISO date" in by_id(html, "id_from_error")[2]


# --- Untrusted schemas ------------------------------------------------------------------------------


def test_hostile_schema_text_is_escaped_everywhere() -> None:
    hostile = '"><script>alert(1)</script>'
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "title": hostile, "description": hostile, "default": hostile},
            "b": {"enum": [hostile, "<b>bold</b>"], "title": "B", "default": hostile},
            "c": {"type": "array", "description": hostile, "default": [hostile]},
        },
    }
    form = resume_form(schema, data={"resume-a": hostile}, prefix="resume", auto_id=AUTO_ID)
    form.add_error("a", hostile)

    for fields in (empty_resume_fields(schema), field_views.bound_fields(form)):
        html = render_fields(fields)
        assert "<script>" not in html and "<b>" not in html
        assert "&lt;script&gt;" in html
        # Attribute values are escaped too: nothing closes an attribute early.
        assert all(
            tag in {"div", "label", "abbr", "p", "input", "select", "option", "textarea"}
            for tag, *_ in elements(html)
        )
    assert by_id(render_fields(empty_resume_fields(schema)), "call-r1-c1-resume-a")[1]["value"] == hostile


# --- One form class per schema ----------------------------------------------------------------------


def test_equal_schemas_share_one_form_class() -> None:
    first = resume_form_class(SCHEMA)

    assert resume_form_class(copy.deepcopy(SCHEMA)) is first
    assert issubclass(first, ResumeForm) and first.schema == SCHEMA
    assert resume_form_class({**SCHEMA, "required": ["start"]}) is not first
    assert list(first.base_fields) == list(SCHEMA["properties"])  # type: ignore[call-overload]


def test_forms_of_one_class_do_not_share_their_fields_or_errors() -> None:
    form_class = resume_form_class(SCHEMA)
    invalid = form_class(data={"start": "x"})
    assert not invalid.is_valid()

    fresh = form_class()

    assert fresh.fields["start"] is not invalid.fields["start"]
    assert not fresh.is_bound and fresh.errors == {}
    assert form_class(data={"start": "22:00", "risk": "low", "steps": '["check"]'}).is_valid()


def test_property_names_never_replace_the_forms_own_attributes() -> None:
    schema = {
        "type": "object",
        "properties": {
            "clean": {"type": "string"},
            "fields": {"type": "integer"},
            "schema": {"type": "boolean"},
        },
        "required": ["clean"],
    }

    form = resume_form(schema, data={"clean": "yes", "fields": "3"})

    assert form.is_valid(), form.errors
    assert form.resume_data == {"clean": "yes", "fields": 3, "schema": False}


# --- The card's other precomputed text --------------------------------------------------------------


def test_card_urls_point_at_the_calls_endpoints(agents: DashboardAgents, reviewer_client: Client) -> None:
    agents.start("helpdesk", "both")
    (run,) = agents.suspended("helpdesk")

    card = cards.run_card(run)

    approval, schedule = sorted(card.calls, key=lambda c: not c.is_approval)
    base = f"/runs/{run.run_id}/calls"
    assert card.run_url == f"/runs/{run.run_id}/"
    assert approval.approve_url == f"{base}/{approval.call.tool_call_id}/approve"
    assert schedule.resume_url == f"{base}/{schedule.call.tool_call_id}/resume"
    assert schedule.decline_url == f"{base}/{schedule.call.tool_call_id}/decline"
    html = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    for url in (approval.approve_url, approval.decline_url, schedule.resume_url, schedule.decline_url):
        assert re.search(rf'<form[^>]* action="{re.escape(url)}" hx-post="{re.escape(url)}"', html)
