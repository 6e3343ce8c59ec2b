"""Shared template pieces live in one partials file each, and every page that shows one includes it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[3] / "approvals" / "templates" / "approvals"

#: partial -> (markup only it may hold, the pages that show it)
SHARED = {
    "run_card": ('class="card run-card', ["inbox.html", "run.html", "queue.html"]),
    "pager": ('class="pager"', ["inbox.html", "audit.html", "queue.html"]),
    "error_card": ("These filters cannot be used", ["inbox.html", "audit.html", "queue.html"]),
    "filter_fields": ("not field.is_hidden", ["partials/filter_panel.html"]),
    "filter_panel": ('class="filter-panel"', ["inbox.html", "audit.html", "queue.html"]),
    "date_presets": ("{% for p in presets %}", ["audit.html", "queue.html"]),
}


@pytest.mark.parametrize("name", SHARED)
def test_a_shared_piece_is_written_once_and_included_by_every_page_that_shows_it(name: str) -> None:
    marker, pages = SHARED[name]
    partial = f"partials/{name}.html"
    holders = sorted(
        str(path.relative_to(TEMPLATES)) for path in TEMPLATES.rglob("*.html") if marker in path.read_text()
    )
    assert holders == [partial]
    for page in pages:
        # The file, or one of its partials (``run_card.html#run-card``: the card alone, in a loop).
        included = re.search(
            f'{{% include "approvals/{re.escape(partial)}(#[a-z-]+)?"', (TEMPLATES / page).read_text()
        )
        assert included, page
