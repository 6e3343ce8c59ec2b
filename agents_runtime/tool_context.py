"""``ToolContext``: what a tool knows of the call it serves, and ``suspend()``."""

from __future__ import annotations

from typing import Any, NoReturn


class ToolSuspended(BaseException):
    """Raised by ``ToolContext.suspend``.

    A ``BaseException`` so that a tool's own ``except Exception`` cannot swallow it.
    """

    def __init__(self, payload: Any) -> None:
        super().__init__("tool suspended")
        self.payload = payload


class ToolContext:
    """What a tool knows about the call it serves. Tools get it by annotating a parameter with it.

    ``tool_call_id`` is the call's idempotency key: a tool with side effects should make them
    idempotent on it (e.g. pass it as the payment provider's idempotency key). A process that dies
    while the tool runs leaves the call offered again; if a reviewer confirms running it again, the
    tool gets the same ``tool_call_id``.
    """

    def __init__(
        self,
        *,
        run_id: str,
        tool_call_id: str,
        agent_id: str,
        thread_id: str | None,
        resource_id: str | None,
        resume_data: Any = None,
    ) -> None:
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.agent_id = agent_id
        self.thread_id = thread_id
        self.resource_id = resource_id
        #: None on the first execution; once resumed, the validated resume data.
        self.resume_data = resume_data

    def suspend(self, payload: Any = None) -> NoReturn:
        """Park this tool call until a human answers with resume data. Never returns."""
        raise ToolSuspended(payload)

    def __repr__(self) -> str:
        return f"ToolContext(run_id={self.run_id!r}, tool_call_id={self.tool_call_id!r})"
