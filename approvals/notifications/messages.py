"""What a notification says: a subject, a text and an HTML part for mail, a Slack-style JSON body.

Each call is listed by its title as its card reads ("Refund $890.00 · A-1044", kept when it joined),
and says whether it still waits. Links start with the site's address (``approvals.site``).

Titles and tool names are model output: the HTML part is a template with autoescaping, the chat
body escapes ``&``, ``<`` and ``>`` as Slack asks (so model output can neither mention ``<!channel>``
nor forge a link), and a subject loses its line breaks. Invisible characters in them (bidi controls,
zero-width marks) are shown as marks, as everywhere (``cards.text.reveal_invisible``). Links open the
run's card after login and decide nothing (the card's buttons are POST forms).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.template.loader import render_to_string
from django.urls import reverse

from agents_runtime.untrusted import reveal_invisible
from approvals import agents, site
from approvals.models import Notification, NotificationCall, ParkedCallRecord
from approvals.notifications import options

_SUBJECT_CHARS = 150


@dataclass(frozen=True)
class CallLine:
    title: str
    tool_name: str
    #: What the call would do (its preview, in one line).
    preview: str
    agent: str
    url: str
    due: str
    escalated_to: str
    #: Still undecided as the message is sent (a digest lists what waited, decided since or not).
    waiting: bool = True


@dataclass(frozen=True)
class Message:
    subject: str
    text: str
    html: str
    chat: dict[str, Any]


def _when(moment: datetime | None) -> str:
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _line(call: NotificationCall, base: str, waiting: set[tuple[str, str]]) -> CallLine:
    # Bidi controls and zero-width characters shown as marks, as on the card (``cards.text``).
    return CallLine(
        title=reveal_invisible(call.title or call.tool_name),
        tool_name=reveal_invisible(call.tool_name),
        preview=reveal_invisible(call.preview),
        agent=agents.name_of(call.agent_id),
        url=base + reverse("approvals:run", args=[call.run_id]),
        due=_when(call.expires_at),
        escalated_to=call.escalated_to,
        waiting=(call.run_id, call.tool_call_id) in waiting,
    )


def _still_waiting(calls: list[NotificationCall]) -> set[tuple[str, str]]:
    """Which of ``calls`` are still undecided, as ``(run id, tool call id)``."""
    undecided = ParkedCallRecord.objects.undecided().filter(
        run__run_id__in={c.run_id for c in calls}, tool_call_id__in={c.tool_call_id for c in calls}
    )
    return set(undecided.values_list("run__run_id", "tool_call_id"))


def _waits(count: int) -> str:
    return "1 call waits" if count == 1 else f"{count} calls wait"


def headline(notification: Notification, first: CallLine | None, agents_named: list[str]) -> str:
    count = notification.call_count
    where = ", ".join(agents_named) or "your agents"
    if notification.kind == Notification.Kind.REMINDER:
        what = f"{first.title} on {where}" if count == 1 and first else f"{count} calls on {where}"
        return f"Deadline soon: {what} must be decided by {first.due if first else 'its deadline'}"
    if notification.kind == Notification.Kind.ESCALATED:
        group = first.escalated_to if first else ""
        what = f"{first.title} on {where}" if count == 1 and first else f"{count} calls on {where}"
        return f"Escalated to {group}: {what} waits for you"
    if not notification.agent_id:
        # A digest: what waited over its window, across the user's agents.
        what = first.title if count == 1 and first else f"{count} calls"
        return f"Digest: {what} waited for you on {where}"
    if count == 1 and first:
        return f"{first.title} waits for a decision on {where}"
    return f"{_waits(count)} on {where}"


def build(notification: Notification) -> Message:
    """The message of ``notification`` as it stands (the calls that joined it so far)."""
    calls = list(notification.calls.order_by("id")[: options.listed_calls()])
    base = site.base_url()
    waiting = _still_waiting(calls)
    lines = [_line(c, base, waiting) for c in calls]
    named = {agents.name_of(a) for a in notification.calls.values_list("agent_id", flat=True).distinct()}
    subject_line = headline(notification, lines[0] if lines else None, sorted(named))
    more = max(0, notification.call_count - len(lines))
    inbox = base + (
        reverse("approvals:inbox", args=[notification.agent_id])
        if notification.agent_id
        else reverse("approvals:overview")
    )
    context = {"headline": subject_line, "lines": lines, "more": more, "inbox_url": inbox}
    subject = " ".join(f"[Countersign] {subject_line}".split())[:_SUBJECT_CHARS]
    return Message(
        subject=subject,
        text=render_to_string("approvals/notifications/message.txt", context),
        html=render_to_string("approvals/notifications/message.html", context),
        chat=chat_body(subject_line, lines, more, inbox),
    )


def slack_escape(text: str) -> str:
    """Slack's three control characters as entities (https://api.slack.com/reference/surfaces/formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def chat_body(title: str, lines: list[CallLine], more: int, inbox_url: str) -> dict[str, Any]:
    """A Slack-compatible incoming-webhook body: ``text`` (the fallback) and ``blocks``."""
    items = []
    for line in lines:
        label = slack_escape(line.title)
        agent = f" on {slack_escape(line.agent)}" if line.agent else ""
        due = f" (due {line.due})" if line.due and line.waiting else ""
        decided = "" if line.waiting else " (decided since)"
        would = f"\n   _Would:_ {slack_escape(line.preview)}" if line.preview else ""
        items.append(f"• <{line.url}|{label}>{agent}{due}{decided}{would}")
    if more:
        items.append(f"…and {more} more: <{inbox_url}|open the inbox>")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{slack_escape(title)}*"}}
    ]
    if items:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(items)[:2900]}})
    return {"text": slack_escape(title), "blocks": blocks}
