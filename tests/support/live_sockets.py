"""Helpers for the live-socket tests: logged-in sessions, sockets on them, and reading what they get."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from config.asgi import application

#: Generous: a loaded CI machine may be slow; the happy path takes milliseconds.
WAIT = 15.0


@dataclass
class Session:
    """One browser's login: its test client (to log out, say) and its session key."""

    client: Client
    key: str

    @classmethod
    async def of(cls, user: User) -> Session:
        def log_in() -> Session:
            client = Client()
            client.force_login(user)
            return cls(client, client.cookies[settings.SESSION_COOKIE_NAME].value)

        return await sync_to_async(log_in)()

    async def socket(self) -> WebsocketCommunicator:
        """An open live socket of this session, past its "hello"."""
        cookie = f"{settings.SESSION_COOKIE_NAME}={self.key}".encode()
        communicator = WebsocketCommunicator(
            application,
            "/ws/live/",
            headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
        )
        connected, _ = await communicator.connect(timeout=WAIT)
        assert connected
        assert (await communicator.receive_json_from(timeout=WAIT))["type"] == "hello"
        return communicator

    async def log_out(self) -> None:
        response = await sync_to_async(self.client.post)("/accounts/logout/")
        assert response.status_code == 302


async def next_message(communicator: WebsocketCommunicator, type_: str, wait: float = WAIT) -> dict[str, Any]:
    """The next message of ``type_`` ("event", "chunk", "agents", ...), skipping others."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        message = await communicator.receive_json_from(timeout=max(deadline - loop.time(), 0.01))
        if message["type"] == type_:
            return dict(message)


async def messages_until(
    communicator: WebsocketCommunicator, done: Any, wait: float = WAIT
) -> list[dict[str, Any]]:
    """Every message up to and including the first for which ``done(message)`` is true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    seen: list[dict[str, Any]] = []
    while not seen or not done(seen[-1]):
        seen.append(await communicator.receive_json_from(timeout=max(deadline - loop.time(), 0.01)))
    return seen


async def close_code(communicator: WebsocketCommunicator, wait: float = WAIT) -> int:
    """Wait for the server to close the socket (skipping what it sent before); its close code."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        output = await communicator.receive_output(timeout=max(deadline - loop.time(), 0.01))
        if output["type"] == "websocket.close":
            return int(output.get("code", 1000))


def is_event(type_: str, run_id: str | None = None) -> Any:
    def matches(message: dict[str, Any]) -> bool:
        event = message.get("event") or {}
        return (
            message["type"] == "event"
            and event.get("type") == type_
            and (run_id is None or event.get("run_id") == run_id)
        )

    return matches


ORIGIN = (b"origin", b"http://127.0.0.1")

HOST = (b"host", b"127.0.0.1")


def cookie_headers(
    user: User | None, origin: bytes = ORIGIN[1], host: bytes = HOST[1]
) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", origin), (b"host", host)]
    if user is not None:
        client = Client()
        client.force_login(user)
        session = client.cookies[settings.SESSION_COOKIE_NAME].value
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={session}".encode()))
    return headers


async def connect(
    user: User | None, *, origin: bytes = ORIGIN[1], host: bytes = HOST[1], scheme: str | None = None
) -> tuple[WebsocketCommunicator, bool, Any]:
    headers = await sync_to_async(cookie_headers)(user, origin, host)
    communicator = WebsocketCommunicator(application, "/ws/live/", headers=headers)
    if scheme is not None:
        communicator.scope["scheme"] = scheme
    connected, detail = await communicator.connect(timeout=5)
    return communicator, connected, detail
