"""Template helpers for the dashboard: element ids and nothing that decides anything."""

from __future__ import annotations

import json
from typing import Any

from django import template

from approvals import dom_ids
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


@register.filter
def bulk_key(call_view: Any) -> str:
    """A call's value in the inbox's bulk form: ``[run_id, tool_call_id]`` as JSON (either may hold
    any character, so no separator would do)."""
    return json.dumps([call_view.run_id, call_view.call.tool_call_id])


@register.simple_tag(takes_context=True)
def followed_agents(context: template.Context) -> str:
    """The ids of the agents the user follows (JSON), for the page's notifications."""
    from approvals.models import FollowedAgent

    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return "[]"
    return json.dumps(list(FollowedAgent.objects.filter(user=user).values_list("agent_id", flat=True)))
