"""Approving with edited arguments: the tool runs once with the reviewer's arguments, not the model's.

The card's "Edit arguments" form posts ``edited_args`` (JSON text of an object) to the approve URL.
The view checks the shape (JSON, an object, at most 64 KiB), the runtime checks the tool's parameters;
either refusal is shown next to the field and decides nothing.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client

from approvals.forms.decisions import EDITED_ARGS_MAX_BYTES
from approvals.models import AuditEntry
from tests.support.markup import by_id, controls, elements
from tests.support.runtime_fixtures import XSS, DashboardAgents

HX = {"HTTP_HX_REQUEST": "true"}
ORIGINAL = {"order_id": "A-1", "amount_cents": 500, "note": "parcel"}
EDITED = {"order_id": "A-1", "amount_cents": 250, "note": "half: partly usable"}


def approve_url(run_id: str, tool_call_id: str) -> str:
    return f"/runs/{run_id}/calls/{tool_call_id}/approve"


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def edited_args_control(html: str) -> dict[str, str | None]:
    (found,) = [attrs for tag, attrs, _ in controls(html) if attrs.get("name") == "edited_args"]
    return found


def textarea_text(html: str) -> str:
    (text,) = [text for tag, attrs, text in controls(html) if attrs.get("name") == "edited_args"]
    return text


def field_error(html: str) -> str:
    control = edited_args_control(html)
    assert control["aria-invalid"] == "true"
    error_id = f"{control['id']}_error"
    assert error_id in (control["aria-describedby"] or "").split()
    return by_id(html, error_id)[2]


def csv_rows(response: Any) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


# --- The card's form --------------------------------------------------------------------------------


def test_approval_card_offers_to_edit_the_arguments_prefilled_with_the_models(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call = run.tool_calls[0]

    html = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()

    assert "<summary>Edit arguments</summary>" in html
    (form,) = [a for t, a, _ in elements(html) if t == "form" and a.get("class") == "edit-args-form"]
    assert form["action"] == form["hx-post"] == approve_url(run.run_id, call.tool_call_id)
    assert form["method"] == "post"
    control = edited_args_control(html)
    assert json.loads(textarea_text(html)) == ORIGINAL
    assert textarea_text(html).lstrip("\n") == json.dumps(ORIGINAL, indent=2)  # pretty, in its order
    help_id = f"{control['id']}_helptext"
    assert control["aria-describedby"] == help_id and "aria-invalid" not in control
    assert "The tool runs once with these arguments instead of the model" in by_id(html, help_id)[2]
    assert ">Approve with these arguments</button>" in html
    assert "csrfmiddlewaretoken" in html


def test_only_approval_calls_have_arguments_to_edit(agents: DashboardAgents, reviewer_client: Client) -> None:
    run = agents.start("helpdesk", "both")  # a refund (approval) and a schedule (input) call
    refund, _schedule = run.tool_calls

    html = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()

    control = edited_args_control(html)  # exactly one
    assert control["id"] == f"call-{run.run_id}-{refund.tool_call_id}-edited_args"
    assert json.loads(textarea_text(html))["note"] == "both"
    assert html.count("<summary>Edit arguments</summary>") == 1


def test_hostile_model_arguments_are_escaped_in_the_textarea(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", f"refund </textarea>{XSS}")

    html = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()

    assert "<script>" not in html and "</textarea><script" not in html
    assert "&lt;/textarea&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert json.loads(textarea_text(html))["note"] == f"</textarea>{XSS}"


# --- Approving with edited arguments ----------------------------------------------------------------


def test_edited_args_without_javascript_run_the_tool_with_them_and_redirect_back(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel", thread="t-1")
    call = run.tool_calls[0]

    response = reviewer_client.post(
        approve_url(run.run_id, call.tool_call_id),
        {"agent": "helpdesk", "next": "/agents/helpdesk/", "edited_args": json.dumps(EDITED)},
    )

    assert response.status_code == 302
    assert response["Location"] == "/agents/helpdesk/"
    assert any(
        "refund (approved with edited arguments): Completed: refund: refunded 250 on A-1" in m
        for m in messages_of(response)
    )
    assert agents.executed["refund"].calls == [EDITED]
    assert agents.suspended("helpdesk") == []
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.action, entry.outcome) == ("rita", "approve", "completed")
    assert entry.args == ORIGINAL  # as shown: the model's
    assert entry.edited_args == EDITED  # what the reviewer sent


def test_edited_args_with_htmx_replace_the_card_with_the_outcome_showing_both(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call = run.tool_calls[0]

    response = reviewer_client.post(
        approve_url(run.run_id, call.tool_call_id),
        {"agent": "helpdesk", "edited_args": json.dumps(EDITED)},
        **HX,
    )

    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith(f'<article id="run-{run.run_id}"')
    assert "<html" not in html
    assert "<strong>rita</strong> approved <code>refund</code> with edited arguments." in html
    assert "refund: refunded 250 on A-1" in html  # the final answer: the tool saw the edit
    pres = [text for tag, _, text in elements(html) if tag == "pre"]
    assert json.dumps(ORIGINAL, indent=2) in pres and json.dumps(EDITED, indent=2) in pres
    assert 'name="edited_args"' not in html
    assert agents.executed["refund"].calls == [EDITED]
    assert AuditEntry.objects.get().edited_args == EDITED


def test_identical_args_are_a_plain_approval(agents: DashboardAgents, reviewer_client: Client) -> None:
    unchanged, changed = agents.start("helpdesk", "refund parcel"), agents.start("helpdesk", "refund parcel")
    # The same object in other words (its keys in another order), and one character changed.
    same = json.dumps(dict(reversed(list(ORIGINAL.items()))), indent=4)
    edited = json.dumps({**ORIGINAL, "note": "parcels"})

    plain = reviewer_client.post(
        approve_url(unchanged.run_id, unchanged.tool_calls[0].tool_call_id),
        {"agent": "helpdesk", "edited_args": same},
        **HX,
    )
    edit = reviewer_client.post(
        approve_url(changed.run_id, changed.tool_calls[0].tool_call_id),
        {"agent": "helpdesk", "edited_args": edited},
        **HX,
    )

    assert "<strong>rita</strong> approved <code>refund</code>." in plain.content.decode()
    assert "with edited arguments" not in plain.content.decode()
    assert (
        "<strong>rita</strong> approved <code>refund</code> with edited arguments." in edit.content.decode()
    )
    assert agents.executed["refund"].calls == [ORIGINAL, {**ORIGINAL, "note": "parcels"}]
    entries = {e.run_id: e for e in AuditEntry.objects.all()}
    assert (entries[unchanged.run_id].outcome, entries[unchanged.run_id].edited_args) == ("completed", None)
    assert entries[changed.run_id].edited_args == {**ORIGINAL, "note": "parcels"}


def test_a_number_that_only_looks_equal_is_an_edit(agents: DashboardAgents, reviewer_client: Client) -> None:
    run = agents.start("helpdesk", "transfer 500")
    call = run.tool_calls[0]

    reviewer_client.post(
        approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk", "edited_args": '{"amount": 500.0}'}
    )

    assert AuditEntry.objects.get().edited_args == {"amount": 500.0}


@pytest.mark.parametrize(
    ("posted", "message"),
    [
        ("", "Enter the arguments as a JSON object."),
        ('{"order_id": "A-1", amount_cents: 1}', "This is not valid JSON: Expecting property name"),
        ('{"amount_cents": NaN}', "This is not valid JSON"),
        ('["A-1", 250]', "Enter a JSON object ({…}) with the tool's arguments, not an array."),
        ('"A-1"', "not a string"),
        (
            '{"note": "' + "x" * EDITED_ARGS_MAX_BYTES + '"}',
            "These arguments are too large (65 KiB; at most 64 KiB).",
        ),
        ("[" * 100_000, "These arguments are too large"),
        ("[" * 30_000 + "]" * 30_000, "These arguments are nested too deeply."),
    ],
    ids=["empty", "not-json", "nan", "array", "string", "too-large", "too-large-nesting", "too-deep"],
)
def test_malformed_edited_args_are_a_field_error_and_decide_nothing(
    agents: DashboardAgents, reviewer_client: Client, posted: str, message: str
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call = run.tool_calls[0]
    data = {"agent": "helpdesk", "edited_args": posted}

    partial = reviewer_client.post(approve_url(run.run_id, call.tool_call_id), data, **HX)
    page = reviewer_client.post(approve_url(run.run_id, call.tool_call_id), data)

    assert partial.status_code == 200  # htmx swaps 2xx only
    assert page.status_code == 400
    assert "<html" in page.content.decode() and "<html" not in partial.content.decode()
    for response in (partial, page):
        html = response.content.decode()
        assert message in field_error(html)
        assert '<details class="edit-args" open>' in html  # the error is in sight
        assert textarea_text(html).removeprefix("\n") == posted.strip()  # what was typed is kept
    assert [r.run_id for r in agents.suspended("helpdesk")] == [run.run_id]
    assert agents.executed["refund"].count == 0
    # Never reached the runtime: nothing decided, the attempts kept apart as invalid.
    assert not AuditEntry.objects.winning().exists()
    assert [(e.action, e.outcome) for e in AuditEntry.objects.all()] == [("approve", "invalid")] * 2


def test_args_that_break_the_tools_parameters_are_refused_by_the_runtime_next_to_the_field(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call = run.tool_calls[0]
    bad = json.dumps({"order_id": "A-1", "amount_cents": "lots"}, indent=2)
    data = {"agent": "helpdesk", "edited_args": bad}

    partial = reviewer_client.post(approve_url(run.run_id, call.tool_call_id), data, **HX)
    page = reviewer_client.post(approve_url(run.run_id, call.tool_call_id), data)

    assert (partial.status_code, page.status_code) == (200, 400)
    for response in (partial, page):
        html = response.content.decode()
        error = field_error(html)
        assert "amount_cents:" in error and "note:" in error  # located in the arguments object
        assert textarea_text(html).removeprefix("\n") == bad
        assert ">Approve with these arguments</button>" in html  # the card again, still decidable
    assert [r.run_id for r in agents.suspended("helpdesk")] == [run.run_id]
    assert agents.executed["refund"].count == 0
    # The runtime refused: on record as such (the audit policy), with what was sent.
    entries = list(AuditEntry.objects.chronological())
    assert [(e.action, e.outcome) for e in entries] == [("approve", "invalid")] * 2
    assert entries[0].edited_args == {"order_id": "A-1", "amount_cents": "lots"}
    assert entries[0].args == ORIGINAL
    # And the run can still be approved.
    done = reviewer_client.post(
        approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk", "edited_args": json.dumps(EDITED)}
    )
    assert done.status_code == 302
    assert agents.executed["refund"].calls == [EDITED]


def test_edited_args_on_an_input_call_are_refused_and_change_nothing(
    agents: DashboardAgents, reviewer_client: Client
) -> None:
    run = agents.start("helpdesk", "schedule")
    call = run.tool_calls[0]

    response = reviewer_client.post(
        approve_url(run.run_id, call.tool_call_id),
        {"agent": "helpdesk", "edited_args": '{"system": "x"}'},
        **HX,
    )

    assert "Refused" in response.content.decode()
    assert [r.run_id for r in agents.suspended("helpdesk")] == [run.run_id]
    assert agents.executed["schedule_maintenance"].count == 0
    entry = AuditEntry.objects.get()
    assert (entry.outcome, entry.edited_args) == ("invalid", {"system": "x"})  # what was tried


def test_hostile_edited_text_is_escaped_everywhere(
    agents: DashboardAgents, reviewer_client: Client, admin_member_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call = run.tool_calls[0]
    target = approve_url(run.run_id, call.tool_call_id)

    refused = reviewer_client.post(target, {"agent": "helpdesk", "edited_args": f"</textarea>{XSS}"}, **HX)
    hostile = {**ORIGINAL, "note": f"</pre>{XSS}"}
    decided = reviewer_client.post(target, {"agent": "helpdesk", "edited_args": json.dumps(hostile)}, **HX)
    run_page = reviewer_client.get(f"/runs/{run.run_id}/")
    audit = admin_member_client.get("/audit/")

    assert agents.executed["refund"].calls == [hostile]
    for response in (refused, decided, run_page, audit):
        html = response.content.decode()
        assert "<script>" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert textarea_text(refused.content.decode()).removeprefix("\n") == f"</textarea>{XSS}"


# --- Where the decision shows afterwards ------------------------------------------------------------


def test_run_page_audit_log_and_csv_show_the_edited_arguments(
    agents: DashboardAgents, reviewer_client: Client, admin_member_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    other = agents.start("helpdesk", "refund other")
    reviewer_client.post(
        approve_url(run.run_id, run.tool_calls[0].tool_call_id),
        {"agent": "helpdesk", "edited_args": json.dumps(EDITED)},
    )
    reviewer_client.post(approve_url(other.run_id, other.tool_calls[0].tool_call_id), {"agent": "helpdesk"})

    run_page = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    audit = admin_member_client.get("/audit/").content.decode()
    rows = csv_rows(admin_member_client.get("/audit/export.csv"))

    assert "approved <code>refund</code> with edited arguments" in run_page  # the last decision
    assert "Approve with edited arguments</td>" in run_page  # the decisions table
    assert "&quot;amount_cents&quot;: 250" in run_page and "&quot;amount_cents&quot;: 500" in run_page
    assert audit.count(">Approve with edited arguments</span>") == 1
    assert audit.count('data-label="Decision">Approve</span>') == 1
    assert "&quot;amount_cents&quot;: 250" in audit
    by_run = {row["run_id"]: row for row in rows}
    assert json.loads(by_run[run.run_id]["edited_args"]) == EDITED
    assert json.loads(by_run[run.run_id]["args"]) == ORIGINAL
    assert by_run[other.run_id]["edited_args"] == ""
    assert list(rows[0]).index("edited_args") == list(rows[0]).index("resume_data") + 1


def test_admin_shows_the_edited_arguments_read_only(
    agents: DashboardAgents, reviewer_client: Client, admin_client: Client
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    reviewer_client.post(
        approve_url(run.run_id, run.tool_calls[0].tool_call_id),
        {"agent": "helpdesk", "edited_args": json.dumps(EDITED)},
    )
    entry = AuditEntry.objects.get()

    listing = admin_client.get("/admin/approvals/auditentry/").content.decode()
    detail = admin_client.get(f"/admin/approvals/auditentry/{entry.pk}/change/").content.decode()

    assert "Edited arguments" in listing and 'alt="True"' in listing
    assert re.search(r"Edited args:.*?&quot;amount_cents&quot;: 250", detail, re.S)
    assert 'name="edited_args"' not in detail  # shown, not editable


# --- Who may ----------------------------------------------------------------------------------------


def test_user_without_the_decide_permission_can_neither_see_nor_post_the_edit(
    agents: DashboardAgents, viewer: User, reviewer: User, client_for: Callable[[User], Client]
) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call = run.tool_calls[0]
    client, allowed = client_for(viewer), client_for(reviewer)
    data = {"agent": "helpdesk", "edited_args": json.dumps(EDITED)}

    page = client.get(f"/runs/{run.run_id}/").content.decode()
    responses = [client.post(approve_url(run.run_id, call.tool_call_id), data, **h) for h in ({}, HX)]

    assert 'name="edited_args"' not in page and "Edit arguments" not in page
    assert 'name="edited_args"' in allowed.get(f"/runs/{run.run_id}/").content.decode()
    assert [r.status_code for r in responses] == [403, 403]
    assert "approvals.decide_runs" in responses[0].content.decode()
    assert agents.executed["refund"].count == 0
    assert not AuditEntry.objects.exists()


def test_edited_args_post_without_csrf_token_is_refused(agents: DashboardAgents, reviewer: User) -> None:
    run = agents.start("helpdesk", "refund parcel")
    call = run.tool_calls[0]
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)

    refused = client.post(
        approve_url(run.run_id, call.tool_call_id), {"agent": "helpdesk", "edited_args": json.dumps(EDITED)}
    )

    assert refused.status_code == 403 and "CSRF" in refused.content.decode()
    assert agents.executed["refund"].count == 0
    assert not AuditEntry.objects.exists()
    # With the token the card's form carries, the same post approves with the edit.
    page = client.get(f"/runs/{run.run_id}/")
    (token,) = re.findall(
        r'<form class="edit-args-form".*?name="csrfmiddlewaretoken" value="([^"]+)"',
        page.content.decode(),
        re.S,
    )
    accepted = client.post(
        approve_url(run.run_id, call.tool_call_id),
        {"agent": "helpdesk", "edited_args": json.dumps(EDITED), "csrfmiddlewaretoken": token},
    )
    assert accepted.status_code == 302
    assert agents.executed["refund"].calls == [EDITED]
