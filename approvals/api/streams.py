"""Answers of runs: a run's chunks, or a decision's continuation, as Mastra's event stream (or, for
the ``generate`` routes, the same events gathered into Mastra's full output, as JSON).

A decision runs in the same service as the dashboard's (``approvals.services.decisions``), in the
request's thread. Its continuation runs as a task (``approvals.tasks``); with the Immediate backend
that is inside this request, and its chunks reach the response through ``live.tapping`` as they
come. The status line is chosen once the decision is known: a refusal (unknown run, lost race,
refused data) is a 4xx JSON answer and nothing is streamed; an accepted decision is a 200 stream.
With a ``db_worker`` the continuation runs in another process: its chunks come through the channel
layer, from the run's live group that the dashboard's run page watches too (``relay``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.urls import reverse

from agents_runtime import AgentRunToolCall, RunStream
from agents_runtime.store import Outcome
from approvals.api.errors import ApiError
from approvals.api.relay import RunFollower, continues_elsewhere, tapped
from approvals.api.serialize import DONE, SSE_HEADERS, MastraEvents, frame, iso
from approvals.services.decisions import DecisionOutcome

#: Mastra's events of one run or continuation, as they come.
Events = AsyncIterator[dict[str, Any]]


def _sse(events: Events) -> StreamingHttpResponse:
    async def body() -> AsyncIterator[bytes]:
        async for event in events:
            yield frame(event)
        yield DONE

    return StreamingHttpResponse(body(), content_type="text/event-stream", headers=SSE_HEADERS)


async def answer(
    events: Events | HttpResponseBase, translator: MastraEvents, *, stream: bool
) -> HttpResponseBase:
    """The events as a stream, or (``stream=False``) gathered into Mastra's full output once the
    run has ended or parked, as ``generate`` answers; an answer already made as it is."""
    if isinstance(events, HttpResponseBase):
        return events
    if stream:
        return _sse(events)
    body = translator.full_output([event async for event in events])
    return JsonResponse(body, json_dumps_params={"separators": (",", ":"), "default": str})


async def run_events(run: RunStream, agent_id: str, events: MastraEvents) -> Events:
    for event in events.start(agent_id):
        yield event
    async for chunk in run:
        for event in events.events(chunk):
            yield event
    await run.result()


def not_found(run_id: str) -> ApiError:
    return ApiError(
        404,
        f"No suspended run {run_id} of this agent (it ended, or it does not exist)",
        "run_not_found",
        runId=run_id,
    )


def outcome_error(outcome: DecisionOutcome, calls: list[AgentRunToolCall]) -> ApiError | None:
    """The refusal a decision's outcome is over HTTP, or ``None`` when it took effect."""
    status = outcome.status
    if status == Outcome.NOT_FOUND:
        if calls or outcome.refusal:
            return ApiError(
                404,
                outcome.message,
                outcome.refusal or "tool_call_not_found",
                runId=outcome.run_id,
                toolCallId=outcome.tool_call_id,
            )
        return not_found(outcome.run_id)
    if status == Outcome.LOST_RACE:
        return ApiError(
            409,
            outcome.message,
            "already_decided",
            runId=outcome.run_id,
            toolCallId=outcome.tool_call_id,
            decidedBy=outcome.winner,
            decidedAt=iso(outcome.winner_at) if outcome.winner_at else None,
        )
    if status == Outcome.UNCONFIRMED:
        return _unconfirmed(outcome)
    if status == Outcome.REFUSED:
        # Separation of duties or a second vote: this reviewer may not approve; others may.
        return ApiError(
            403, outcome.message, "approval_refused", runId=outcome.run_id, toolCallId=outcome.tool_call_id
        )
    if status == Outcome.INVALID:
        root = "editedArgs" if outcome.refused_args else "resumeData"
        issues = [
            {"field": ".".join([root, *(str(p) for p in e.get("loc", ()))]), "message": str(e.get("msg", ""))}
            for e in outcome.field_errors
        ] or [{"field": root, "message": outcome.message}]
        return ApiError(
            400, "Invalid request body", "invalid_decision", issues=issues, detail=outcome.message
        )
    return None


def _unconfirmed(outcome: DecisionOutcome) -> ApiError:
    """A decision that needs a confirmation the request did not give: what to send, or where to go."""
    where: dict[str, Any] = {"runId": outcome.run_id, "toolCallId": outcome.tool_call_id}
    if outcome.refusal == "risky_unconfirmed":
        # Mastra's routes carry no confirmation: the person checks the call on its card.
        page = reverse("approvals:run", args=[outcome.run_id])
        return ApiError(
            409,
            f"{outcome.message} Approve it in the dashboard ({page}), or with the v1 API and confirm: true.",
            "risky_unconfirmed",
            dashboard=page,
            **where,
        )
    if outcome.refusal == "claimed":
        return ApiError(409, outcome.message, "claimed", **where)
    return ApiError(
        409,
        "The call's tool started in a continuation that died and may have run: send confirmRerun: true "
        "to run it again",
        "rerun_not_confirmed",
        **where,
    )


async def decision_events(
    decide: Callable[[], Awaitable[DecisionOutcome]],
    run_id: str,
    *,
    calls: list[AgentRunToolCall],
    events: MastraEvents,
) -> Events | HttpResponseBase:
    """The continuation's events, once the decision took effect; an approval recorded as one vote
    of several is its answer already. A refusal raises its ``ApiError`` (nothing is streamed).
    ``events``: the translator of the continuation's chunks (it knows the parked calls)."""
    if continues_elsewhere():
        return await _followed_decision(decide, run_id, calls=calls, events=events)
    task, first, rest = await tapped(decide)
    if first is None:
        outcome = _raise_refusal(task, calls)
        if outcome.status == Outcome.VOTE_RECORDED:
            return _vote_response(outcome)

    async def translated() -> Events:
        if first is None:
            return
        for event in events.events(first):
            yield event
        async for item in rest:
            for event in events.events(item):
                yield event

    return translated()


def _vote_response(outcome: DecisionOutcome) -> JsonResponse:
    """An approval recorded as one vote of several: no stream (nothing continues), the tally."""
    tally = outcome.approvals
    return JsonResponse(
        {
            "status": str(Outcome.VOTE_RECORDED),
            "runId": outcome.run_id,
            "toolCallId": outcome.tool_call_id,
            "approvals": str(tally) if tally else "",
            "approvedBy": list(tally.approved_by) if tally else [],
            "required": tally.required if tally else None,
            "message": outcome.message,
        },
        status=202,
    )


def _raise_refusal(task: asyncio.Future[DecisionOutcome], calls: list[AgentRunToolCall]) -> DecisionOutcome:
    try:
        outcome = task.result()
    except PermissionDenied as exc:
        raise ApiError(403, str(exc), "permission_denied") from None
    error = outcome_error(outcome, calls)
    if error is not None:
        raise error
    return outcome


async def _followed_decision(
    decide: Callable[[], Awaitable[DecisionOutcome]],
    run_id: str,
    *,
    calls: list[AgentRunToolCall],
    events: MastraEvents,
) -> Events | HttpResponseBase:
    """The decision's continuation runs in a worker: its chunks come through the run's live group."""
    follower = RunFollower(run_id)
    # Joined before deciding: the worker may start (and finish) before the decision call returns.
    await follower.__aenter__()
    try:
        task = asyncio.ensure_future(decide())
        await asyncio.wait([task])
        outcome = _raise_refusal(task, calls)
    except BaseException:
        await follower.leave()
        raise
    if outcome.status == Outcome.VOTE_RECORDED:
        await follower.leave()
        return _vote_response(outcome)
    if outcome.status != Outcome.CONTINUING:
        # Nothing continues (another call of the run still waits): the stream ends here.
        await follower.leave()

    async def followed() -> Events:
        try:
            if follower.joined:
                async for chunk in follower.chunks():
                    for event in events.events(chunk):
                        yield event
        finally:
            await follower.leave()

    return followed()
