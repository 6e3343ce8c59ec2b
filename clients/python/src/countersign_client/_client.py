"""The HTTP client of ``/api/v1/approval-requests``: ``Countersign`` (sync) and ``AsyncCountersign``.

Both speak the same requests, built and read by the functions at the top; they differ only in how
they send and sleep. Creating a request is safe to retry: every create carries an
``Idempotency-Key`` (yours, or one made per call), so a retried POST never makes a second request.
Waiting is a long poll of at most 60 s a round, repeated until the decision or your ``max_wait``; no
connection is held longer than a round, and a dropped one is simply asked again.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import httpx

from ._errors import ApiError, CountersignError, DecisionTimeout
from ._models import ApprovalRequest, Decision

#: The server holds a long poll at most this long; a longer wait is several rounds.
LONGEST_POLL = 60.0
#: Statuses worth another try (the server or a proxy in front of it is restarting or overloaded).
_RETRY_STATUSES = frozenset({502, 503, 504})
_USER_AGENT = "countersign-client-python/0.1.0"


@dataclass(frozen=True)
class _Call:
    method: Literal["GET", "POST"]
    path: str
    body: dict[str, Any] | None = None
    params: dict[str, str] | None = None
    headers: dict[str, str] | None = None
    #: How long the server may keep this request open (a long poll), on top of the usual timeout.
    held: float = 0.0


def _create(
    *,
    agent: str,
    tool: str,
    args: Mapping[str, Any],
    args_schema: Mapping[str, Any] | None,
    title: str | None,
    thread_id: str | None,
    resource_id: str | None,
    deadline: Mapping[str, Any] | None,
    idempotency_key: str | None,
) -> _Call:
    body: dict[str, Any] = {"agent": agent, "tool": tool, "args": dict(args)}
    optional = {
        "argsSchema": args_schema,
        "title": title,
        "threadId": thread_id,
        "resourceId": resource_id,
        "deadline": _deadline(deadline),
    }
    body.update({name: value for name, value in optional.items() if value is not None})
    key = idempotency_key or str(uuid.uuid4())
    return _Call("POST", "/api/v1/approval-requests", body, headers={"Idempotency-Key": key})


def _deadline(deadline: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{"in_seconds": 600, "default": "decline"}`` or ``{"at": datetime, ...}`` in the server's words."""
    if deadline is None:
        return None
    out: dict[str, Any] = {}
    for name, value in deadline.items():
        key = {"in_seconds": "inSeconds"}.get(name, name)
        out[key] = value.isoformat() if isinstance(value, datetime) else value
    return out


def _get(request_id: str, wait: float) -> _Call:
    wait = max(0.0, min(wait, LONGEST_POLL))
    params = {"wait": str(int(wait))} if wait >= 1 else None
    return _Call("GET", f"/api/v1/approval-requests/{_segment(request_id)}", params=params, held=wait)


def _cancel(request_id: str, reason: str | None) -> _Call:
    body = {"reason": reason} if reason else {}
    return _Call("POST", f"/api/v1/approval-requests/{_segment(request_id)}/cancel", body)


def _result(request_id: str, ok: bool, output: str) -> _Call:
    body = {"ok": ok, "output": output}
    return _Call("POST", f"/api/v1/approval-requests/{_segment(request_id)}/result", body)


def _segment(request_id: str) -> str:
    if not request_id or "/" in request_id:
        raise ValueError(f"not an approval request id: {request_id!r}")
    return request_id


def _read(response: httpx.Response) -> ApprovalRequest:
    if response.status_code >= 400:
        raise _refusal(response)
    return ApprovalRequest.model_validate(response.json())


def _refusal(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"error": response.text[:200] or response.reason_phrase}
    retry_after = response.headers.get("Retry-After")
    return ApiError(
        response.status_code,
        str(body.get("error", "")),
        str(body.get("code", f"http_{response.status_code}")),
        issues=body.get("issues") if isinstance(body.get("issues"), list) else None,
        retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None,
    )


def _pause(attempt: int, response: httpx.Response | None) -> float:
    """How long to wait before try ``attempt + 1``: the server's Retry-After, else 0.5, 1, 2 ... s."""
    if response is not None:
        after = response.headers.get("Retry-After", "")
        if after.isdigit():
            return min(float(after), 30.0)
    return min(0.5 * float(2**attempt), 8.0)


def _round(started: float, max_wait: float | None) -> float:
    """How long the next long poll may wait: a full round, or what is left of ``max_wait``."""
    if max_wait is None:
        return LONGEST_POLL
    return max(max_wait - (time.monotonic() - started), 0.0)


def _check_time(request: ApprovalRequest, started: float, max_wait: float | None) -> None:
    """``DecisionTimeout`` once less than a second of ``max_wait`` is left (a poll shorter than a
    second would only ask again at once)."""
    waited = time.monotonic() - started
    if max_wait is not None and max_wait - waited < 1:
        raise DecisionTimeout(request, waited)


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "User-Agent": _USER_AGENT, "Accept": "application/json"}


class Countersign:
    """Ask Countersign's reviewers, from synchronous code.

    ``Countersign("https://desk.example.com", token)``: the token is an external agent's (made with
    ``manage.py external_agent``), which may create and read that agent's requests only.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retries = retries
        self._timeout = timeout
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=_headers(token), timeout=timeout, transport=transport
        )

    def __enter__(self) -> Countersign:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def create_request(
        self,
        *,
        agent: str,
        tool: str,
        args: Mapping[str, Any],
        args_schema: Mapping[str, Any] | None = None,
        title: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        deadline: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> ApprovalRequest:
        """Put one call in the reviewers' queue; pending (or already approved by a standing grant)."""
        call = _create(
            agent=agent,
            tool=tool,
            args=args,
            args_schema=args_schema,
            title=title,
            thread_id=thread_id,
            resource_id=resource_id,
            deadline=deadline,
            idempotency_key=idempotency_key,
        )
        return self._send(call)

    def get_request(self, request_id: str, *, wait: float = 0) -> ApprovalRequest:
        """The request as it stands; with ``wait`` (at most 60 s) the server answers when it is decided."""
        return self._send(_get(request_id, wait))

    def wait_for_decision(self, request_id: str, *, max_wait: float | None = None) -> ApprovalRequest:
        """Long-poll until the request is decided; ``DecisionTimeout`` after ``max_wait`` seconds."""
        started = time.monotonic()
        while True:
            request = self.get_request(request_id, wait=_round(started, max_wait))
            if request.decided:
                return request
            _check_time(request, started, max_wait)

    def request_approval(
        self,
        *,
        agent: str,
        tool: str,
        args: Mapping[str, Any],
        max_wait: float | None = None,
        **options: Any,
    ) -> Decision:
        """Ask and wait: the decision (approved, declined, expired or cancelled), or ``DecisionTimeout``.
        ``options`` are ``create_request``'s (``args_schema``, ``title``, ``thread_id``, ...)."""
        request = self.create_request(agent=agent, tool=tool, args=args, **options)
        if not request.decided:
            request = self.wait_for_decision(request.id, max_wait=max_wait)
        return Decision(request)

    def cancel(self, request_id: str, *, reason: str | None = None) -> ApprovalRequest:
        """Withdraw a pending request (409 ``ApiError`` when someone decided first)."""
        return self._send(_cancel(request_id, reason))

    def report_result(self, request_id: str, *, ok: bool, output: str = "") -> ApprovalRequest:
        """Say what happened when the approved call ran, for the run record and the audit."""
        return self._send(_result(request_id, ok, output))

    def requires_approval[**P, R](
        self, *, agent: str, **options: Any
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """A decorator: each call of the function waits for a reviewer (see ``countersign_client.gate``)."""
        from ._gate import requires_approval

        return requires_approval(self, agent=agent, **options)

    def _send(self, call: _Call) -> ApprovalRequest:
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    json=call.body,
                    params=call.params,
                    headers=call.headers,
                    timeout=self._timeout + call.held,
                )
            except httpx.TransportError as error:
                if last:
                    raise CountersignError(f"Countersign is out of reach: {error}") from error
                time.sleep(_pause(attempt, None))
                continue
            if response.status_code in _RETRY_STATUSES and not last:
                time.sleep(_pause(attempt, response))
                continue
            return _read(response)
        raise AssertionError("unreachable")


class AsyncCountersign:
    """``Countersign`` for asyncio code: the same methods, awaited."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retries = retries
        self._timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=_headers(token), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncCountersign:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def create_request(
        self,
        *,
        agent: str,
        tool: str,
        args: Mapping[str, Any],
        args_schema: Mapping[str, Any] | None = None,
        title: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        deadline: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> ApprovalRequest:
        call = _create(
            agent=agent,
            tool=tool,
            args=args,
            args_schema=args_schema,
            title=title,
            thread_id=thread_id,
            resource_id=resource_id,
            deadline=deadline,
            idempotency_key=idempotency_key,
        )
        return await self._send(call)

    async def get_request(self, request_id: str, *, wait: float = 0) -> ApprovalRequest:
        return await self._send(_get(request_id, wait))

    async def wait_for_decision(self, request_id: str, *, max_wait: float | None = None) -> ApprovalRequest:
        started = time.monotonic()
        while True:
            request = await self.get_request(request_id, wait=_round(started, max_wait))
            if request.decided:
                return request
            _check_time(request, started, max_wait)

    async def request_approval(
        self,
        *,
        agent: str,
        tool: str,
        args: Mapping[str, Any],
        max_wait: float | None = None,
        **options: Any,
    ) -> Decision:
        request = await self.create_request(agent=agent, tool=tool, args=args, **options)
        if not request.decided:
            request = await self.wait_for_decision(request.id, max_wait=max_wait)
        return Decision(request)

    async def cancel(self, request_id: str, *, reason: str | None = None) -> ApprovalRequest:
        return await self._send(_cancel(request_id, reason))

    async def report_result(self, request_id: str, *, ok: bool, output: str = "") -> ApprovalRequest:
        return await self._send(_result(request_id, ok, output))

    def requires_approval[**P, R](
        self, *, agent: str, **options: Any
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """``Countersign.requires_approval`` for ``async def`` functions."""
        from ._gate import requires_approval

        return requires_approval(self, agent=agent, **options)

    async def _send(self, call: _Call) -> ApprovalRequest:
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    json=call.body,
                    params=call.params,
                    headers=call.headers,
                    timeout=self._timeout + call.held,
                )
            except httpx.TransportError as error:
                if last:
                    raise CountersignError(f"Countersign is out of reach: {error}") from error
                await asyncio.sleep(_pause(attempt, None))
                continue
            if response.status_code in _RETRY_STATUSES and not last:
                await asyncio.sleep(_pause(attempt, response))
                continue
            return _read(response)
        raise AssertionError("unreachable")
