"""Ids where the web puts them: element ids (one helper, safe for ids and CSS selectors) and links."""

from __future__ import annotations

import re

import pytest
from django.template import Context, Template
from django.urls import reverse

from approvals.ids import call_block_id, dom_id, id_url, run_card_id


def test_plain_run_ids_stay_as_they_are() -> None:
    assert run_card_id("3f2a9c_run-1") == "run-3f2a9c_run-1"


def test_other_characters_become_css_safe_and_distinct() -> None:
    ids = {
        call_block_id("r1", "call_1:call_2"),
        call_block_id("r1", "call_1.call_2"),
        call_block_id("r1", "a b"),
    }

    assert len(ids) == 3
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in ids)
    assert call_block_id("r1", "call_1:call_2") == "call-r1-call_1_x3a_call_2"


def test_template_tag_and_filter_use_the_same_helper() -> None:
    html = Template('{% load countersign %}{% dom_id "call" run call %} {{ run|run_card_id }}').render(
        Context({"run": "r:1", "call": "c:2"})
    )

    assert html == f"{dom_id('call', 'r:1', 'c:2')} {run_card_id('r:1')}"


@pytest.mark.parametrize(
    ("name", "ids"),
    [
        ("approvals:run", ["0ece8c17f450c59c23050c13d7f4d36a"]),
        ("approvals:call", ["run-1_a", "call_abc-1"]),
        ("approvals:approve", ["run1", "toolu_01ABC"]),
        ("approvals:decline", ["run1", "sub:inner/../x y%?#"]),
        ("approvals:resume", ["run 1", ".."]),
        ("approvals:claim", ["r\u00e9n", "c"]),
        ("approvals:extend_deadline", ["run1", "c" * 300]),
    ],
)
def test_id_url_is_reverse(name: str, ids: list[str]) -> None:
    assert id_url(name, *ids) == reverse(name, args=ids)
    assert id_url(name, *ids) == reverse(name, args=ids)  # the second time from the URL's shape
