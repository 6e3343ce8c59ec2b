"""What a notification says: a subject, a text and an HTML part for mail, a Slack-style JSON body.

Tool names and arguments are model output: the HTML part is a template with autoescaping, the chat
body escapes ``&``, ``<`` and ``>`` as Slack asks (so model output can neither mention ``<!channel>``
nor forge a link), and a subject loses its line breaks. Invisible characters in them (bidi controls,
zero-width marks) are shown as marks, as everywhere (``cards.text.reveal_invisible``). Links open the
run's card after login and decide nothing (the card's buttons are POST forms).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.template.loader import render_to_string
from django.urls import reverse

from agents_runtime.untrusted import reveal_invisible
from approvals import agents
from approvals.models import Notification, NotificationCall
from approvals.notifications import options

_ARGS_CHARS = 160
_SUBJECT_CHARS = 150


@dataclass(frozen=True)
class CallLine:
    tool_name: str
    summary: str
    #: What the call would do (its preview, in one line).
    preview: str
    agent: str
    url: str
    due: str
    escalated_to: str


@dataclass(frozen=True)
class Message:
    subject: str
    text: str
    html: str
    chat: dict[str, Any]


def _summary(args: Any) -> str:
    if args is None:
        return ""
    text = json.dumps(args, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= _ARGS_CHARS else text[: _ARGS_CHARS - 1] + "…"


def _when(moment: datetime | None) -> str:
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _line(call: NotificationCall) -> CallLine:
    # Bidi controls and zero-width characters shown as marks, as on the card (``cards.text``).
    return CallLine(
        tool_name=reveal_invisible(call.tool_name),
        summary=reveal_invisible(_summary(call.args)),
        preview=reveal_invisible(call.preview),
        agent=agents.name_of(call.agent_id),
        url=options.base_url() + reverse("approvals:run", args=[call.run_id]),
        due=_when(call.expires_at),
        escalated_to=call.escalated_to,
    )


def _waits(count: int) -> str:
    return "1 call waits" if count == 1 else f"{count} calls wait"


def headline(notification: Notification, first: CallLine | None, agents_named: list[str]) -> str:
    count = notification.call_count
    where = ", ".join(agents_named) or "your agents"
    if notification.kind == Notification.Kind.REMINDER:
        what = f"{first.tool_name} on {where}" if count == 1 and first else f"{count} calls on {where}"
        return f"Deadline soon: {what} must be decided by {first.due if first else 'its deadline'}"
    if notification.kind == Notification.Kind.ESCALATED:
        group = first.escalated_to if first else ""
        what = f"{first.tool_name} on {where}" if count == 1 and first else f"{count} calls on {where}"
        return f"Escalated to {group}: {what} waits for you"
    if count == 1 and first:
        return f"{first.tool_name} waits for a decision on {where}"
    return f"{_waits(count)} on {where}"


def build(notification: Notification) -> Message:
    """The message of ``notification`` as it stands (the calls that joined it so far)."""
    calls = list(notification.calls.order_by("id")[: options.listed_calls()])
    lines = [_line(c) for c in calls]
    named = {agents.name_of(a) for a in notification.calls.values_list("agent_id", flat=True).distinct()}
    subject_line = headline(notification, lines[0] if lines else None, sorted(named))
    more = max(0, notification.call_count - len(lines))
    inbox = options.base_url() + (
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
        label = slack_escape(line.tool_name)
        detail = slack_escape(line.summary)
        due = f" (due {line.due})" if line.due else ""
        would = f"\n   _Would:_ {slack_escape(line.preview)}" if line.preview else ""
        items.append(f"• <{line.url}|{label}>{' ' + detail if detail else ''}{due}{would}")
    if more:
        items.append(f"…and {more} more: <{inbox_url}|open the inbox>")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{slack_escape(title)}*"}}
    ]
    if items:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(items)[:2900]}})
    return {"text": slack_escape(title), "blocks": blocks}
