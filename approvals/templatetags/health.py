"""``{% load health %}``: the queue-health page's filters."""

from __future__ import annotations

from django import template

from approvals import agents
from approvals.health.page import duration as _duration

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    """``{{ row.p50|duration }}``: "45 s", "7.5 min", "2 h"."""
    return _duration(seconds)


@register.filter
def agent_name(agent_id: str) -> str:
    """``{{ row.agent_id|agent_name }}``: the agent's name (its id when it has none)."""
    return agents.name_of(agent_id)
