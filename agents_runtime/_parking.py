"""What a run parks on: the calls pydantic-ai deferred, each as the store keeps it, with why it waits."""

from __future__ import annotations

from typing import Any

from pydantic_ai import DeferredToolRequests

from . import _pydantic
from ._context import call_context
from ._delegation import mirror_inner_calls
from ._host import RunAgent
from .store import ParkedCall
from .untrusted import clean_call
from .vocabulary import CallKind


async def parked_calls(
    agent: RunAgent, requests: DeferredToolRequests, shared: dict[str, Any]
) -> list[ParkedCall]:
    """The calls a run parks on, each with why it waits (``shared``: the conversation's part)."""
    calls: list[ParkedCall] = []
    for part in [*requests.approvals, *requests.calls]:
        metadata = requests.metadata.get(part.tool_call_id) or {}
        kind = metadata.get(_pydantic.KIND_KEY)
        spec = agent._tools_by_name.get(part.tool_name)
        if kind == "delegation":
            calls.extend(await mirror_inner_calls(agent, part.tool_call_id, metadata["inner_run_id"]))
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
                    context=call_context(shared),
                )
            )
        else:
            calls.append(
                ParkedCall(
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    kind=CallKind.APPROVAL,
                    args=part.args_as_dict(),
                    context=call_context(
                        shared, approval_reason=str(metadata.get(_pydantic.REASON_KEY) or "")
                    ),
                )
            )
    return [clean_call(call) for call in calls]
