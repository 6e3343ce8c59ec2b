"""A notification says what the call would do: its preview in one line, in mail (text and HTML) and chat."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents_runtime import Runtime
from approvals import agents as served
from tests.approvals.cards.test_previews import hostile_preview, install, start, support_agent, wirer
from tests.approvals.notifications.test_notifications import (  # noqa: F401 - its fixtures
    chat,
    mail,
    person,
    settled,
)
from tests.support.notification_sinks import ChatSink, MailSink, parts, wait_for


@pytest.fixture
def desk(transactional_db: None) -> Iterator[Runtime]:
    previous = served.runtime()
    yield install(support_agent(), wirer())
    served.install(previous)


def test_mail_and_chat_say_what_a_refund_would_do(
    desk: Runtime,
    mail: MailSink,  # noqa: F811 (the fixture)
    chat: ChatSink,  # noqa: F811
) -> None:
    person("rita", "Reviewers")
    person("carl", "Reviewers", email=False, chat_url=chat.url)
    start(desk, "support", "Please refund $890.00 on order A-1044")
    wait_for(lambda: len(mail.messages) == 1 and len(chat.received) == 1)
    wait_for(settled)

    text, html = parts(mail.messages[0])
    assert "Would: $890.00 goes back to sam@example.com for order A-1044." in text
    assert "Would: $890.00 goes back to sam@example.com for order A-1044." in html
    assert "_Would:_ $890.00 goes back to sam@example.com" in chat.received[0]["blocks"][1]["text"]["text"]


def test_a_previews_text_is_escaped_in_html_mail_and_chat(
    desk: Runtime,
    mail: MailSink,  # noqa: F811 (the fixture)
    chat: ChatSink,  # noqa: F811
) -> None:
    assert hostile_preview({}).sentence.startswith("<script>")
    person("rita", "Reviewers")
    person("carl", "Reviewers", email=False, chat_url=chat.url)
    start(desk, "wirer", "wire it")
    wait_for(lambda: len(mail.messages) == 1 and len(chat.received) == 1)
    wait_for(settled)

    _, html = parts(mail.messages[0])
    listed = chat.received[0]["blocks"][1]["text"]["text"]
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; pays" in html
    assert "<script>" not in listed and "&lt;script&gt;alert(1)&lt;/script&gt; pays" in listed
    assert "U+202E" in html
