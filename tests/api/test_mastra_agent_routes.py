"""Mastra's agent routes beyond the human-in-the-loop five: ``listAgents``, ``details``, ``generate``
and the non-streaming decisions (``approveToolCallGenerate`` / ``declineToolCallGenerate``), each
scoped by the token as the others are."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User

from agents_runtime import Runtime
from tests.support.api import Api, events, listing, read

A = "/api/agents/approver"


@pytest.fixture
def asker_token(designated: User, token_for: Callable[[User], str]) -> str:
    """A reviewer of ``asker`` only."""
    return token_for(designated)


async def _json(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    return json.loads(response.content)


async def test_list_agents_shows_only_the_agents_the_tokens_user_may_see(
    mastra: Runtime, reviewer_token: str, asker_token: str
) -> None:
    everyone = await _json(await Api(reviewer_token).get("/api/agents"))
    assert set(everyone) == {"approver", "asker", "nomem"}
    assert everyone["approver"]["id"] == "approver" and everyone["approver"]["name"] == "approver"
    only_asker = await _json(await Api(asker_token).get("/api/agents"))
    assert set(only_asker) == {"asker"}
    await _json(await Api(None).get("/api/agents"), 401)


async def test_details_in_mastras_shape_and_scoped_by_the_token(
    mastra: Runtime, reviewer_token: str, asker_token: str
) -> None:
    details = await _json(await Api(reviewer_token).get(A))
    assert details["modelId"] == "scripted-approver" and details["instructions"] == ""
    tool = details["tools"]["deleteFile"]
    assert tool["id"] == "deleteFile" and tool["requireApproval"] is True
    assert tool["description"] == "Delete a file (requires human approval)"
    # A schema as superjson's stringify sends it.
    assert json.loads(tool["inputSchema"])["json"]["required"] == ["path"]
    assert details["agents"] == {} and details["workflows"] == {} and details["skills"] == []
    forbidden = await _json(await Api(asker_token).get(A), 403)
    assert forbidden["code"] == "forbidden"
    unknown = await _json(await Api(reviewer_token).get("/api/agents/nobody"), 404)
    assert unknown["error"] == "Agent with id nobody not found"


async def test_generate_answers_suspended_then_the_generate_decisions_finish_the_run(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    parked = await _json(
        await api.post(
            f"{A}/generate",
            {"messages": "Please delete /tmp/g.txt", "memory": {"thread": "t9", "resource": "u9"}},
        )
    )
    assert parked["finishReason"] == "suspended" and parked["text"] == ""
    waiting = parked["suspendPayload"]
    assert waiting["toolName"] == "deleteFile" and waiting["args"] == {"path": "/tmp/g.txt"}
    assert json.loads(parked["resumeSchema"])["required"] == ["approved"]
    assert [r["runId"] for r in (await listing(api))["runs"]] == [parked["runId"]]
    assert parked["usage"]["totalTokens"] > 0 and parked["totalUsage"]["totalTokens"] > 0

    done = await _json(
        await api.post(
            f"{A}/approve-tool-call-generate",
            {"runId": parked["runId"], "toolCallId": waiting["toolCallId"]},
        )
    )
    assert done["finishReason"] == "stop" and done["runId"] == parked["runId"]
    assert done["text"].startswith("[scripted-approver] MODEL_SAW_TOOL_RESULTS")
    assert done["toolResults"][0]["payload"]["result"] == {"deleted": "/tmp/g.txt"}
    usage, total = done["usage"], done["totalUsage"]
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    assert (
        total["totalTokens"] == sum(s["usage"]["totalTokens"] for s in done["steps"]) > usage["totalTokens"]
    )
    assert done["response"]["modelId"] == "scripted-approver" and len(done["response"]["uiMessages"]) == 2
    assert [m["role"] for m in done["messages"]] == ["user", "assistant", "assistant"]
    assert done["messages"][1]["content"]["parts"][0]["toolInvocation"]["result"] == {"deleted": "/tmp/g.txt"}
    assert (await listing(api))["total"] == 0


async def test_decline_generate_gives_the_model_the_reason(mastra: Runtime, reviewer_token: str) -> None:
    api = Api(reviewer_token)
    parked = await _json(
        await api.post("/api/agents/nomem/generate", {"messages": "Please delete /tmp/n.txt"})
    )
    done = await _json(
        await api.post(
            "/api/agents/nomem/decline-tool-call-generate",
            {
                "runId": parked["runId"],
                "toolCallId": parked["suspendPayload"]["toolCallId"],
                "reason": "Keep it",
            },
        )
    )
    assert done["finishReason"] == "stop" and "Keep it" in done["text"]
    [denied] = done["toolResults"]
    assert denied["type"] == "tool-output-denied" and denied["payload"]["approval"]["reason"] == "Keep it"
    assert "uiMessages" not in done["response"]  # no thread, no memory


async def test_generate_honours_a_chosen_run_id_and_refuses_a_clash(
    mastra: Runtime, reviewer_token: str
) -> None:
    api = Api(reviewer_token)
    parked = await _json(
        await api.post(f"{A}/generate", {"messages": "Please delete /tmp/x.txt", "runId": "gen-1"})
    )
    assert parked["runId"] == "gen-1" and parked["suspendPayload"]
    clash = await _json(
        await api.post(f"{A}/generate", {"messages": "Please delete /tmp/y.txt", "runId": "gen-1"}), 400
    )
    assert clash["code"] == "run_id_in_use"


@pytest.mark.parametrize("path", ["/generate", "/approve-tool-call-generate", "/decline-tool-call-generate"])
async def test_the_generate_routes_are_scoped_by_the_token(
    mastra: Runtime, asker_token: str, path: str
) -> None:
    api = Api(asker_token)
    refused = await _json(
        await api.post(f"{A}{path}", {"messages": "hi", "runId": "r", "toolCallId": "c"}), 403
    )
    assert refused["code"] == "forbidden"


@pytest.mark.parametrize(
    "path", ["/api/agents/approver/nothing", "/api/agents/approver/generate/x", "/api/nowhere"]
)
async def test_unknown_paths_under_api_answer_json(mastra: Runtime, reviewer_token: str, path: str) -> None:
    body = await _json(await Api(reviewer_token).get(path), 404)
    assert body["code"] == "no_route"


async def test_a_get_on_a_post_route_is_405_json(mastra: Runtime, reviewer_token: str) -> None:
    response = await Api(reviewer_token).get(f"{A}/generate")
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert json.loads(response.content)["code"] == "method_not_allowed"


async def test_a_run_of_two_steps_ends_each_with_its_usage_and_finishes_with_the_total(
    agents: Any, reviewer_token: str
) -> None:
    """A tool that needs no approval runs, then the model answers: two steps in one stream."""
    api = Api(reviewer_token)
    response = await api.post("/api/agents/helpdesk/stream", {"messages": "transfer 5"})
    sent = events(await read(response))
    kinds = [e if e == "[DONE]" else e["type"] for e in sent]
    assert kinds[:6] == ["start", "step-start", "tool-call", "tool-result", "step-finish", "step-start"]
    assert kinds[-4:] == ["text-end", "step-finish", "finish", "[DONE]"]
    first, last = (e["payload"] for e in sent if isinstance(e, dict) and e["type"] == "step-finish")
    assert first["stepResult"] == {
        "reason": "tool-calls",
        "isContinued": True,
        "messageId": first["messageId"],
    }
    assert first["output"]["toolCalls"][0]["toolName"] == "transfer" and first["output"]["text"] == ""
    # The first step's messages: the prompt, the call and its result (not yet the answer).
    assert [m["role"] for m in first["messages"]["all"]] == ["user", "assistant", "tool"]
    finish = sent[-2]["payload"]
    steps = [first["output"]["usage"]["totalTokens"], last["output"]["usage"]["totalTokens"]]
    assert finish["output"]["usage"]["totalTokens"] == sum(steps) and min(steps) > 0
    assert [m["role"] for m in finish["messages"]["all"]] == ["user", "assistant", "tool", "assistant"]
    assert finish["messages"]["user"] == finish["messages"]["all"][:1]  # the prompt this request brought
    assert "uiMessages" not in finish["response"]

    generated = await _json(await api.post("/api/agents/helpdesk/generate", {"messages": "transfer 7"}))
    assert generated["finishReason"] == "stop" and generated["text"] == "transfer: moved 7"
    assert [s["finishReason"] for s in generated["steps"]] == ["tool-calls", "stop"]
    assert generated["totalUsage"]["totalTokens"] == sum(
        s["usage"]["totalTokens"] for s in generated["steps"]
    )
    assert "suspendPayload" not in generated
