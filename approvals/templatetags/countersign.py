"""Template helpers for the dashboard: element ids and nothing that decides anything."""

from __future__ import annotations

from datetime import datetime

from django import template

from approvals import dom_ids, times
from approvals.cards import compact_json
from approvals.display import reveal_invisible

register = template.Library()


@register.simple_tag
def dom_id(prefix: str, *parts: object) -> str:
    """``{% dom_id "run" run.run_id %}`` → ``run-<safe run id>`` (see ``approvals.dom_ids``)."""
    return dom_ids.dom_id(prefix, *parts)


@register.filter
def run_card_id(run_id: str) -> str:
    return dom_ids.run_card_id(run_id)


@register.filter
def as_json(value: object) -> str:
    """Compact JSON text (escaped by the template like any other text: it may be model output)."""
    return reveal_invisible(compact_json(value))


@register.simple_tag
def live_socket_path() -> str:
    """The live-updates websocket's path, from the routing that serves it (``/ws/live/``)."""
    from approvals.routing import LIVE_PATH

    return "/" + LIVE_PATH


@register.simple_tag
def timestamp(moment: datetime | None, relative: bool = False) -> str:
    """``{% timestamp moment %}``: ``<time>`` in the viewer's zone, UTC in its title (``approvals.times``);
    ``relative=True`` for "3 min" that keeps ticking."""
    return times.time_element(moment, relative=relative)
