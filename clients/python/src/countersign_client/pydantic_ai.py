"""A bridge for pydantic-ai's own deferred tools, for an agent that does not run on Countersign.

A pydantic-ai run that ends with ``DeferredToolRequests`` (tools marked ``requires_approval=True``, or
raising ``ApprovalRequired``) gets its ``DeferredToolResults`` from Countersign's reviewers in one call::

    result = await agent.run("Refund order A-1042", output_type=[str, DeferredToolRequests])
    if isinstance(result.output, DeferredToolRequests):
        answers = await deferred_tool_results(client, result.output, agent="support-bot",
                                              thread_id=conversation_id)
        result = await agent.run(message_history=result.all_messages(), deferred_tool_results=answers)

Approved calls come back as ``ToolApproved`` (with ``override_args`` when a reviewer edited them);
declined, expired or cancelled ones as ``ToolDenied`` carrying the reviewer's reason, which the model
reads. Each request's idempotency key is the tool call's id, so asking again after a crash finds the
same requests, decided or not, instead of asking twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.messages import ToolCallPart

from ._client import AsyncCountersign
from ._models import ApprovalRequest, Status


async def deferred_tool_results(
    client: AsyncCountersign,
    requests: DeferredToolRequests,
    *,
    agent: str,
    thread_id: str | None = None,
    resource_id: str | None = None,
    args_schemas: Mapping[str, Mapping[str, Any]] | None = None,
    deadline: Mapping[str, Any] | None = None,
    max_wait: float | None = None,
) -> DeferredToolResults:
    """Ask about every call in ``requests.approvals`` at once and wait for all the decisions.

    ``args_schemas`` (tool name to JSON schema, e.g. from the agent's tool definitions) lets the
    reviewer's form check edits; without one, edits are free-form JSON. External tool calls
    (``requests.calls``) are not approvals: they are refused with ``ValueError``.
    """
    if requests.calls:
        names = ", ".join(sorted({call.tool_name for call in requests.calls}))
        raise ValueError(f"external tool calls are not approvals; run them yourself: {names}")
    schemas = args_schemas or {}

    async def ask(call: ToolCallPart) -> tuple[str, ApprovalRequest]:
        request = await client.create_request(
            agent=agent,
            tool=call.tool_name,
            args=call.args_as_dict(),
            args_schema=schemas.get(call.tool_name),
            thread_id=thread_id,
            resource_id=resource_id,
            deadline=deadline,
            idempotency_key=f"pydantic-ai:{call.tool_call_id}",
        )
        if not request.decided:
            request = await client.wait_for_decision(request.id, max_wait=max_wait)
        return call.tool_call_id, request

    answered = await asyncio.gather(*(ask(call) for call in requests.approvals))
    results = DeferredToolResults()
    for tool_call_id, request in answered:
        results.approvals[tool_call_id] = _answer(request)
    return results


def _answer(request: ApprovalRequest) -> ToolApproved | ToolDenied:
    if request.status == Status.APPROVED:
        return ToolApproved(override_args=request.approved_args if request.edited else None)
    if request.reason:
        return ToolDenied(request.reason)
    return ToolDenied(f"The call was {request.status.value} by the reviewer's desk.")
