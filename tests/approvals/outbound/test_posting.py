"""Webhook endpoints and chat hooks may not point at this machine, its network or a cloud's metadata
service unless ``COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS`` says so: refused when saved, and refused when sent
to once the name is resolved, the connection going to the very address that was checked."""

from __future__ import annotations

import base64
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from approvals.models import WebhookDelivery, WebhookEndpoint
from approvals.notifications.preferences import check_chat_url
from approvals.outbound import posting as outbound
from approvals.webhooks.sending import OUTBOX

pytestmark = pytest.mark.django_db


class Receiver:
    """A local HTTP server that records the Host header of each POST."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                receiver.hosts.append(self.headers["Host"])
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.server.shutdown()
    server.server.server_close()


INTERNAL = [
    "http://127.0.0.1:8000/hook",
    "http://localhost/hook",
    "https://169.254.169.254/latest/meta-data/",
    "http://10.0.0.5/hook",
    "http://192.168.1.20/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://0.0.0.0/hook",
]
#: Other spellings of 127.0.0.1 that resolvers accept (Django's URL field already refuses them as URLs).
ODD_SPELLINGS = ["http://2130706433/hook", "http://0x7f.1/hook", "http://127.1/hook", "http://017700000001/"]


def _add_in_admin(admin_member: User, url: str) -> Any:
    client = Client()
    client.force_login(admin_member)
    return client.post(
        "/admin/approvals/webhookendpoint/add/",
        {
            "url": url,
            "description": "",
            "events": '["run.failed"]',
            "agents": "[]",
            "active": "on",
            "secret": "whsec_" + base64.b64encode(b"k" * 32).decode(),
        },
    )


@pytest.mark.parametrize("url", INTERNAL)
def test_an_endpoint_on_this_machine_or_a_private_network_is_refused_when_it_is_added(
    admin_member: User, url: str
) -> None:
    refused = _add_in_admin(admin_member, url)

    assert refused.status_code == 200
    assert (
        "may not point at this machine, a private network or a link-local address" in refused.content.decode()
    )
    assert "COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS" in refused.content.decode()
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize("url", ODD_SPELLINGS)
def test_other_spellings_of_a_loopback_address_are_refused_too(url: str) -> None:
    assert "may not point at this machine" in outbound.refused_as_typed(url)


def test_internal_endpoints_are_accepted_when_the_setting_allows_them(
    admin_member: User, settings: Any
) -> None:
    assert _add_in_admin(admin_member, "https://hooks.example.com/in").status_code == 302
    settings.COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS = True
    assert _add_in_admin(admin_member, "http://10.0.0.5/hook").status_code == 302
    assert WebhookEndpoint.objects.count() == 2


def _this_machine() -> str:
    """A name (not ``localhost``) that this machine's resolver answers with an internal address."""
    name = socket.gethostname()
    answers = {info[4][0] for info in socket.getaddrinfo(name, 80, proto=socket.IPPROTO_TCP)}
    if not all(outbound._internal(outbound.ipaddress.ip_address(a)) for a in answers):
        pytest.skip(f"{name} resolves to a global address here")
    return name


def test_a_delivery_to_a_name_that_resolves_to_this_machine_is_refused_and_nothing_is_sent(
    receiver: Receiver, settings: Any
) -> None:
    name = _this_machine()
    url = f"http://{name}:{receiver.port}/hook"
    assert outbound.refused_as_typed(url) == ""  # a name: nothing to see until it is resolved
    endpoint = WebhookEndpoint.objects.create(url=url, events=["run.failed"])
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, message_id="msg_1", event_type="run.failed", payload={"type": "run.failed"}
    )
    settings.WEBHOOK_RETRY_SECONDS = []

    OUTBOX.attempt(delivery.pk)

    delivery.refresh_from_db()
    assert delivery.status == "failed"
    assert f"({name} resolves to 127." in delivery.last_error
    assert receiver.hosts == []

    settings.COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS = True
    assert outbound.post(url, b"{}", {"Content-Type": "application/json"}, 5) == (204, "")
    assert receiver.hosts == [f"{name}:{receiver.port}"]  # the name, though connected by address


def test_a_name_that_changes_its_answer_after_the_check_gets_nothing(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DNS rebinding: a resolver that answers a global address to the check, then this machine.
    real = socket.getaddrinfo
    answers = iter(["1.1.1.1"])
    asked: list[str] = []

    def rebinding(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.example":
            return real(host, port, *args, **kwargs)
        asked.append(host)
        address = next(answers, "127.0.0.1")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)

    status, _ = outbound.post(f"http://rebind.example:{receiver.port}/hook", b"{}", {}, 1)

    assert status is None or status != 204
    assert asked == ["rebind.example"]  # resolved once: the connection went to the checked address
    assert receiver.hosts == []


@pytest.mark.parametrize("url", INTERNAL)
def test_a_chat_hook_on_this_machine_or_a_private_network_is_refused(url: str) -> None:
    with pytest.raises(ValidationError, match="a private network or a link-local address"):
        check_chat_url(url.replace("http://", "https://"))


def test_a_chat_hook_must_be_https_unless_the_setting_allows_internal_receivers(settings: Any) -> None:
    settings.DEBUG = True  # (no longer a way around it)
    with pytest.raises(ValidationError, match=r"Use an https:// address"):
        check_chat_url("http://hooks.slack.com/services/x")
    check_chat_url("https://hooks.slack.com/services/x")

    settings.COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS = True
    check_chat_url("http://chat.internal:8065/hooks/x")
    check_chat_url("http://127.0.0.1:8065/hooks/x")
