"""A pydantic-ai agent that is not on Countersign's runtime, asking its reviewers for its deferred tools.

``python -m examples.any_agent.pydantic_ai_bridge "Deploy v2.4.1 to production"``: the agent's
``deploy`` tool requires approval (pydantic-ai's own ``requires_approval=True``), so the run ends with
``DeferredToolRequests``; ``deferred_tool_results`` puts each call in Countersign's queue and brings
back the reviewers' answers (approved, perhaps with edited arguments, or denied with the reason),
and the run goes on with them. The model is scripted so the example runs offline; set
``EXAMPLE_MODEL`` (e.g. ``openai:gpt-4.1``) to use a real one.
"""

from __future__ import annotations

import asyncio
import os
import sys

from countersign_client import AsyncCountersign
from countersign_client.pydantic_ai import deferred_tool_results
from pydantic_ai import Agent, DeferredToolRequests, Tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

AGENT = os.environ.get("COUNTERSIGN_AGENT", "release-bot")


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks to deploy once, then says what the tool answered."""
    returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"Done: {returns[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("deploy", {"service": "checkout", "version": "v2.4.1"})])


def deploy(service: str, version: str) -> str:
    """Deploy a service version to production."""
    return f"{service} is now at {version}"


# pydantic-ai's own approval flag: the run ends with DeferredToolRequests instead of deploying.
tools = [Tool(deploy, requires_approval=True)]
agent: Agent[None, str | DeferredToolRequests] = Agent(
    os.environ.get("EXAMPLE_MODEL") or FunctionModel(scripted),
    output_type=[str, DeferredToolRequests],
    tools=tools,
)
#: The tools' parameters as the model sees them: the reviewer's edit form checks edits against them.
SCHEMAS = {tool.name: tool.tool_def.parameters_json_schema for tool in tools}


async def main(prompt: str) -> str:
    async with AsyncCountersign(
        os.environ.get("COUNTERSIGN_URL", "http://127.0.0.1:8000"), os.environ["COUNTERSIGN_TOKEN"]
    ) as client:
        result = await agent.run(prompt)
        while isinstance(result.output, DeferredToolRequests):
            answers = await deferred_tool_results(
                client, result.output, agent=AGENT, thread_id="releases", args_schemas=SCHEMAS
            )
            result = await agent.run(message_history=result.all_messages(), deferred_tool_results=answers)
        return result.output


if __name__ == "__main__":
    print(asyncio.run(main(" ".join(sys.argv[1:]) or "Deploy v2.4.1 to production")))
