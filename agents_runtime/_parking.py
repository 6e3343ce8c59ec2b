"""What a run parks on: the calls pydantic-ai deferred, each as the store keeps it, with why it waits.

Why a call waits (what its card shows beside it) is gathered once, when the run parks: the
conversation is at hand then (the run's snapshot is being written); reading it back for every card
of an inbox page would cost a snapshot per run. Kept small: texts are shortened, only the fields a
tool marks as key of its results are kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic_ai import DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)

from . import _pydantic
from ._context import AgentContext
from .previews import run_preview
from .store import CallKind, Deadline, Decision, DecisionAction, Delegation, ParkedCall, StoredRun
from .tools import ToolContext, to_jsonable
from .untrusted import clean_call

#: Characters kept of the user's message and of what the agent said.
TEXT_CHARS = 1_000
#: Key results kept (the latest ones).
MAX_KEY_RESULTS = 5


async def parked_calls(
    ctx: AgentContext, requests: DeferredToolRequests, shared: dict[str, Any]
) -> list[ParkedCall]:
    """The calls a run parks on, each with why it waits (``shared``: the conversation's part)."""
    calls: list[ParkedCall] = []
    for part in [*requests.approvals, *requests.calls]:
        metadata = requests.metadata.get(part.tool_call_id) or {}
        kind = metadata.get(_pydantic.KIND_KEY)
        spec = ctx.tools.get(part.tool_name)
        if kind == "delegation":
            calls.extend(await mirror_inner_calls(ctx, part.tool_call_id, metadata["inner_run_id"]))
        elif kind == CallKind.INPUT:
            calls.append(
                ParkedCall(
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    kind=CallKind.INPUT,
                    args=part.args_as_dict(),
                    suspend_payload=metadata.get("payload"),
                    suspend_schema=spec.suspend_json_schema if spec else None,
                    resume_schema=spec.resume_json_schema if spec else None,
                    context=_call_context(shared),
                )
            )
        else:
            calls.append(
                ParkedCall(
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    kind=CallKind.APPROVAL,
                    args=part.args_as_dict(),
                    context=_call_context(
                        shared, approval_reason=str(metadata.get(_pydantic.REASON_KEY) or "")
                    ),
                )
            )
    return [clean_call(call) for call in calls]


async def mirror_inner_calls(ctx: AgentContext, tool_call_id: str, inner_run_id: str) -> list[ParkedCall]:
    """The supervisor's view of a sub-agent's parked calls, under the delegation call's id."""
    inner: StoredRun | None = await ctx.call(ctx.store.get_run, inner_run_id)
    if inner is None:
        raise RuntimeError(f"Inner run {inner_run_id!r} vanished before its supervisor suspended")
    waiting = inner.undecided
    return [
        clean_call(
            replace(
                call,
                tool_call_id=tool_call_id if len(waiting) == 1 else f"{tool_call_id}:{call.tool_call_id}",
                delegation=Delegation(tool_call_id, inner_run_id, call.tool_call_id, inner.agent_id),
                decision=None,
            )
        )
        for call in waiting
    ]


def with_deadlines(
    ctx: AgentContext, calls: Sequence[ParkedCall], run_deadline: Deadline | None
) -> list[ParkedCall]:
    """The calls a run parks, each with its deadline: the run's own, else its tool's."""
    parked_at = ctx.clock()
    stamped = []
    for call in calls:
        spec = ctx.tools.get(call.tool_name)
        deadline = run_deadline or (spec.deadline if spec is not None else None)
        # A supervisor's mirror keeps the deadline its sub-agent's call got.
        if deadline is not None and call.delegation is None:
            call = replace(call, deadline=deadline, expires_at=deadline.expires_at(parked_at))
        stamped.append(call)
    return stamped


async def with_previews(
    ctx: AgentContext,
    calls: Sequence[ParkedCall],
    run_id: str,
    thread_id: str | None,
    resource_id: str | None,
) -> list[ParkedCall]:
    """The calls a run parks, each approval with its tool's preview (``previews``) in its context.

    Each preview is bounded in time and its failure is recorded as the preview's error: neither keeps
    the run from parking."""
    previewed = []
    for call in calls:
        spec = ctx.tools.get(call.tool_name)
        if call.kind == CallKind.APPROVAL and call.delegation is None and spec is not None and spec.preview:
            tool_ctx = ToolContext(
                run_id=run_id,
                tool_call_id=call.tool_call_id,
                agent_id=ctx.agent_id,
                thread_id=thread_id,
                resource_id=resource_id,
            )
            preview = await run_preview(spec.preview, call.args or {}, tool_ctx, seconds=spec.preview_timeout)
            if preview is not None:
                call = clean_call(
                    replace(call, context={**(call.context or {}), "preview": preview.to_json()})
                )
        previewed.append(call)
    return previewed


async def rechecked(ctx: AgentContext, run: StoredRun) -> list[ParkedCall] | None:
    """The calls of a claimed run with every approved call of a ``tool(recheck=True)`` whose preview,
    run again now (before its tool would run), differs from the preview its approval was bound to
    sent back undecided; None when none is (the run goes on).

    A sent-back call keeps both previews: ``approved_preview`` (what was approved) and ``preview``
    (what it would do now, which the next decision is bound to). A recheck that fails or takes too
    long sends the call back too, its error shown: what it would do now is unknown, and running it
    on an approval of something else is what the recheck is there to prevent. The preview is run on
    the arguments it was first made of (the model's, as the card showed them), so the two compare;
    an approval with edited arguments is rechecked on those model's arguments too: the world under
    the call changed or not. A call's votes go with its approval (it needs all of them again)."""
    calls = list(run.calls)
    sent_back = False
    for index, call in enumerate(calls):
        spec = ctx.tools.get(call.tool_name)
        if (
            spec is None
            or not spec.recheck
            or spec.preview is None
            or call.kind != CallKind.APPROVAL
            or call.delegation is not None
            or not _approved(call.decision)
        ):
            continue
        tool_ctx = ToolContext(
            run_id=run.run_id,
            tool_call_id=call.tool_call_id,
            agent_id=ctx.agent_id,
            thread_id=run.thread_id,
            resource_id=run.resource_id,
        )
        preview = await run_preview(spec.preview, call.args or {}, tool_ctx, seconds=spec.preview_timeout)
        context = call.context or {}
        approved = context.get("preview")
        now = clean_call(replace(call, context={"preview": None if preview is None else preview.to_json()}))
        fresh = (now.context or {}).get("preview")
        error = preview.error if preview is not None else ""
        if not error and _canonical(fresh) == _canonical(approved):
            continue
        decision = call.decision
        assert decision is not None
        recheck = {"at": ctx.clock().isoformat(), "by": decision.actor, "error": error or None}
        calls[index] = replace(
            call,
            decision=None,
            votes=(),
            context={**context, "preview": fresh, "approved_preview": approved, "recheck": recheck},
        )
        sent_back = True
    return calls if sent_back else None


def _approved(decision: Decision | None) -> bool:
    if decision is None:
        return False
    if decision.action == DecisionAction.EXPIRE:
        return bool(decision.resume_data == {"approved": True})
    return decision.action == DecisionAction.APPROVE


def _canonical(preview: Any) -> str:
    return json.dumps(preview, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _short(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


def conversation_context(ctx: AgentContext, messages: Sequence[ModelMessage]) -> dict[str, Any]:
    """The last user message, what the agent said last, and the key fields of earlier results."""
    user_message: str | None = None
    agent_said: str | None = None
    key_results: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    user_message = part.content if isinstance(part.content, str) else str(part.content)
                elif isinstance(part, ToolReturnPart):
                    result = _key_result(ctx, part)
                    if result is not None:
                        key_results.append(result)
        elif isinstance(message, ModelResponse):
            said = "\n".join(p.content for p in message.parts if isinstance(p, TextPart) and p.content)
            # The turn that made the call; an earlier turn's text is older than the call.
            agent_said = said or None
    return {
        "user_message": None if user_message is None else _short(user_message),
        "agent_said": None if agent_said is None else _short(agent_said),
        "key_results": key_results[-MAX_KEY_RESULTS:],
    }


def _key_result(ctx: AgentContext, part: ToolReturnPart) -> dict[str, Any] | None:
    """What an earlier result shows on a later card: its key fields, or that it found nothing or
    failed (a negative result is part of why a call waits: "lookup_order found nothing")."""
    if part.outcome in ("retried", "failed"):
        # ``ModelRetry`` (or arguments the model got wrong), or a tool that raised: any tool's.
        error = part.content if isinstance(part.content, str) else "the model's arguments were invalid"
        return {"tool_name": part.tool_name, "values": {}, "error": _short(error)}
    spec = ctx.find_tool(part.tool_name)
    keys = spec.key_results if spec is not None else ()
    if part.outcome != "success" or not keys:
        # Only tools whose results matter to a reviewer say so: another tool's None is "done".
        return None
    content = to_jsonable(part.content)
    values = {k: content[k] for k in keys if k in content} if isinstance(content, dict) else {}
    if values:
        return {"tool_name": part.tool_name, "values": values}
    if content is None or content is False or content == "" or content == [] or isinstance(content, dict):
        # Nothing, or none of the fields it names as key: it found nothing.
        return {"tool_name": part.tool_name, "values": {}, "nothing": True}
    return None


def previous_answers(calls: Iterable[ParkedCall]) -> list[dict[str, Any]]:
    """The answers given to the decided ``suspend()`` calls a continuation carries on from."""
    answers = []
    for call in calls:
        decision = call.decision
        if call.kind != CallKind.INPUT or decision is None or decision.action != DecisionAction.RESUME:
            continue
        payload = call.suspend_payload
        question = payload.get("question") if isinstance(payload, Mapping) else None
        answers.append(
            {
                "tool_name": call.tool_name,
                "question": question if isinstance(question, str) else None,
                "answer": decision.resume_data,
            }
        )
    return answers


def _call_context(shared: Mapping[str, Any], *, approval_reason: str = "") -> dict[str, Any]:
    return {**shared, "approval_reason": approval_reason or None}
