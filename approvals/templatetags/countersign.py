"""Template helpers for the dashboard: element ids and nothing that decides anything."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from agents_runtime import Preview, store
from agents_runtime.store import DecisionAction, Verdict
from agents_runtime.untrusted import reveal_invisible
from approvals import ids, times
from approvals.cards.text import compact_json

register = template.Library()


@register.simple_tag
def dom_id(prefix: str, *parts: object) -> str:
    """``{% dom_id "run" run.run_id %}`` → ``run-<safe run id>`` (see ``approvals.ids``)."""
    return ids.dom_id(prefix, *parts)


@register.filter
def run_card_id(run_id: str) -> str:
    return ids.run_card_id(run_id)


@register.filter
def as_json(value: object) -> str:
    """Compact JSON text (escaped by the template like any other text: it may be model output)."""
    return reveal_invisible(compact_json(value))


# Text with its invisible characters (bidi controls, zero-width marks) shown as visible marks, as the
# argument view shows them: what a page displays of ids, reasons, names and addresses. The rule itself,
# registered as it is (text already escaped, as ``join`` leaves it, stays safe).
register.filter("visible", reveal_invisible, is_safe=True)


@register.filter
def as_preview(stored: object) -> Preview | None:
    """A stored preview (its JSON form: an audit row's) as ``partials/preview.html`` shows it."""
    return Preview.from_json(stored)


@register.simple_tag
def live_socket_path() -> str:
    """The live-updates websocket's path, from the routing that serves it (``/ws/live/``)."""
    from approvals.live.routing import LIVE_PATH

    return "/" + LIVE_PATH


@register.filter
def bulk_key(call_view: Any) -> str:
    """A call's value in the inbox's bulk form: ``[run_id, tool_call_id]`` as JSON (either may hold
    any character, so no separator would do)."""
    return json.dumps([call_view.run_id, call_view.call.tool_call_id])


@register.filter
def approval_block(call_view: Any, user: Any) -> str:
    """Why this user is not offered Approve on the call ("" when they are): ``CallView.approval_block``."""
    return str(call_view.approval_block(user.get_username())) if user.is_authenticated else ""


@register.simple_tag(takes_context=True)
def followed_agents(context: template.Context) -> str:
    """The ids of the agents the user follows (JSON), for the page's notifications."""
    from approvals.models import FollowedAgent

    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return "[]"
    return json.dumps(list(FollowedAgent.objects.filter(user=user).values_list("agent_id", flat=True)))


@register.simple_tag
def timestamp(moment: datetime | None, relative: bool = False) -> str:
    """``{% timestamp moment %}``: ``<time>`` in the viewer's zone, UTC in its title
    (``approvals.times``); ``relative=True`` for "3 min" that keeps ticking."""
    return times.time_element(moment, relative=relative)


@register.simple_tag(takes_context=True)
def time_zone_options(context: template.Context) -> str:
    """The profile menu's time zone ``<option>``s, the viewer's choice selected."""
    request = context.get("request")
    return times.zone_options(times.chosen_zone_name(request.COOKIES if request is not None else {}))


@register.simple_tag
def current_time_zone() -> str:
    """The name of the zone this request's times are shown in (``America/New_York``)."""
    return timezone.get_current_timezone_name()


@register.filter
def zone_label(name: str) -> str:
    return times.zone_label(name)


@register.simple_tag(takes_context=True)
def time_zone_source(context: template.Context) -> str:
    """Where this request's zone came from: ``chosen`` (profile menu), ``browser`` or ``default``."""
    request = context.get("request")
    cookies = request.COOKIES if request is not None else {}
    if times.chosen_zone_name(cookies):
        return "chosen"
    return "browser" if times.zone(cookies.get(times.BROWSER_ZONE_COOKIE)) else "default"


@register.filter
def claimed_line(holder: str) -> str:
    """ "alice is on this call" (the name's invisible characters shown)."""
    return store.claimed_line(reveal_invisible(holder))


@register.simple_tag
def live_words() -> str:
    """The words of the lines live-notes.js writes on a call (JSON), from the vocabulary (spelled
    once); ``{actor}`` and ``{verdict}`` are filled in by the page."""
    decisions = (DecisionAction.APPROVE, DecisionAction.DECLINE, DecisionAction.RESUME)
    verdicts = {action.value: Verdict.of(action).label for action in decisions}
    verdicts["approve_edited"] = Verdict.APPROVED_WITH_EDITS.label
    words = {
        "verdicts": verdicts,
        "decided": store.decided_by_line("{verdict}", "{actor}"),
        "deadline_passed": {
            then: store.deadline_passed_line(then) for then in ("decline", "approve", "escalate")
        },
        # An expiry whose record could not be read: what is known, and no more.
        "deadline_passed_unknown": "Deadline passed",
        "extended": store.extended_line("{actor}"),
        "claimed": store.claimed_line("{actor}"),
        "released": store.released_line("{actor}"),
        "someone": "another reviewer",
    }
    return json.dumps(words)


@register.inclusion_tag("approvals/partials/args_diff.html")
def args_diff(decision: Any) -> dict[str, Any]:
    """``{% args_diff d %}``: an edited decision's arguments against the model's, field by field
    (``cards.diff``); nothing for a decision without edits."""
    from approvals.cards.diff import decision_diff

    return {"diff": decision_diff(decision)}
