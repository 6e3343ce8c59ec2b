"""Real receivers for the notification tests: an SMTP server (aiosmtpd) and a chat webhook (http.server),
both on 127.0.0.1, recording what they get; ``plan`` says how to answer the next ones."""

from __future__ import annotations

import asyncio
import email
import email.policy
import json
import socket
import threading
import time
from collections.abc import Callable
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(condition: Callable[[], object], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


class MailSink:
    """An SMTP server: each message parsed; messages to ``refuse_to`` refused (554), each after
    ``slow_seconds``."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.refused: list[str] = []
        self.refuse_to: set[str] = set()
        self.slow_seconds = 0.0
        self.lock = threading.Lock()
        sink = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                await asyncio.sleep(sink.slow_seconds)
                with sink.lock:
                    if sink.refuse_to & set(envelope.rcpt_tos):
                        sink.refused.extend(envelope.rcpt_tos)
                        return "554 5.7.1 Not today"
                    message = email.message_from_bytes(envelope.content, policy=email.policy.default)
                    assert isinstance(message, EmailMessage)
                    sink.messages.append(message)
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def settings(self) -> dict[str, Any]:
        """Django's SMTP backend pointed at this server."""
        return self.mailers(self.port)

    @staticmethod
    def mailers(port: int) -> dict[str, Any]:
        """``MAILERS``: Django's SMTP backend to 127.0.0.1:``port``."""
        options = {"host": "127.0.0.1", "port": port, "use_tls": False, "timeout": 5}
        return {"default": {"BACKEND": "django.core.mail.backends.smtp.EmailBackend", "OPTIONS": options}}

    def to(self, address: str) -> list[EmailMessage]:
        with self.lock:
            return [m for m in self.messages if address in str(m["To"])]


def parts(message: EmailMessage) -> tuple[str, str]:
    """The text and the HTML part of a message."""
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert text is not None and html is not None
    return str(text.get_content()), str(html.get_content())


class ChatSink:
    """A chat incoming webhook: each POST's JSON; ``plan`` of statuses ("500") for the next ones."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.answers: list[int] = []
        self.plan: list[int] = []
        #: Where a planned 3xx answer points.
        self.redirect_to = ""
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with sink.lock:
                    status = sink.plan.pop(0) if sink.plan else 200
                    sink.answers.append(status)
                    if status == 200:
                        sink.received.append(json.loads(body))
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", sink.redirect_to)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T0/B0/x"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
