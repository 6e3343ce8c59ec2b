"""Notifications of calls that wait, through a real SMTP server and a real chat webhook on 127.0.0.1:
one per call or collapsed per burst, digests, off, retries that fail or succeed, links that decide
nothing, reminders before a deadline, escalations, and nothing for whoever may not decide."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents_runtime.store import Deadline
from approvals.models import AuditEntry, Notification, NotificationPreference
from approvals.notifications import remind_due, send_due
from tests.support.notification_sinks import ChatSink, MailSink, parts, wait_for
from tests.support.runtime_fixtures import XSS, DashboardAgents
from tests.support.users import PASSWORD, ensure_groups, make_user

BASE = "https://countersign.example"


def refund(note: str) -> str:
    """The title of the helpdesk's refund call (the card's: ``cards.call.call_title``) with this note."""
    return f"Refund · A-1 · 500 · {note}"


@pytest.fixture
def mail(settings: Any) -> Iterator[MailSink]:
    sink = MailSink()
    settings.MAILERS = sink.settings()
    settings.COUNTERSIGN_BASE_URL = BASE
    settings.NOTIFY_COLLAPSE_SECONDS = 0.3
    settings.NOTIFY_RETRY_SECONDS = [0.2, 0.2]
    yield sink
    sink.stop()


@pytest.fixture
def chat(settings: Any) -> Iterator[ChatSink]:
    # The sink listens on this machine, which chat hooks may not reach unless allowed.
    settings.COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS = True
    sink = ChatSink()
    yield sink
    sink.stop()


def person(username: str, *groups: str, **preference: Any) -> User:
    ensure_groups()
    for name in groups:
        Group.objects.get_or_create(name=name)
    user = make_user(username, *groups)
    user.email = f"{username}@example.com"
    user.save()
    # Each call, as chosen on the Notifications page (who never chose gets a daily digest instead:
    # ``person(..., chosen=False)``).
    if preference.pop("chosen", True):
        NotificationPreference.objects.create(user=user, **{"mode": "each", **preference})
    return user


def settled() -> bool:
    return not Notification.objects.filter(status__in=["pending", "sending"]).exists()


def end_windows() -> int:
    """As if every open message's collecting window had ended: send them now."""
    Notification.objects.filter(status="pending").update(next_attempt_at=timezone.now())
    return send_due()


def test_each_call_makes_one_message_to_each_decider_and_nobody_else(
    agents: DashboardAgents, mail: MailSink
) -> None:
    person("rita", "Reviewers")
    person("dora", "Admins")
    person("vic", "agent:helpdesk")  # sees the agent, may not decide it
    person("nina")  # in no group
    person("bo", "Reviewers", "agent:boss")  # designated for another agent
    gone = person("olga", "Reviewers")
    gone.is_active = False
    gone.save()

    first = agents.start("helpdesk", "refund first")
    wait_for(lambda: len(mail.messages) == 2)
    time.sleep(0.5)  # past the collapse window: the next call is a message of its own
    second = agents.start("helpdesk", "refund second")
    wait_for(lambda: len(mail.messages) == 4)
    wait_for(settled)

    assert sorted(str(m["To"]) for m in mail.messages) == ["dora@example.com"] * 2 + ["rita@example.com"] * 2
    one, two = mail.to("rita@example.com")
    assert one["Subject"] == f"[Countersign] {refund('first')} waits for a decision on Help desk"
    assert str(one["From"]) == "countersign@localhost"
    for message, run in ((one, first), (two, second)):
        text, html = parts(message)
        link = f"{BASE}/runs/{run.run_id}/"
        assert link in text and f'href="{link}"' in html
        assert run.tool_calls[0].tool_call_id not in text  # (ids stay in the link)
    assert "first" in parts(one)[0] and "second" in parts(two)[0]
    # Each call by its title, not its arguments' JSON.
    assert f"- {refund('first')} on Help desk" in parts(one)[0]
    assert f">{refund('first')}</a> on Help desk" in parts(one)[1]
    assert '"order_id"' not in parts(one)[0] and "order_id" not in parts(one)[1]
    assert Notification.objects.filter(status="sent", call_count=1).count() == 4
    assert not Notification.objects.exclude(recipient__username__in=["rita", "dora"]).exists()


def test_a_burst_of_parked_calls_is_one_message_with_the_count(
    agents: DashboardAgents, mail: MailSink, settings: Any
) -> None:
    settings.NOTIFY_COLLAPSE_SECONDS = 60
    person("rita", "Reviewers")
    runs = [agents.start("helpdesk", f"refund burst {i}") for i in range(50)]

    [open_] = Notification.objects.all()
    assert (open_.status, open_.call_count, open_.calls.count(), mail.messages) == ("pending", 50, 50, [])
    assert end_windows() == 1

    [message] = mail.messages
    assert message["Subject"] == "[Countersign] 50 calls wait on Help desk"
    text, html = parts(message)
    listed = [r for r in runs if f"{BASE}/runs/{r.run_id}/" in text]
    assert listed == runs[:5]  # the first few, then the rest counted
    assert "...and 45 more: " + BASE + reverse("approvals:inbox", args=["helpdesk"]) in text
    assert "45 more" in html and html.count("<li>") == 5


def test_calls_parked_at_once_from_several_threads_still_make_one_message(
    agents: DashboardAgents, mail: MailSink, settings: Any
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from django.db import close_old_connections

    settings.NOTIFY_COLLAPSE_SECONDS = 60
    person("rita", "Reviewers")
    person("rob", "Reviewers")

    def park(i: int) -> None:
        try:
            agents.start("helpdesk", f"refund racing {i}")
        finally:
            close_old_connections()

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(park, range(12)))

    opened = Notification.objects.order_by("recipient__username")
    assert [(n.recipient.username, n.call_count, n.calls.count()) for n in opened] == [
        ("rita", 12, 12),
        ("rob", 12, 12),
    ]
    assert end_windows() == 2
    assert (
        sorted(str(m["Subject"]) for m in mail.messages) == ["[Countersign] 12 calls wait on Help desk"] * 2
    )


def test_a_digest_collects_every_agent_over_the_users_window(agents: DashboardAgents, mail: MailSink) -> None:
    person("rita", "Reviewers", mode="digest", digest_minutes=15)
    began = timezone.now()
    agents.start("helpdesk", "refund a")
    agents.start("helpdesk", "schedule")
    agents.start("boss", "wipe it")  # the worker's call: told once, on its supervisor's run
    time.sleep(0.5)  # (well past the collapse window: a digest does not go out with it)

    [digest] = Notification.objects.all()
    assert (digest.agent_id, digest.call_count, digest.status, mail.messages) == ("", 3, "pending", [])
    window = (digest.next_attempt_at - began).total_seconds()
    assert 15 * 60 - 5 < window <= 15 * 60 + 5
    Notification.objects.update(next_attempt_at=timezone.now())  # the window ended
    out = StringIO()
    call_command("send_notifications", stdout=out)
    assert out.getvalue() == "1 due notifications attempted\n"
    [message] = mail.messages
    assert message["Subject"] == "[Countersign] Digest: 3 calls waited for you on Boss, Help desk"
    assert parts(message)[0].count(BASE + "/runs/") == 3


def test_who_never_chose_gets_one_daily_digest_of_what_waited_and_who_chose_each_call_keeps_it(
    agents: DashboardAgents, mail: MailSink
) -> None:
    person("rita", "Reviewers", chosen=False)
    person("rob", "Reviewers")  # chose "each call"
    began = timezone.now()
    first = agents.start("helpdesk", "refund a")
    time.sleep(0.5)  # past the collapse window: rob's first message goes, rita's digest does not
    second = agents.start("boss", "wipe it")
    wait_for(lambda: len(mail.to("rob@example.com")) == 2)

    assert mail.to("rita@example.com") == []
    [digest] = Notification.objects.filter(recipient__username="rita")
    assert (digest.agent_id, digest.call_count, digest.status) == ("", 2, "pending")
    assert abs((digest.next_attempt_at - began).total_seconds() - 24 * 3600) < 60
    # The first is decided meanwhile: the digest still lists it, as decided since.
    async_to_sync(agents.agent("helpdesk").approve_tool_call)(
        run_id=first.run_id, tool_call_id=first.tool_calls[0].tool_call_id, actor="rob"
    )
    assert end_windows() == 1

    [message] = mail.to("rita@example.com")
    assert message["Subject"] == "[Countersign] Digest: 2 calls waited for you on Boss, Help desk"
    text = parts(message)[0]
    assert f"- {refund('a')} on Help desk (decided since)" in text
    assert f"{BASE}/runs/{first.run_id}/" in text and f"{BASE}/runs/{second.run_id}/" in text
    # The next call opens the next day's digest.
    agents.start("helpdesk", "refund c")
    assert Notification.objects.filter(recipient__username="rita", status="pending").count() == 1


def test_a_digest_due_while_the_server_was_down_goes_out_from_the_sweep(
    agents: DashboardAgents, mail: MailSink
) -> None:
    """Its state is its row (no thread sleeps for a day): a server started after its time sends it."""
    from approvals.tasks import Sweeper

    person("rita", "Reviewers", chosen=False)
    agents.start("helpdesk", "refund while away")
    [digest] = Notification.objects.all()
    # No thread waits a day to send it (one per reviewer, gone with a restart anyway).
    assert f"countersign-notification-{digest.pk}" not in {t.name for t in threading.enumerate()}
    Notification.objects.update(next_attempt_at=timezone.now() - timedelta(minutes=5))  # due long ago
    time.sleep(0.5)
    assert mail.messages == []  # nothing in this process was waiting to send it

    sweeper = Sweeper(interval=0.05)  # a server starting: its first sweep looks for orphans
    sweeper.start()
    try:
        wait_for(lambda: len(mail.messages) == 1)
        # The mail server has the message before the sender marks the row: wait for the row.
        wait_for(lambda: Notification.objects.get(pk=digest.pk).status == "sent")
    finally:
        sweeper.stop()


def test_off_sends_nothing(agents: DashboardAgents, mail: MailSink) -> None:
    person("rita", "Reviewers", mode="off")
    person("rob", "Reviewers")
    agents.start("helpdesk", "refund quiet")
    wait_for(lambda: len(mail.messages) == 1)
    wait_for(settled)
    assert [str(m["To"]) for m in mail.messages] == ["rob@example.com"]
    assert not Notification.objects.filter(recipient__username="rita").exists()


def test_a_refusing_mail_server_is_retried_then_recorded_as_failed_and_others_get_theirs(
    agents: DashboardAgents, mail: MailSink
) -> None:
    person("rita", "Reviewers")
    person("rob", "Reviewers")
    mail.refuse_to = {"rita@example.com"}

    began = time.monotonic()
    run = agents.start("helpdesk", "refund refused")
    assert time.monotonic() - began < 1.0  # the run parked without waiting on any mail
    wait_for(settled)

    failed = Notification.objects.get(status="failed")
    sent = Notification.objects.get(status="sent")
    assert (failed.recipient.username, failed.attempts, sent.attempts) == ("rita", 3, 1)
    assert mail.refused == ["rita@example.com"] * 3
    assert "554" in failed.last_error and "Not today" in failed.last_error
    assert failed.calls.get().run_id == run.run_id
    assert [str(m["To"]) for m in mail.messages] == ["rob@example.com"]
    assert agents.suspended("helpdesk")[0].run_id == run.run_id


def test_an_unreachable_mail_server_fails_after_its_retries_without_slowing_the_park(
    agents: DashboardAgents, mail: MailSink, settings: Any
) -> None:
    from tests.support.notification_sinks import free_port

    settings.MAILERS = MailSink.mailers(free_port())  # nothing listens: connection refused
    person("rita", "Reviewers")
    began = time.monotonic()
    agents.start("helpdesk", "refund nowhere")
    assert time.monotonic() - began < 1.0
    wait_for(settled)
    failed = Notification.objects.get()
    assert (failed.status, failed.attempts) == ("failed", 3)
    assert "Connection" in failed.last_error and "refused" in failed.last_error.lower()


def test_a_slow_mail_server_does_not_slow_the_park(
    agents: DashboardAgents, mail: MailSink, settings: Any
) -> None:
    settings.NOTIFY_COLLAPSE_SECONDS = 0
    person("rita", "Reviewers")
    mail.slow_seconds = 2.0
    began = time.monotonic()
    agents.start("helpdesk", "refund slow mail")
    assert time.monotonic() - began < 1.0
    wait_for(lambda: len(mail.messages) == 1)


def test_chat_gets_escaped_json_and_a_500_is_retried(
    agents: DashboardAgents, mail: MailSink, chat: ChatSink
) -> None:
    person("rita", "Reviewers", email=False, chat_url=chat.url)
    chat.plan = [500]
    run = agents.start("helpdesk", f"refund & <!channel> {XSS}")
    wait_for(settled)

    assert chat.answers == [500, 200] and mail.messages == []
    sent = Notification.objects.get()
    assert (sent.channel, sent.status, sent.attempts, sent.last_error) == ("chat", "sent", 2, "")
    [body] = chat.received
    listed = body["blocks"][1]["text"]["text"]
    assert listed.startswith(f"• <{BASE}/runs/{run.run_id}/|Refund · A-1 · 500 · ")
    assert "&lt;script&gt;" in listed and "&amp; &lt;!channel&gt;" in listed
    assert "<script>" not in listed and "<!channel>" not in listed
    assert "&lt;script&gt;" in body["text"] and "<!channel>" not in body["text"]


def test_html_mail_escapes_model_output(agents: DashboardAgents, mail: MailSink) -> None:
    person("rita", "Reviewers")
    agents.start("helpdesk", f"refund {XSS}")
    wait_for(lambda: len(mail.messages) == 1)
    text, html = parts(mail.messages[0])
    assert "<script>alert(1)</script>" in text  # plain text is not markup
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_the_link_opens_the_card_after_login_and_decides_nothing(
    agents: DashboardAgents, mail: MailSink, client_for: Callable[[User], Client]
) -> None:
    rita = person("rita", "Reviewers")
    run = agents.start("helpdesk", "refund look only")
    wait_for(lambda: len(mail.messages) == 1)
    link = f"{BASE}/runs/{run.run_id}/"
    path = link.removeprefix(BASE)
    assert f'href="{link}"' in parts(mail.messages[0])[1]

    # A mail scanner (or anyone) following it: the login page, nothing else.
    browser = Client()
    anonymous = browser.get(path)
    assert anonymous.status_code == 302
    login = anonymous["Location"]
    assert login.startswith(reverse("login")) and "next=" in login
    assert browser.get(login).status_code == 200
    # Signing in there goes on to the card, whose buttons are forms that post.
    signed_in = browser.post(login, {"username": "rita", "password": PASSWORD}, follow=True)
    assert signed_in.redirect_chain[-1][0] == path and signed_in.status_code == 200
    content = signed_in.content.decode()
    assert "refund" in content and 'method="post"' in content
    for _ in range(3):
        assert client_for(rita).get(path).status_code == 200

    assert not AuditEntry.objects.filter(run_id=run.run_id).exists()
    [waiting] = agents.suspended("helpdesk")
    assert waiting.run_id == run.run_id and agents.executed["refund"].calls == []


def test_a_reminder_goes_out_once_before_the_deadline(
    agents: DashboardAgents, mail: MailSink, settings: Any
) -> None:
    settings.NOTIFY_REMINDER_BEFORE_SECONDS = 3600
    person("rita", "Reviewers")
    helpdesk = agents.agent("helpdesk")
    run = async_to_sync(helpdesk.generate)("refund by tonight", deadline=timedelta(hours=2))
    async_to_sync(helpdesk.generate)("refund soon anyway", deadline=timedelta(minutes=30))
    wait_for(lambda: len(mail.messages) == 1)  # "2 calls wait"
    wait_for(settled)

    assert remind_due() == 0  # not yet: more than an hour left
    later = timezone.now() + timedelta(minutes=61)
    # Due: only the call that parked more than an hour before its deadline (the other one's
    # parked message said it all).
    assert remind_due(later) == 1
    assert remind_due(later) == 0 and remind_due(later + timedelta(minutes=1)) == 0
    wait_for(lambda: len(mail.messages) == 2)
    wait_for(settled)

    reminder = mail.messages[-1]
    assert str(reminder["Subject"]).startswith(
        f"[Countersign] Deadline soon: {refund('by tonight')} on Help desk must be decided by"
    )
    assert f"{BASE}/runs/{run.run_id}/" in parts(reminder)[0]
    assert Notification.objects.filter(kind="reminder").count() == 1


def test_the_sweep_sends_the_reminder_before_the_call_expires(
    agents: DashboardAgents, mail: MailSink, settings: Any
) -> None:
    from approvals.tasks import Sweeper

    settings.NOTIFY_REMINDER_BEFORE_SECONDS = 2
    settings.NOTIFY_COLLAPSE_SECONDS = 0
    person("rita", "Reviewers")
    run = async_to_sync(agents.agent("helpdesk").generate)("refund tight", deadline=timedelta(seconds=3))
    sweeper = Sweeper(interval=0.05)
    sweeper.start()
    try:
        wait_for(lambda: len(mail.messages) == 2)
        reminded_at = datetime.now(UTC)
        wait_for(lambda: AuditEntry.objects.filter(run_id=run.run_id, action="expire").exists())
    finally:
        sweeper.stop()
    assert run.tool_calls[0].expires_at is not None and reminded_at < run.tool_calls[0].expires_at
    # (Each goes on a thread of its own: on a loaded machine either may arrive first.)
    assert sorted(str(m["Subject"]).split(":")[0] for m in mail.messages) == [
        "[Countersign] Deadline soon",
        f"[Countersign] {refund('tight')} waits for a decision on Help desk",
    ]


def test_an_escalation_tells_everyone_who_can_act_on_it(agents: DashboardAgents, mail: MailSink) -> None:
    person("rita", "Reviewers")  # decided it all along: told again that its deadline passed
    person("leo", "leads")  # (the group holds no permission: being in it is enough)
    person("wes", "leads")
    User.objects.filter(username="wes").update(is_active=False)
    person("walt", "watchers")  # (not the group it moved to)
    person("otto", "Auditors")  # reads everything, acts on nothing
    helpdesk = agents.agent("helpdesk")
    deadline = Deadline(timedelta(minutes=5), "escalate", escalate_to="leads")
    run = async_to_sync(helpdesk.generate)("refund escalate me", deadline=deadline)
    wait_for(lambda: len(mail.messages) == 1)  # rita's: leo does not decide helpdesk's calls yet

    assert async_to_sync(agents.runtime.expire_due)(datetime.now(UTC) + timedelta(minutes=6)) == 1
    wait_for(lambda: len(mail.messages) == 3)
    wait_for(settled)

    escalated = mail.to("leo@example.com")
    assert len(escalated) == 1
    expected = f"[Countersign] Escalated to leads: {refund('escalate me')} on Help desk waits for you"
    assert escalated[0]["Subject"] == expected
    assert f"{BASE}/runs/{run.run_id}/" in parts(escalated[0])[0]
    assert [str(m["Subject"]).split(":")[0] for m in mail.to("rita@example.com")] == [
        f"[Countersign] {refund('escalate me')} waits for a decision on Help desk",
        "[Countersign] Escalated to leads",
    ]
    told = sorted(str(m["To"]) for m in mail.messages)
    assert told == ["leo@example.com", "rita@example.com", "rita@example.com"]
    assert Notification.objects.filter(kind="escalated").count() == 2


def test_a_chat_hook_on_this_machine_is_refused_unless_allowed(
    agents: DashboardAgents, mail: MailSink, chat: ChatSink, settings: Any
) -> None:
    settings.COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS = False
    settings.NOTIFY_RETRY_SECONDS = []
    person("rita", "Reviewers", email=False, chat_url=chat.url)

    agents.start("helpdesk", "refund please")
    wait_for(settled)

    assert chat.answers == []
    refused = Notification.objects.get()
    assert refused.status == "failed" and "private network" in refused.last_error


def test_a_redirect_from_a_chat_hook_is_not_followed(
    agents: DashboardAgents, mail: MailSink, chat: ChatSink
) -> None:
    elsewhere = ChatSink()
    try:
        chat.plan = [302]
        chat.redirect_to = elsewhere.url
        person("rita", "Reviewers", email=False, chat_url=chat.url)

        agents.start("helpdesk", "refund please")
        wait_for(lambda: chat.answers[:1] == [302])
        time.sleep(0.3)

        assert elsewhere.answers == []
        assert Notification.objects.get().last_error in {"HTTP 302", ""}
    finally:
        elsewhere.stop()


def test_a_digest_lists_only_the_calls_its_recipient_may_still_decide_when_it_goes_out(
    agents: DashboardAgents, mail: MailSink
) -> None:
    """A digest collects for up to a day: rights taken away meanwhile (an agent, the account) take
    the calls they covered out of it, and a digest left with none is not sent."""
    rita = person("rita", "Reviewers", chosen=False)  # never chose: a daily digest
    ed = person("ed", "Reviewers", chosen=False)
    agents.start("helpdesk", "refund secret-order-note")
    assert Notification.objects.filter(recipient=rita, status="pending", call_count=1).exists()
    Group.objects.get_or_create(name="agent:boss")
    rita.groups.add(Group.objects.get(name="agent:boss"))  # she reviews boss only from now on
    ed.is_active = False  # ed left
    ed.save()

    end_windows()

    for who in ("rita@example.com", "ed@example.com"):
        assert not any("secret-order-note" in parts(m)[0] for m in mail.to(who)), who
    assert Notification.objects.get(recipient=rita).call_count == 0
