"""Template helpers for the dashboard: element ids and nothing that decides anything."""

from __future__ import annotations

import functools
import html
import json
import urllib.parse
from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.safestring import SafeData, SafeString, mark_safe

from agents_runtime import Preview, store
from agents_runtime.store import DecisionAction, Verdict
from agents_runtime.untrusted import reveal_invisible
from approvals import ids, queries, times
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
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return "[]"
    return json.dumps(queries.followed_agent_ids(user))


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
@functools.cache
def live_words() -> str:
    """The words of the lines live-notes.js writes on a call (JSON), from the vocabulary (spelled
    once); ``{actor}`` and ``{verdict}`` are filled in by the page. The same on every page: written once."""
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


# -- a call's row: its summary line and, folded, the body fetched when it opens ---------------------
# Written here rather than in run_card.html: an inbox page has fifty rows, and the template engine's
# cost is per variable and per tag. Every value is escaped by ``_e`` as ``{{ value }}`` escapes it,
# and only what is assembled from escaped values and constant markup is marked safe.


def _e(value: object) -> str:
    """``conditional_escape`` (what ``{{ value }}`` writes), without its check for lazy arguments:
    markup already safe as it is, any other value as escaped text."""
    html_of = getattr(value, "__html__", None)
    return str(html_of()) if html_of is not None else html.escape(str(value))


def _visible(value: object) -> str:
    """``{{ value|visible }}``."""
    shown = reveal_invisible(value)
    return shown if isinstance(value, SafeData) else html.escape(shown)


def _deadline_chip(d: Any) -> str:
    inner = ""
    if d.escalated_to:
        inner = f"escalated to {_e(d.escalated_to)}{' · ' if d.expires_at else ''}"
    if d.expires_at:
        left = _e(d.remaining_seconds)
        inner += f'<span class="countdown" data-countdown="{left}">{_e(d.remaining_text)}</span>'
    due = " is-due-soon" if d.due_soon else ""
    return f'<span class="chip chip-deadline{due}" title="Deadline: then {_e(d.then_text)}">{inner}</span>'


def _chips(cv: Any, card: Any, viewer: str) -> str:
    """The row's chips, one a line as the template wrote them (an empty line for each absent)."""
    kind = "badge-approval" if cv.is_approval else "badge-input"
    claim, deadline = cv.claim, cv.deadline
    chips = [
        f'<span class="badge {kind}">{_e(cv.kind_label)}</span>',
        f'<span class="badge badge-quiet via">via {_e(cv.via_agent)}</span>' if cv.via_agent else "",
        '<span class="badge badge-quiet">read-only here</span>' if card.parent_run_id else "",
        '<span class="badge badge-warn" title="An earlier continuation died; these calls wait again">'
        "interrupted</span>"
        if card.interrupted
        else "",
        _deadline_chip(deadline) if deadline else "",
        f'<span class="chip chip-claim" data-claimed-by="{_e(claim.username)}">'
        f"{_e(claimed_line(claim.username))}</span>"
        if claim and claim.username != viewer
        else "",
        "".join(f'<span class="chip chip-risky">{_e(a.label)}: {_e(a.text)}</span>' for a in cv.risky_args),
        f'<span class="chip chip-held">{_visible(cv.held_by)} is deciding (undo window)</span>'
        if cv.held_by
        else "",
    ]
    return "\n        ".join(chips)


def _viewer(context: template.Context) -> str:
    """``{{ user.get_username }}`` ("" without a user, as the template writes a missing variable)."""
    user = context.get("user")
    return str(user.get_username()) if user is not None else ""


def _summary(card: Any, cv: Any, viewer: str) -> str:
    """The row's ``<summary>``: the title, its chips (kind, deadline, claim, risky values...) and
    where the call comes from."""
    meta = f"<code>{_e(cv.call.tool_name)}</code> · {_e(card.agent_name)}"
    if card.thread_id:
        meta += f" · thread <code>{_visible(card.thread_id)}</code>"
    if card.resource_id:
        meta += f" · resource <code>{_visible(card.resource_id)}</code>"
    if card.suspended_at:
        meta += f" · waiting {times.time_element(card.suspended_at, relative=True)}"
    meta += f" · run <code>{_visible(card.run_id)}</code>"
    return (
        '<summary class="call-summary">\n'
        f'      <h3 class="call-title" id="{_e(cv.dom_id)}-title">{_e(cv.title)}</h3>\n'
        '      <span class="call-chips">\n'
        f"        {_chips(cv, card, viewer)}\n"
        "      </span>\n"
        f'      <span class="call-meta">{meta}</span>\n'
        "    </summary>"
    )


@register.simple_tag(takes_context=True)
def call_head(context: template.Context, card: Any, cv: Any) -> SafeString:
    """``{% call_head card cv %}``: a call's ``<section>`` and its row up to the body: the inbox's
    bulk tick (``bulk`` and ``can_decide`` in the context), beside the row rather than in its summary
    (nothing interactive inside a summary; x ticks it from the keyboard), then the row's summary."""
    approval = cv.is_approval
    pick = ""
    if context.get("bulk") and context.get("can_decide") and approval and not card.parent_run_id:
        pick = (
            '<label class="bulk-pick"><input type="checkbox" class="bulk-select" name="call" '
            f'value="{_e(bulk_key(cv))}" form="bulk-form"> Select<span class="visually-hidden"> '
            f"{_e(cv.call.tool_name)} on run {_visible(cv.run_id)}</span></label>"
        )
    dom = _e(cv.dom_id)
    return mark_safe(
        f'<section class="call {"call-approval" if approval else "call-input"}" id="{dom}" '
        f'aria-labelledby="{dom}-title" data-call-id="{_e(cv.call.tool_call_id)}" '
        f'data-tool="{_e(cv.call.tool_name)}">\n'
        "   \n"
        f"   {pick}\n"
        f'   <details class="call-row"{" open" if cv.open else ""}>\n'
        f"    {_summary(card, cv, _viewer(context))}"
    )


@register.simple_tag(takes_context=True)
def waiting_card(context: template.Context, card: Any) -> SafeString:
    """``{% waiting_card card %}``: a card of folded rows only (``RunCard.folded_rows_only``: most of
    a list's cards) as the ``run-card`` partial writes it, byte for byte, without its wrapper's tags
    and tests (``tests/approvals/cards/test_waiting_card.py`` renders both ways)."""
    run_id = _e(card.run_id)
    rows = "".join(
        f"\n  {call_head(context, card, cv)}\n    \n    \n    {folded_body(card, cv)}\n    \n"
        "   </details>\n  </section>\n  "
        for cv in card.calls
    )
    return mark_safe(
        f'<article id="{_e(card.dom_id)}" class="card run-card" data-run-id="{run_id}" '
        f'data-agent-id="{_e(card.agent_id)}">\n  \n'
        '  <p class="gone-note" role="status" hidden>Decided or changed elsewhere: this card updates once'
        " you move on</p>\n  \n"
        f'  <p class="presence" data-presence-run="{run_id}" hidden></p>\n  \n\n  \n\n  \n\n'
        f"  {rows}\n  \n</article>"
    )


@functools.lru_cache(maxsize=64)
def _quoted(value: str) -> str:
    """``{{ value|urlencode }}`` (a page's cards all return to the same page)."""
    return html.escape(urllib.parse.quote(value))


@register.simple_tag
def folded_body(card: Any, cv: Any) -> SafeString:
    """``{% folded_body card cv %}``: a folded row's body, fetched from ``cv.body_url`` when the row
    opens; without JavaScript, the link to the run page."""
    following = _quoted(str(card.next_url))
    return mark_safe(
        f'<div class="call-body call-body-lazy" data-body-key="{_e(cv.body_key)}" '
        f'hx-get="{_e(cv.body_url)}?agent={_quoted(str(card.agent_id))}&amp;next={following}" '
        'hx-trigger="cs:load-body" hx-sync="this:drop" hx-target="this" hx-swap="outerHTML">\n'
        f'    <p class="call-links"><a class="run-link" href="{_e(card.run_url)}?next={following}">'
        f"Open run <code>{_visible(card.run_id)}</code></a>"
        ' <span class="muted loading-note">Loading the call…</span></p>\n'
        "    </div>"
    )
