"""Calling the HTTP API in tests: a client with a token, and reading its answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from approvals.models import AuditEntry


class Api:
    """Django's async test client with a Bearer token on every request (its ``headers=`` argument
    to the constructor does not reach ASGI requests)."""

    def __init__(self, token: str | None, **headers: str) -> None:
        from django.test import AsyncClient

        # As a browser's request would be checked: a Bearer request must not need a CSRF token.
        self.client = AsyncClient(enforce_csrf_checks=True)
        self.headers = dict(headers)
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"

    async def get(self, path: str, data: dict[str, Any] | None = None) -> Any:
        return await self.client.get(path, data, headers=self.headers)

    async def post(self, path: str, body: Any = None, *, raw: bytes | None = None) -> Any:
        import json

        content = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
        return await self.client.post(path, content, content_type="application/json", headers=self.headers)


def token_caller(user: Any) -> Callable[..., Any]:
    """A synchronous caller of the HTTP API with a new token of ``user``'s: ``call(method, path,
    body=None)`` (a GET, or a POST of ``body`` as JSON)."""
    from django.test import Client

    from approvals.services.tokens import create_token

    client = Client()
    token = create_token(user, name="door").plaintext

    def call(method: str, path: str, body: Any = None) -> Any:
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
        if method == "GET":
            return client.get(path, **headers)
        return client.post(path, json.dumps(body or {}), content_type="application/json", **headers)

    return call


async def read(response: Any) -> bytes:
    """The whole body of a response, streamed or not."""
    if response.streaming:
        return b"".join([part async for part in response.streaming_content])
    return bytes(response.content)


def events(body: bytes) -> list[Any]:
    """The data of each server-sent event (``[DONE]`` as the string)."""
    import json

    out: list[Any] = []
    for block in body.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block.removeprefix("data: ")
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


async def start(api: Api, agent: str, prompt: str, **memory: str) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": prompt}
    if memory:
        body["memory"] = memory
    response = await api.post(f"/api/agents/{agent}/stream", body)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    sent = events(await read(response))
    assert sent[-1] == "[DONE]"
    parked = sent[-2]
    assert parked["type"] in ("tool-call-approval", "tool-call-suspended")
    return {"runId": parked["runId"], "toolCallId": parked["payload"]["toolCallId"], "events": sent}


async def listing(api: Api, agent: str = "approver", **query: str) -> dict[str, Any]:
    response = await api.get(f"/api/agents/{agent}/suspended-runs", query)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return json.loads(response.content)


async def audit_rows() -> list[tuple[str, str, str, str]]:
    return [
        row
        async for row in AuditEntry.objects.order_by("id").values_list(
            "username", "action", "outcome", "channel"
        )
    ]
