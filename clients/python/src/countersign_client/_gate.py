"""Put any function behind a human: ``@client.requires_approval(agent="billing")``.

Each call's arguments (checked against the function's signature, the schema the reviewer's edit form
is built from) go to the queue; approved, the function runs once with the approved arguments, a
reviewer's edits included, and what happened is reported back; declined or expired, the call raises
``ApprovalDeclined`` / ``ApprovalExpired`` with the reason and the function never runs.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ._errors import CountersignError
from ._models import ApprovalRequest, Decision

if TYPE_CHECKING:
    from ._client import AsyncCountersign, Countersign

P = ParamSpec("P")
R = TypeVar("R")
log = logging.getLogger("countersign_client")

#: How much of a result or error is reported back (the run record keeps a short output).
OUTPUT_LIMIT = 2000
Title = str | Callable[[dict[str, Any]], str] | None


class Arguments:
    """A function's parameters as a pydantic model: what is sent, its JSON schema, what comes back."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.signature = inspect.signature(function)
        fields: dict[str, Any] = {}
        for name, parameter in self.signature.parameters.items():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                problem = "a reviewer needs named arguments to read and edit"
                raise TypeError(f"{function.__qualname__} takes *{name}: {problem}")
            annotation = Any if parameter.annotation is parameter.empty else parameter.annotation
            default = ... if parameter.default is parameter.empty else parameter.default
            fields[name] = (annotation, default)
        config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)
        self.model: type[BaseModel] = create_model(
            f"{function.__name__}_arguments", __config__=config, **fields
        )
        self.schema = self.model.model_json_schema()

    def send(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments, by name, as JSON (defaults filled in: the reviewer sees all of it)."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return self.model.model_validate(bound.arguments).model_dump(mode="json")

    def received(self, approved: Mapping[str, Any]) -> dict[str, Any]:
        """The approved arguments as the function's own types (a reviewer's edits checked again)."""
        try:
            checked = self.model.model_validate(dict(approved))
        except ValidationError as error:
            raise CountersignError(f"the approved arguments do not fit the function: {error}") from error
        return {name: getattr(checked, name) for name in self.signature.parameters}


def _title(title: Title, args: dict[str, Any]) -> str | None:
    if callable(title):
        return title(args)
    return title


def _short(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= OUTPUT_LIMIT else text[: OUTPUT_LIMIT - 1] + "…"


def requires_approval(
    client: Countersign | AsyncCountersign,
    *,
    agent: str,
    tool: str | None = None,
    title: Title = None,
    thread_id: str | None = None,
    resource_id: str | None = None,
    deadline: Mapping[str, Any] | None = None,
    max_wait: float | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """The decorator; an ``AsyncCountersign`` gates ``async def`` functions, a ``Countersign`` plain ones.

    ``tool`` defaults to the function's name; ``title`` is a string or a function of the arguments
    (``lambda a: f"Refund {a['amount']}"``); ``max_wait`` bounds the wait for a decision
    (``DecisionTimeout``).
    """
    from ._client import AsyncCountersign

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        arguments = Arguments(function)
        options = {
            "agent": agent,
            "tool": tool or function.__name__,
            "args_schema": arguments.schema,
            "thread_id": thread_id,
            "resource_id": resource_id,
            "deadline": deadline,
        }
        is_async = inspect.iscoroutinefunction(function)
        if is_async != isinstance(client, AsyncCountersign):
            kind = "async functions need AsyncCountersign" if is_async else "plain functions need Countersign"
            raise TypeError(f"{function.__qualname__}: {kind}")
        if is_async:
            return _gate_async(client, function, arguments, options, title, max_wait)  # type: ignore[arg-type,return-value]
        return _gate_sync(client, function, arguments, options, title, max_wait)  # type: ignore[arg-type]

    return decorate


def _gate_sync[**P, R](
    client: Countersign,
    function: Callable[P, R],
    arguments: Arguments,
    options: dict[str, Any],
    title: Title,
    max_wait: float | None,
) -> Callable[P, R]:
    @functools.wraps(function)
    def gated(*args: P.args, **kwargs: P.kwargs) -> R:
        sent = arguments.send(args, kwargs)
        decision = client.request_approval(args=sent, title=_title(title, sent), max_wait=max_wait, **options)
        approved = arguments.received(decision.args)  # NotApproved unless approved
        try:
            result = function(**approved)  # type: ignore[call-arg]
        except Exception as error:
            _report(client, decision.request, ok=False, output=_short(error))
            raise
        _report(client, decision.request, ok=True, output=_short(result))
        return result

    return gated


def _gate_async[**P](
    client: AsyncCountersign,
    function: Callable[P, Awaitable[Any]],
    arguments: Arguments,
    options: dict[str, Any],
    title: Title,
    max_wait: float | None,
) -> Callable[P, Awaitable[Any]]:
    @functools.wraps(function)
    async def gated(*args: P.args, **kwargs: P.kwargs) -> Any:
        sent = arguments.send(args, kwargs)
        decision: Decision = await client.request_approval(
            args=sent, title=_title(title, sent), max_wait=max_wait, **options
        )
        approved = arguments.received(decision.args)
        try:
            result = await function(**approved)  # type: ignore[call-arg]
        except Exception as error:
            await _report_async(client, decision.request, ok=False, output=_short(error))
            raise
        await _report_async(client, decision.request, ok=True, output=_short(result))
        return result

    return gated


def _report(client: Countersign, request: ApprovalRequest, *, ok: bool, output: str) -> None:
    # The call already ran: a report that cannot be made is logged, never raised over its result.
    try:
        client.report_result(request.id, ok=ok, output=output)
    except CountersignError as error:
        log.warning("could not report the result of approval request %s: %s", request.id, error)


async def _report_async(client: AsyncCountersign, request: ApprovalRequest, *, ok: bool, output: str) -> None:
    try:
        await client.report_result(request.id, ok=ok, output=output)
    except CountersignError as error:
        log.warning("could not report the result of approval request %s: %s", request.id, error)
