"""Normalising comparison of two recordings made by ``tests/api/mastra/record.mjs``.

Like the seed's ``compare.mjs`` it blanks what differs from one run to the next (ids, times, ports,
``date`` and ``content-length``). It also folds what differs between two correct servers without a
client noticing: a model streaming its text in several ``text-delta`` events rather than one. In the
``step-finish`` / ``finish`` payloads (usage, metadata, messages, response, uiMessages all compared)
it blanks what depends on the model rather than the server: token counts (their keys stay, and
``totalTokens`` must be their sum), the response's id and the provider's name and interface
version; and it leaves out Mastra's own bookkeeping, which no client type declares (``output.steps``,
an optional copy of each step's messages, ``providerOptions.mastra`` / ``providerMetadata.mastra``
times and ``metadata.mastra`` flags).
"""

from __future__ import annotations

import json
import re
from typing import Any

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[0-9a-f]{32}\b")
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_ISO_URL = re.compile(r"\d{4}-\d\d-\d\dT\d\d%3A\d\d%3A\d\d\.\d{3}Z")
_HUMAN_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]+")
#: Request headers that differ by design: the token, and what depends on the body or the port.
_REQUEST_HEADERS_IGNORED = {"authorization", "host", "content-length"}
#: Mastra's own bookkeeping inside messages (times, flags): no client type declares it.
_BOOKKEEPING = {"providerOptions", "providerMetadata", "mastra"}


def _text(value: str) -> str:
    value = _UUID.sub("<id>", value)
    value = _ISO_URL.sub("<iso>", value)
    value = _HUMAN_TIME.sub("<time>", value)
    return _ISO.sub("<iso>", value)


def _blank(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, list):
        return [_blank(v) for v in value]
    if isinstance(value, dict):
        return {
            k: ("<epoch-ms>" if k in ("startedAt", "createdAt") and isinstance(v, int) else _blank(v))
            for k, v in value.items()
        }
    return value


def _usage(usage: Any) -> Any:
    if not isinstance(usage, dict):
        return usage
    tokens = ("inputTokens", "outputTokens", "totalTokens")
    summed = all(isinstance(usage.get(k), int) for k in tokens) and usage["totalTokens"] == (
        usage["inputTokens"] + usage["outputTokens"]
    )
    blanked = {k: ("<tokens>" if k in tokens and summed else v) for k, v in usage.items()}
    if "raw" in usage:
        blanked["raw"] = _usage(usage["raw"])
    return blanked


def _model_meta(meta: Any) -> Any:
    if not isinstance(meta, dict):
        return meta
    out = {k: v for k, v in meta.items() if k != "modelVersion"}
    if "modelProvider" in out:
        out["modelProvider"] = "<provider>"
    return out


def _unkept(value: Any) -> Any:
    """``value`` without Mastra's bookkeeping; a ``UIMessage``'s provider blanked."""
    if isinstance(value, list):
        return [_unkept(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _unkept(v) for k, v in value.items() if k not in _BOOKKEEPING}
    if "provider" in out and "modelId" in out:
        out["provider"] = "<provider>"
    return out


def _step(payload: dict[str, Any]) -> dict[str, Any]:
    """A ``step-finish`` / ``finish`` payload with what depends on the model blanked."""
    out = dict(payload)
    output = dict(out.get("output") or {})
    output.pop("steps", None)
    if "usage" in output:
        output["usage"] = _usage(output["usage"])
    out["output"] = output
    for key in ("metadata", "response"):
        if isinstance(out.get(key), dict):
            part = dict(out[key])
            if "id" in part:
                part["id"] = "<response-id>"
            if "modelMetadata" in part:
                part["modelMetadata"] = _model_meta(part["modelMetadata"])
            out[key] = part
    return _unkept(out)


def _events(lines: list[str]) -> list[Any]:
    out: list[Any] = []
    for line in lines:
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            out.append("[DONE]")
            continue
        event = json.loads(data)
        kind, payload = event.get("type"), dict(event.get("payload") or {})
        if kind in ("step-finish", "finish"):
            payload = _step(payload)
        if kind == "text-delta" and out and isinstance(out[-1], dict) and out[-1]["type"] == "text-delta":
            out[-1]["payload"]["text"] += payload.get("text", "")
            continue
        out.append({"type": kind, "runId": event.get("runId"), "from": event.get("from"), "payload": payload})
    return _blank(out)


def normalise(entry: dict[str, Any]) -> dict[str, Any]:
    request, response = entry.get("request") or {}, entry.get("response") or {}
    view = entry.get("clientView") or {}
    out: dict[str, Any] = {
        "request": {
            "method": request.get("method"),
            "path": _text(request.get("path", "")),
            "query": _blank(request.get("query")),
            "headers": {
                k: v for k, v in (request.get("headers") or {}).items() if k not in _REQUEST_HEADERS_IGNORED
            },
            "body": _blank(request.get("body")),
        },
        "status": response.get("status"),
        "contentType": response.get("contentType"),
        "exchangeCount": entry.get("exchangeCount"),
        "clientOk": view.get("ok"),
    }
    if "sseDataLines" in response:
        out["events"] = _events(response["sseDataLines"])
        headers = response.get("headers") or {}
        out["sseHeaders"] = {
            k: headers.get(k) for k in ("content-type", "cache-control", "x-accel-buffering")
        }
        out["chunksEqualWireData"] = view.get("chunksEqualWireData")
    else:
        out["body"] = _blank(response.get("body"))
    if view.get("ok") is False:
        out["clientError"] = {k: view["error"].get(k) for k in ("name", "status")}
    return out


def _walk(path: str, left: Any, right: Any, found: list[tuple[str, Any, Any]]) -> None:
    if isinstance(left, dict) and isinstance(right, dict):
        for key in list(left) + [k for k in right if k not in left]:
            _walk(f"{path}.{key}", left.get(key, "<absent>"), right.get(key, "<absent>"), found)
    elif isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        for i, (a, b) in enumerate(zip(left, right, strict=True)):
            _walk(f"{path}[{i}]", a, b, found)
    elif left != right:
        found.append((path, left, right))


def differences(
    golden: list[dict[str, Any]], ours: list[dict[str, Any]]
) -> dict[str, list[tuple[str, Any, Any]]]:
    """Per entry name, the (path, Mastra's value, ours) that still differ after normalising."""
    by_name = {e["name"]: e for e in ours}
    out: dict[str, list[tuple[str, Any, Any]]] = {}
    for entry in golden:
        mine = by_name.get(entry["name"])
        found: list[tuple[str, Any, Any]] = []
        if mine is None:
            found.append(("", "recorded", "<absent>"))
        else:
            _walk("", normalise(entry), normalise(mine), found)
        if found:
            out[entry["name"]] = found
    return out
