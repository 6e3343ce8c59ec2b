"""External agents: agents that run elsewhere and only ask for a human's decision (beyond Mastra).

An ``ExternalAgent`` has no model and no tools of its own: whoever hosts the runtime takes a request
("may I call ``tool`` with ``args``?") from a process elsewhere and hands it to ``request_approval``,
which stores a run parked on that one call (``_loop.external_suspension``). From there the call is
like any other: the same listings, decisions (``Agent.decide`` and its rules), grants, deadlines,
votes and events. When decided, its continuation runs nothing: it ends the run with the decision,
for the agent that asked to read and act on (it runs the tool itself).

The tool a request names is an ``ExternalTool``: the rules the host registered for that tool name
(``ToolRules``: approvals, separation of duties, risky values, "I checked this", grants), and, for
one call, the JSON Schema and title the request brought, by which a reviewer's edits are checked
and the call is shown (``Tool.for_call``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from . import _loop
from ._loop import RunStream
from ._pydantic import ignore, new_run_id
from .agent import Agent
from .errors import AgentsRuntimeError, InvalidResumeData, InvalidToolArgs
from .presentation import title_for
from .previews import preview_problems
from .schema_check import schema_problems
from .store import Deadline, RunResult
from .tools import Tool, _validate
from .untrusted import MAX_DEPTH, describe, problems, text_problem, to_jsonable

__all__ = [
    "ExternalAgent",
    "ExternalCall",
    "ExternalTool",
    "InvalidExternalCall",
    "ToolRules",
]

#: What a request may bring: its arguments and its schema are stored with the call (in its context,
#: one level down: hence the depth), so both are bounded.
MAX_ARGS_BYTES = 64 * 1024
MAX_REQUEST_SCHEMA_BYTES = 64 * 1024
MAX_REQUEST_SCHEMA_DEPTH = MAX_DEPTH - 2
MAX_TITLE_LENGTH = 200
MAX_SCOPE_LENGTH = 255
TOOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


class InvalidExternalCall(AgentsRuntimeError):
    """A request that cannot be parked; ``errors``: ``[{"loc": (field, ...), "msg": ...}]``."""

    def __init__(self, message: str, *, errors: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.errors = errors


class ExternalAgentError(AgentsRuntimeError):
    """An external agent has no model: it cannot be run, only asked through ``request_approval``."""


@dataclass(frozen=True)
class ToolRules:
    """What the host says of a tool an external agent's requests name (as ``tool()`` would)."""

    approvals: int = 1
    separate_duties: bool = False
    #: Argument values that make a call risky (approving asks for "I checked this").
    risky: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    confirm: bool = False
    grantable: bool = True

    @classmethod
    def from_json(cls, data: Any) -> ToolRules:
        """Rules from their JSON form (``{"approvals": 2, "risky": {"env": ["prod"]}}``); ValueError."""
        if not isinstance(data, Mapping):
            raise ValueError("a tool's rules are a JSON object")
        unknown = set(data) - {"approvals", "separate_duties", "risky", "confirm", "grantable"}
        if unknown:
            raise ValueError(f"unknown rules: {', '.join(sorted(unknown))}")
        risky = data.get("risky") or {}
        if not isinstance(risky, Mapping) or problems(risky):
            raise ValueError("risky maps argument names to the values that make a call risky")
        flags = {
            name: data.get(name, default)
            for name, default in (("separate_duties", False), ("confirm", False), ("grantable", True))
        }
        if any(type(v) is not bool for v in flags.values()) or type(data.get("approvals", 1)) is not int:
            raise ValueError(
                "approvals is a number; separate_duties, confirm and grantable are true or false"
            )
        return cls(
            approvals=data.get("approvals", 1),
            risky={str(k): tuple(v) if isinstance(v, list) else (v,) for k, v in risky.items()},
            **flags,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "approvals": self.approvals,
            "separate_duties": self.separate_duties,
            "risky": {k: list(v) for k, v in self.risky.items()},
            "confirm": self.confirm,
            "grantable": self.grantable,
        }


def _elsewhere(**_args: Any) -> Any:
    raise ExternalAgentError("An external agent's tool runs in the process that asked, never here")


@dataclass(frozen=True)
class ExternalTool(Tool):
    """A tool an external agent runs itself; ``for_call`` gives it one request's schema and title."""

    args_schema: Mapping[str, Any] | None = None
    call_title: str | None = None

    @classmethod
    def named(cls, name: str, rules: ToolRules | None = None) -> ExternalTool:
        rules = rules or ToolRules()
        return cls(
            function=_elsewhere,
            name=name,
            description=None,
            requires_approval=True,
            suspend_schema=None,
            resume_schema=None,
            context_param=None,
            parameters=(),
            risky=dict(rules.risky),
            confirm=rules.confirm,
            approvals=rules.approvals,
            separate_duties=rules.separate_duties,
            grantable=rules.grantable,
        )

    def for_call(self, args_schema: Any = None, title: Any = None) -> Tool:
        return replace(
            self,
            args_schema=args_schema if isinstance(args_schema, dict) else None,
            call_title=title if isinstance(title, str) and title else None,
        )

    @property
    def parameters_json_schema(self) -> dict[str, Any]:
        return dict(self.args_schema) if self.args_schema is not None else {"type": "object"}

    def title_for(self, args: Mapping[str, Any] | None) -> str:
        return self.call_title or title_for(self.title, self.name, args, self.fields)

    def args_with_defaults(self, args: Mapping[str, Any] | None) -> dict[str, Any]:
        return dict(args or {})

    def validate_args(self, args: Any) -> dict[str, Any]:
        """Edited arguments: an object, valid against the request's schema when it brought one."""
        if not isinstance(args, dict):
            raise InvalidToolArgs(
                f"Edited arguments of {self.name!r} must be an object",
                errors=[{"loc": (), "msg": "expected an object of arguments"}],
            )
        try:
            _validate(self.args_schema, args, "edited arguments")
        except InvalidResumeData as exc:
            raise InvalidToolArgs(str(exc), errors=exc.errors) from None
        jsonable: dict[str, Any] = to_jsonable(args)
        return jsonable


@dataclass(frozen=True)
class ExternalCall:
    """One request: the call the agent that asked would make, and how to show and time it."""

    tool_name: str
    args: dict[str, Any]
    args_schema: dict[str, Any] | None = None
    title: str | None = None
    thread_id: str | None = None
    resource_id: str | None = None
    #: What the call would do, as the agent that asked tells it (``previews``: the JSON form).
    preview: dict[str, Any] | None = None
    #: When nobody answers in time, what the deadline decides (``on_expiry``: decline or approve).
    deadline: Deadline | None = None
    #: Who asked (the host's name for the agent's identity): separation of duties refuses them.
    started_by: str | None = None


def _problems(call: ExternalCall) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def add(where: str, msg: str) -> None:
        found.append({"loc": (where,), "msg": msg})

    if not isinstance(call.tool_name, str) or not TOOL_NAME.fullmatch(call.tool_name):
        add(
            "tool",
            "a tool name: 1 to 128 letters, digits, '_', '.', ':' or '-', starting with a letter or digit",
        )
    if not isinstance(call.args, dict):
        add("args", "the arguments are a JSON object")
    else:
        found += [{**p, "loc": ("args", *p["loc"])} for p in problems(call.args, max_bytes=MAX_ARGS_BYTES)]
    for name, text, limit in (
        ("title", call.title, MAX_TITLE_LENGTH),
        ("threadId", call.thread_id, MAX_SCOPE_LENGTH),
        ("resourceId", call.resource_id, MAX_SCOPE_LENGTH),
    ):
        if text is None:
            continue
        problem = text_problem(text) if isinstance(text, str) else "It is not text."
        if problem or not text or len(text) > limit:
            add(name, problem or f"1 to {limit} characters")
    if call.preview is not None:
        found += preview_problems(call.preview)
    if call.deadline is not None and call.deadline.on_expiry == "escalate":
        add("deadline", "a request's deadline declines or approves")
    return found


def _schema_problems(call: ExternalCall) -> list[dict[str, Any]]:
    schema = call.args_schema
    if schema is None:
        return []
    bounded = problems(schema, max_depth=MAX_REQUEST_SCHEMA_DEPTH, max_bytes=MAX_REQUEST_SCHEMA_BYTES)
    if bounded:
        return [{"loc": ("argsSchema",), "msg": describe(bounded)}]
    unusable = schema_problems(schema)
    if unusable:
        return [{"loc": ("argsSchema",), "msg": f"not a usable JSON Schema: {'; '.join(unusable)}"}]
    try:
        _validate(schema, call.args, "arguments")
    except InvalidResumeData as exc:
        return [{"loc": ("args", *e["loc"]), "msg": e["msg"]} for e in exc.errors]
    return []


class ExternalAgent(Agent):
    """An agent that runs elsewhere: it asks (``request_approval``) and reads the decision."""

    def __init__(
        self,
        id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        tools: Mapping[str, ToolRules] | None = None,
    ) -> None:
        super().__init__(id, name=name, description=description, model=None)
        self.rules: dict[str, ToolRules] = dict(tools or {})

    def __repr__(self) -> str:
        return f"ExternalAgent({self.id!r})"

    def update(self, *, name: str | None, description: str | None, tools: Mapping[str, ToolRules]) -> None:
        """Take the host's registration as it is now (its tools' rules apply to decisions from now on)."""
        self.name = name or self.id
        self.description = description
        self.rules = dict(tools)

    def find_tool(self, name: str, via: str | None = None) -> Tool | None:
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            return None
        return ExternalTool.named(name, self.rules.get(name))

    @staticmethod
    def check(call: ExternalCall) -> None:
        """Refuse (``InvalidExternalCall``) a request that cannot be parked; nothing is stored."""
        found = _problems(call) or _schema_problems(call)
        if found:
            raise InvalidExternalCall(f"The request cannot be taken: {describe(found)}", errors=found)

    async def request_approval(self, call: ExternalCall, *, run_id: str | None = None) -> RunResult:
        """Park ``call`` as a run of its own (``run_id``, a new one when left out) waiting for a decision,
        announced like any; a standing grant that covers it approves it at once (the result's status
        is then not ``suspended``). ``InvalidExternalCall`` for a request that cannot be taken."""
        self.check(call)
        ctx = self._context()
        suspension = _loop.external_suspension(
            ctx,
            run_id or new_run_id(),
            tool_name=call.tool_name,
            args=call.args,
            args_schema=call.args_schema,
            title=call.title,
            preview=call.preview,
            thread_id=call.thread_id,
            resource_id=call.resource_id,
            deadline=call.deadline,
            started_by=call.started_by,
        )
        return await _loop.store_suspension(ctx, suspension, None, ignore)

    async def stream(self, prompt: str, **_options: Any) -> RunStream:
        raise ExternalAgentError(f"Agent {self.id!r} runs elsewhere: it asks through approval requests")

    async def run_messages(self, run_id: str) -> list[dict[str, Any]]:
        await self._own_run(run_id, with_snapshot=False)
        return []  # (no conversation: the request is the call)
