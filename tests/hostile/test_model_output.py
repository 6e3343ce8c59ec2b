"""Whatever a model says is stored in a safe normal form, shown as such, and can be decided.

The normal form (``agents_runtime.untrusted``): NUL and lone surrogates become U+FFFD; NaN and the
infinities become the strings "NaN", "Infinity" and "-Infinity"; a tool call id that is too long or
has characters that are not printable is mapped to a short stable one (its readable start and a hash).
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any
from urllib.parse import unquote

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.utils.html import escape

from agents_runtime import Agent, InMemoryRunStore, RunStore, Runtime, tool
from agents_runtime.untrusted import MAX_ID_LENGTH, clean_id
from approvals.cards.text import pretty_json
from approvals.models import AuditEntry
from approvals.store import DjangoRunStore
from tests.hostile.conftest import HX
from tests.support.hostile_runtime import Call, Hostile, RawCall, Reply
from tests.support.markup import elements

LONG_ID = "call_" + "x" * 400


def forms_of(html: str) -> dict[str, str]:
    """The card's decision forms: class (or "approve") → action URL."""
    found = {}
    for tag, attrs, _ in elements(html):
        if tag == "form" and attrs.get("action", "").startswith("/runs/"):
            kind = str(attrs.get("class") or "approve")
            found.setdefault(kind, str(attrs["action"]))
            assert attrs.get("hx-post") == attrs["action"]
    return found


def csv_rows(response: Any) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


def approve_on_the_run_page(client: Client, run_id: str, *, htmx: bool = True) -> Any:
    page = client.get(f"/runs/{run_id}/")
    assert page.status_code == 200, page.content[:2000]
    action = forms_of(page.content.decode())["approve"]
    extra = HX if htmx else {}
    response = client.post(action, {"agent": "hostile"}, **extra)
    assert response.status_code in (200, 302), response.content[:2000]
    return response


ODD_IDS = [
    "a/b",
    "/",
    ".",
    "..",
    "call/../../x",
    "a/approve",
    "%2F?#x",
    "call 1",
    LONG_ID,
    "call\x00x",
    "\ud800",
    "tab\tnew\nline",
]


def test_any_tool_call_id_can_be_listed_shown_and_decided(
    hostile: Hostile, reviewer_client: Client, admin_member_client: Client
) -> None:
    for count, tool_call_id in enumerate(ODD_IDS, start=1):
        run = hostile.start(Call("pay", {"target": "bob"}, tool_call_id=tool_call_id))

        assert run.status == "suspended", (tool_call_id, run.error)
        (listed,) = hostile.suspended()[0].tool_calls
        assert listed.tool_call_id == clean_id(tool_call_id) == run.tool_calls[0].tool_call_id
        assert len(listed.tool_call_id) <= MAX_ID_LENGTH
        assert "\x00" not in listed.tool_call_id and listed.tool_call_id.isprintable()
        assert reviewer_client.get("/agents/hostile/").status_code == 200

        approve_on_the_run_page(reviewer_client, run.run_id)

        assert hostile.executed["pay"].count == count, tool_call_id
        entry = AuditEntry.objects.get(run_id=run.run_id)
        assert (entry.tool_call_id, entry.outcome) == (listed.tool_call_id, "completed")
        assert admin_member_client.get("/audit/").status_code == 200
        rows = csv_rows(admin_member_client.get("/audit/export.csv"))
        assert listed.tool_call_id in [row["tool_call_id"].removeprefix("'") for row in rows]


def test_call_urls_survive_browsers_and_proxies() -> None:
    """Each id is one path segment: no raw "/" and no "." or ".." segment a browser would resolve."""
    from django.urls import resolve, reverse

    for tool_call_id in [*ODD_IDS[:8], clean_id(LONG_ID), "call_1:call_2"]:
        url = reverse("approvals:approve", args=["r1", tool_call_id])
        segment = url.removeprefix("/runs/r1/calls/").removesuffix("/approve")
        assert "/" not in segment and segment.strip(".") != "", url
        # What the server sees: the URL decoded once.
        assert resolve(unquote(url)).kwargs == {"run_id": "r1", "tool_call_id": tool_call_id}
    assert (
        reverse("approvals:approve", args=["r1", "call_1:call_2"]) == "/runs/r1/calls/call_1:call_2/approve"
    )


def test_a_mapped_id_is_stable_and_keeps_its_readable_start() -> None:
    mapped = clean_id(LONG_ID)

    assert mapped == clean_id(LONG_ID) == clean_id(mapped)
    assert mapped.startswith("call_xxxx") and len(mapped) <= MAX_ID_LENGTH
    assert clean_id(LONG_ID + "y") != mapped
    assert clean_id("call_ok-1:inner") == "call_ok-1:inner"


def test_the_decline_form_of_a_slashed_id_declines_that_call(
    hostile: Hostile, reviewer_client: Client
) -> None:
    run = hostile.start(Call("pay", {"target": "bob"}, tool_call_id="x/decline"))
    action = forms_of(reviewer_client.get(f"/runs/{run.run_id}/").content.decode())["decline-form"]

    response = reviewer_client.post(action, {"agent": "hostile", "reason": "no"})

    assert response.status_code == 302
    assert hostile.ran == 0
    (entry,) = AuditEntry.objects.all()
    assert (entry.tool_call_id, entry.action, entry.outcome) == ("x/decline", "decline", "completed")


ARGUMENTS = [
    (float("nan"), "NaN"),
    (-1e400, "-Infinity"),
    (math.inf, "Infinity"),
    ([1.5, float("nan"), {"deep": -math.inf}], [1.5, "NaN", {"deep": "-Infinity"}]),
    ("nul\x00and\ud800", "nul\ufffdand\ufffd"),
    ({"key\x00": 10**400}, {"key\ufffd": "1" + "0" * 400}),
]


def test_arguments_that_cannot_be_stored_are_stored_normalised(
    hostile: Hostile, reviewer_client: Client, admin_member_client: Client
) -> None:
    for count, (value, shown) in enumerate(ARGUMENTS, start=1):
        run = hostile.start(Call("pay", {"target": "bob", "data": value}))

        assert run.status == "suspended", run.error
        (listed,) = hostile.suspended()[0].tool_calls
        assert listed.args == {"target": "bob", "data": shown}
        page = reviewer_client.get(f"/runs/{run.run_id}/")
        assert page.status_code == 200
        assert escape(pretty_json({"target": "bob", "data": shown})) in page.content.decode()

        approve_on_the_run_page(reviewer_client, run.run_id, htmx=False)

        assert hostile.executed["pay"].count == count
        entry = AuditEntry.objects.get(run_id=run.run_id)
        assert entry.outcome == "completed" and entry.args == {"target": "bob", "data": shown}
        assert admin_member_client.get("/audit/").status_code == 200
        assert len(csv_rows(admin_member_client.get("/audit/export.csv"))) == count


JSON_ARGS = [
    ('{"target": "bob", "amount": -1e400}', {"target": "bob", "amount": "-Infinity"}),
    ('{"target": "bob", "data": NaN}', {"target": "bob", "data": "NaN"}),
    (
        '{"target": "bob", "data": [' + "7" * 5000 + "]}",
        {"target": "bob", "data": ["<integer of 5000 digits>"]},
    ),
    ('{"target": "bob\\u0000", "data": "\\ud800"}', {"target": "bob\ufffd", "data": "\ufffd"}),
]


def test_json_text_a_model_sends_is_stored_normalised(hostile: Hostile, reviewer_client: Client) -> None:
    for count, (json_args, shown) in enumerate(JSON_ARGS, start=1):
        run = hostile.start(RawCall("pay", json_args))

        assert run.status == "suspended", (json_args[:60], run.error)
        assert hostile.suspended()[0].tool_calls[0].args == shown
        approve_on_the_run_page(reviewer_client, run.run_id)
        assert hostile.executed["pay"].count == count
        assert AuditEntry.objects.get(run_id=run.run_id).outcome == "completed"


def test_non_finite_numbers_in_a_float_parameter_still_reach_the_tool_as_the_model_meant(
    hostile: Hostile, reviewer_client: Client
) -> None:
    run = hostile.start(Call("pay", {"target": "bob", "amount": -1e400}))
    assert hostile.suspended()[0].tool_calls[0].args == {"target": "bob", "amount": "-Infinity"}

    approve_on_the_run_page(reviewer_client, run.run_id)

    assert hostile.executed["pay"].calls[0]["amount"] == -math.inf


def test_deep_arguments_are_cut_at_the_depth_limit(hostile: Hostile, reviewer_client: Client) -> None:
    deep: Any = "bottom"
    for _ in range(200):
        deep = [deep]

    run = hostile.start(Call("pay", {"target": "bob", "data": deep}))

    assert run.status == "suspended", run.error
    assert reviewer_client.get(f"/runs/{run.run_id}/").status_code == 200
    approve_on_the_run_page(reviewer_client, run.run_id)
    assert hostile.executed["pay"].count == 1
    assert AuditEntry.objects.get().outcome == "completed"


def test_a_final_reply_that_cannot_be_stored_is_recorded_normalised(
    hostile: Hostile, reviewer_client: Client, admin_member_client: Client
) -> None:
    for count, text in enumerate(["lone \ud800 surrogate", "nul \x00 byte", "\udfff\x00" * 50], start=1):
        run = hostile.start(Call("pay", {"target": "bob"}), reply=Reply(text))

        approve_on_the_run_page(reviewer_client, run.run_id)

        assert hostile.executed["pay"].count == count
        entry = AuditEntry.objects.get(run_id=run.run_id)
        assert entry.outcome == "completed"
        assert "\ufffd" in entry.outcome_detail
        assert "\x00" not in entry.outcome_detail
        assert admin_member_client.get("/audit/").status_code == 200
        assert reviewer_client.get(f"/runs/{run.run_id}/").status_code == 200


def test_model_text_and_tool_output_that_cannot_be_stored_are_normalised(
    hostile: Hostile, reviewer_client: Client
) -> None:
    run = hostile.start([Call("ask", {"topic": "who\x00\ud800?"}, tool_call_id="c\x00")])

    assert run.status == "suspended", run.error
    (call,) = hostile.suspended()[0].tool_calls
    assert call.suspend_payload == {"topic": "who\ufffd\ufffd?"}
    page = reviewer_client.get(f"/runs/{run.run_id}/")
    assert page.status_code == 200
    assert "who\ufffd\ufffd?" in page.content.decode()


def test_sub_agent_calls_with_long_odd_ids_are_listed_and_decided_on_the_supervisor(
    hostile: Hostile, reviewer_client: Client
) -> None:
    run = hostile.start(
        [Call("wipe", {"disk": "sda"}, tool_call_id="in/" + "a" * 300), Call("wipe", {"disk": "sdb"})],
        agent_id="boss",
    )

    assert run.status == "suspended", run.error
    ids = [c.tool_call_id for c in hostile.suspended("boss")[0].tool_calls]
    assert len(ids) == 2 and all(len(i) <= MAX_ID_LENGTH for i in ids)
    page = reviewer_client.get(f"/runs/{run.run_id}/").content.decode()
    actions = [a["action"] for t, a, _ in elements(page) if t == "form" and a.get("class") is None]
    assert len(actions) == 2
    for action in actions:
        assert reviewer_client.post(action, {"agent": "boss"}, **HX).status_code == 200
    assert [c["disk"] for c in hostile.executed["wipe"].calls] == ["sda", "sdb"]


@pytest.mark.parametrize("store", ["memory", "django"])
def test_every_store_gets_the_same_normal_form(transactional_db: None, store: str) -> None:
    storage: RunStore = InMemoryRunStore() if store == "memory" else DjangoRunStore()

    @tool(requires_approval=True)
    def pay(target: str, data: Any = None) -> str:
        return "paid"

    from tests.support.runtime_helpers import ModelSpy

    model = ModelSpy(Call("pay", {"target": "a\x00", "data": [float("nan")]}, tool_call_id=LONG_ID))
    agent = Agent("solo", model=model.model, tools=[pay])
    Runtime(agents=[agent], storage=storage)

    result = async_to_sync(agent.generate)("go")
    listed = async_to_sync(agent.list_suspended_runs)().runs[0].tool_calls[0]

    assert result.tool_calls[0].tool_call_id == listed.tool_call_id == clean_id(LONG_ID)
    assert listed.args == {"target": "a\ufffd", "data": ["NaN"]}
