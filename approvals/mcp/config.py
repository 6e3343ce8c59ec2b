"""The gateway's configuration file (TOML, or JSON when its name ends in ``.json``): see docs/mcp-gateway.md.

```toml
[gateway]
agent = "mcp-gateway"           # the external agent its calls are parked as (registered at start)
name = "MCP gateway"
deadline_seconds = 3600         # optional: a parked call's deadline ...
deadline_default = "decline"    # ... and what it decides (decline or approve)
progress_seconds = 10           # a waiting call's progress notifications, this often
http_auth = "tokens"            # over HTTP: a person's API token as Bearer (or "none")

[upstreams.notes]               # its tools are listed as notes.<tool>
command = ["python", "demo/mcp_upstream.py"]   # or: url = "http://127.0.0.1:9000/mcp"
default = "pass"                # tools without an entry: pass, approve or hide (approve when left out)

[upstreams.notes.tools.delete_note]
mode = "approve"                # pass, approve or hide
when = 'title.startsWith("ops-")'      # optional CEL: approval only when it holds
rules = { approvals = 2, separate_duties = true }  # the external agent's rules for the tool
preview = { sentence = "Deletes the note ${title}", items = ["${title}"] }  # what it would do (previews.py)
```

Everything is checked when the file is read (``ConfigError`` says where); conditions again against the
upstream tool's schema once it is listed (``Gateway.start``).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agents_runtime import ToolRules
from agents_runtime.conditions import Condition, InvalidCondition, compile_condition
from approvals.mcp.previews import InvalidPreview, PreviewTemplate

Mode = Literal["pass", "approve", "hide"]
MODES: tuple[Mode, ...] = ("pass", "approve", "hide")
#: An upstream's name, which prefixes its tools (``notes.add_note``).
UPSTREAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
_GATEWAY_KEYS = {
    "agent",
    "name",
    "description",
    "deadline_seconds",
    "deadline_default",
    "progress_seconds",
    "http_auth",
}
_UPSTREAM_KEYS = {"command", "env", "cwd", "url", "headers", "default", "tools"}
_TOOL_KEYS = {"mode", "when", "rules", "preview"}


class ConfigError(ValueError):
    """The configuration cannot be used; the message names where and what."""


@dataclass(frozen=True)
class ToolPolicy:
    """What the gateway does with one upstream tool."""

    mode: Mode = "approve"
    #: Approval only when this holds (``mode = "approve"``); None: always.
    when: Condition | None = None
    rules: ToolRules = field(default_factory=ToolRules)
    #: What a call would do, filled in from its arguments, on its card (``mode = "approve"``).
    preview: PreviewTemplate | None = None


@dataclass(frozen=True)
class UpstreamConfig:
    name: str
    command: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    default: Mode = "approve"
    tools: Mapping[str, ToolPolicy] = field(default_factory=dict)

    def policy(self, tool: str) -> ToolPolicy:
        return self.tools.get(tool) or ToolPolicy(mode=self.default)


@dataclass(frozen=True)
class GatewayConfig:
    agent: str
    name: str
    upstreams: tuple[UpstreamConfig, ...]
    description: str = ""
    deadline_seconds: int | None = None
    deadline_default: str = "decline"
    progress_seconds: float = 10.0
    #: Over HTTP, who may call: "tokens" (a person's API token as a Bearer token; its user is the
    #: calls' end user) or "none" (anyone who reaches the port).
    http_auth: str = "tokens"


def load(path: str | Path) -> GatewayConfig:
    """The configuration in ``path``; ``ConfigError`` when it cannot be read or used."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except ValueError as exc:  # JSONDecodeError and TOMLDecodeError both are
        raise ConfigError(f"{path}: not {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from None
    return parse(data)


def parse(data: Any) -> GatewayConfig:
    """The configuration from its parsed form (a table of ``gateway`` and ``upstreams``)."""
    _object(data, "the configuration", {"gateway", "upstreams"})
    gateway = data.get("gateway") or {}
    _object(gateway, "[gateway]", _GATEWAY_KEYS)
    upstreams = data.get("upstreams")
    if not isinstance(upstreams, Mapping) or not upstreams:
        raise ConfigError("[upstreams] names at least one upstream server")
    agent = gateway.get("agent", "mcp-gateway")
    if not isinstance(agent, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", agent):
        raise ConfigError("[gateway] agent: 1 to 64 lower-case letters, digits, '_' or '-'")
    deadline = gateway.get("deadline_seconds")
    if deadline is not None and (type(deadline) is not int or not 0 < deadline <= 366 * 86400):
        raise ConfigError("[gateway] deadline_seconds: a whole number of seconds, at most a year")
    if gateway.get("deadline_default", "decline") not in ("decline", "approve"):
        raise ConfigError("[gateway] deadline_default: decline or approve")
    if gateway.get("http_auth", "tokens") not in ("tokens", "none"):
        raise ConfigError("[gateway] http_auth: tokens or none")
    progress = gateway.get("progress_seconds", 10)
    if type(progress) not in (int, float) or not 0.05 <= progress <= 60:
        raise ConfigError("[gateway] progress_seconds: a number of seconds from 0.05 to 60")
    return GatewayConfig(
        agent=agent,
        name=_text(gateway, "name", "[gateway]") or agent,
        description=_text(gateway, "description", "[gateway]"),
        upstreams=tuple(_upstream(str(name), spec) for name, spec in upstreams.items()),
        deadline_seconds=deadline,
        deadline_default=gateway.get("deadline_default", "decline"),
        progress_seconds=float(progress),
        http_auth=gateway.get("http_auth", "tokens"),
    )


def _upstream(name: str, spec: Any) -> UpstreamConfig:
    where = f"[upstreams.{name}]"
    if not UPSTREAM_NAME.fullmatch(name):
        raise ConfigError(f"{where}: a name of 1 to 32 letters, digits, '_' or '-'")
    _object(spec, where, _UPSTREAM_KEYS)
    command, url = spec.get("command"), spec.get("url")
    if (command is None) == (url is None):
        raise ConfigError(f"{where}: give either command (a stdio server) or url (streamable HTTP)")
    if command is not None and (
        not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command)
    ):
        raise ConfigError(f"{where} command: a list of strings, the program first")
    if url is not None and (not isinstance(url, str) or not re.match(r"https?://", url)):
        raise ConfigError(f"{where} url: an http:// or https:// URL")
    default = spec.get("default", "approve")
    if default not in MODES:
        raise ConfigError(f"{where} default: one of {', '.join(MODES)}")
    tools = spec.get("tools") or {}
    _object(tools, f"{where} tools", None)
    return UpstreamConfig(
        name=name,
        command=tuple(command or ()),
        env=_strings(spec.get("env"), f"{where} env"),
        cwd=_text(spec, "cwd", where) or None,
        url=url,
        headers=_strings(spec.get("headers"), f"{where} headers") or {},
        default=default,
        tools={str(tool): _tool(f"{where} tools.{tool}", policy) for tool, policy in tools.items()},
    )


def _tool(where: str, spec: Any) -> ToolPolicy:
    _object(spec, where, _TOOL_KEYS)
    mode = spec.get("mode", "approve")
    if mode not in MODES:
        raise ConfigError(f"{where} mode: one of {', '.join(MODES)}")
    when = spec.get("when")
    if when is not None and (mode != "approve" or not isinstance(when, str)):
        raise ConfigError(f'{where} when: a CEL condition, for mode = "approve" only')
    try:
        condition = compile_condition(when) if when else None
        rules = ToolRules.from_json(spec.get("rules") or {})
    except InvalidCondition as exc:
        raise ConfigError(f"{where} when: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{where} rules: {exc}") from None
    return ToolPolicy(
        mode=mode, when=condition, rules=rules, preview=_preview(where, mode, spec.get("preview"))
    )


def _preview(where: str, mode: str, spec: Any) -> PreviewTemplate | None:
    if spec is None:
        return None
    if mode != "approve":
        raise ConfigError(f'{where} preview: for mode = "approve" only')
    try:
        return PreviewTemplate.parse(spec)
    except InvalidPreview as exc:
        raise ConfigError(f"{where} preview: {exc}") from None


def _object(value: Any, where: str, allowed: set[str] | None) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: a table")
    unknown = sorted(set(value) - allowed) if allowed is not None else []
    if unknown:
        raise ConfigError(f"{where}: unknown keys {', '.join(unknown)}")


def _text(table: Mapping[str, Any], key: str, where: str) -> str:
    value = table.get(key, "")
    if not isinstance(value, str):
        raise ConfigError(f"{where} {key}: text")
    return value


def _strings(value: Any, where: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}: a table of strings")
    return {str(k): v for k, v in value.items()}
