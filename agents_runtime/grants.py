"""Standing grants: "always allow this tool here" — a reviewer's approval given ahead of time.

A grant lets calls of one tool of one agent through without a reviewer, in a scope (one thread,
one end user's resource, or everyone), until it expires, runs out of uses or is revoked, and only
for arguments its condition accepts. The condition is a CEL expression over the call's arguments
(Common Expression Language: no statements, no loops, no I/O, no attribute access into Python
objects; evaluated by the maintained ``common-expression-language`` package, never ``eval``), e.g.
``amount_cents <= 10000`` or ``environment == "staging"``.

Where each rule lives: whether a call may be granted at all and which grants match it (the store's
``live_grants``, then each grant's condition) is checked by the runtime when a run parks
(``_loop.check_grants``); a grant's life (revoked, used up, expired) is checked by the store inside the atomic
step that records the approval and takes one use, so a revoked or used-up grant approves nothing
more and N uses mean N under concurrency (``GrantStore``). What a condition may say, and what
evaluating one may cost, is the job of ``conditions``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from . import conditions
from .conditions import MAX_CONDITION_LENGTH as MAX_CONDITION_LENGTH
from .conditions import Condition, ConditionVerdict, InvalidCondition
from .errors import AgentsRuntimeError


class GrantScope(enum.StrEnum):
    THREAD = "thread"
    RESOURCE = "resource"
    EVERYONE = "everyone"

    @property
    def label(self) -> str:
        return {"thread": "this thread", "resource": "this end user", "everyone": "everyone"}[self.value]


class InvalidGrant(AgentsRuntimeError, ValueError):
    """A grant that cannot be made: a tool that forbids grants, a bad condition or scope, no limit."""


class GrantUnavailable(AgentsRuntimeError):
    """The grant was revoked, used up or expired when the store came to use it (nothing recorded)."""

    def __init__(self, grant_id: int) -> None:
        super().__init__(f"Grant #{grant_id} is revoked, used up or expired")
        self.grant_id = grant_id


class GrantNotFound(AgentsRuntimeError):
    def __init__(self, grant_id: int) -> None:
        super().__init__(f"Grant #{grant_id} not found")
        self.grant_id = grant_id


def compile_condition(condition: str) -> Condition | None:
    """The condition, compiled and bounded (None: any arguments); ``InvalidGrant`` saying what to
    simplify if it is not CEL or cannot be bounded (``conditions.compile_condition``, which keeps
    each condition compiled)."""
    try:
        return conditions.compile_condition(condition)
    except InvalidCondition as exc:
        raise InvalidGrant(str(exc)) from None


def condition_verdict(condition: str, args: Mapping[str, Any] | None) -> ConditionVerdict:
    """What ``condition`` says of ``args``, and why it could not say yes. Never raises: a condition
    that no longer compiles (stored before the bounds it fails) holds for nothing, with the reason."""
    try:
        compiled = compile_condition(condition)
    except InvalidGrant as exc:
        return ConditionVerdict(False, error=str(exc))
    return ConditionVerdict(True) if compiled is None else compiled.evaluate(args)


@dataclass(frozen=True)
class GrantRequest:
    """A grant as asked for: checked by ``checked_request`` before a store keeps it."""

    agent_id: str
    tool_name: str
    scope: GrantScope
    #: The thread or resource id for those scopes; None for everyone.
    scope_value: str | None
    created_by: str
    created_at: datetime
    expires_at: datetime | None = None
    max_uses: int | None = None
    condition: str = ""
    #: The call it was made from, if any (for the record).
    from_run_id: str | None = None
    from_tool_call_id: str | None = None
    #: Made for risky calls too (values the tool marks risky, or a tool that asks "I checked this"):
    #: without it a grant never approves such a call (``agents_runtime.policy``).
    covers_risky: bool = False


@dataclass(frozen=True)
class Grant:
    id: int
    agent_id: str
    tool_name: str
    scope: GrantScope
    scope_value: str | None
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    max_uses: int | None
    uses: int
    condition: str
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    from_run_id: str | None = None
    from_tool_call_id: str | None = None

    @property
    def uses_left(self) -> int | None:
        return None if self.max_uses is None else max(self.max_uses - self.uses, 0)

    covers_risky: bool = False
    condition_failures: int = 0
    last_condition_error: str | None = None
    last_condition_error_at: datetime | None = None

    def live(self, at: datetime) -> bool:
        """Not revoked, not used up, not expired at ``at`` (the store checks it again as it uses it)."""
        return (
            self.revoked_at is None
            and (self.max_uses is None or self.uses < self.max_uses)
            and (self.expires_at is None or at < self.expires_at)
        )

    def in_scope(self, thread_id: str | None, resource_id: str | None) -> bool:
        if self.scope == GrantScope.THREAD:
            return thread_id is not None and thread_id == self.scope_value
        if self.scope == GrantScope.RESOURCE:
            return resource_id is not None and resource_id == self.scope_value
        return True

    @property
    def label(self) -> str:
        """As the audit log says it: "grant #3 of rita"."""
        return f"grant #{self.id} of {self.created_by}"


def checked_request(request: GrantRequest) -> GrantRequest:
    """``request`` if it can be kept as it is, else ``InvalidGrant`` saying what is wrong."""
    scope = GrantScope(request.scope)
    if scope == GrantScope.EVERYONE:
        if request.scope_value is not None:
            raise InvalidGrant("A grant for everyone names no thread or end user")
    elif not request.scope_value:
        raise InvalidGrant(f"A grant for {scope.label} needs the {scope.value} it is for")
    if request.max_uses is not None and (type(request.max_uses) is not int or request.max_uses < 1):
        raise InvalidGrant("A grant's number of uses must be a whole number of at least 1")
    if request.expires_at is None and request.max_uses is None:
        # A grant that never ends is a rule, not a reviewer's decision: it belongs in the tool.
        raise InvalidGrant("A grant needs an end: an expiry time, a number of uses, or both")
    if request.expires_at is not None and request.expires_at <= request.created_at:
        raise InvalidGrant("A grant's expiry must be in the future")
    compile_condition(request.condition)
    return replace(request, scope=scope)


@runtime_checkable
class GrantStore(Protocol):
    """What a run store keeps for grants (``InMemoryRunStore`` and the Django store implement it).

    Using a grant is part of ``RunStore.decide``: a ``Decision`` whose ``grant_id`` is set takes one
    use of that grant in the same atomic step that records it, and raises ``GrantUnavailable``
    (recording nothing) when the grant is revoked, used up or expired by then.
    """

    def add_grant(self, request: GrantRequest) -> Grant:
        """Keep a checked grant request; the grant it became."""
        ...

    def revoke_grant(self, grant_id: int, *, actor: str, at: datetime) -> Grant:
        """Revoke a grant (``GrantNotFound`` if there is none); revoking twice keeps the first."""
        ...

    def get_grant(self, grant_id: int) -> Grant | None: ...

    def note_condition_failure(self, grant_id: int, *, error: str, at: datetime) -> None:
        """Count a call this grant's condition could not be evaluated on, with the reason."""
        ...

    def live_grants(
        self, agent_id: str, tool_name: str, *, thread_id: str | None, resource_id: str | None, at: datetime
    ) -> Sequence[Grant]:
        """Live grants of ``agent_id``'s ``tool_name`` whose scope holds this thread or resource,
        narrowest scope first (thread, end user, everyone), then soonest to end."""
        ...


def narrowest_first(grants: Sequence[Grant]) -> list[Grant]:
    """The order ``live_grants`` returns: a thread's grant before an end user's before everyone's,
    then the one that ends soonest, so the broadest grants are spent last."""
    order = {GrantScope.THREAD: 0, GrantScope.RESOURCE: 1, GrantScope.EVERYONE: 2}
    return sorted(
        grants,
        key=lambda g: (
            order[g.scope],
            g.expires_at is None,
            g.expires_at or g.created_at,
            g.id,
        ),
    )
