"""Who may see which agents: deny by default.

A user sees an agent only through a group that grants it:

- ``agent:<agent id>`` groups make a *designated* reviewer: they see (and, with the decide
  permission, decide) only those agents;
- otherwise the Reviewers and Admins groups see every agent;
- anyone else sees nothing, unless ``settings.COUNTERSIGN_OPEN_VISIBILITY`` is on (small teams
  that want every logged-in user to see every agent). Superusers see everything.

``manage.py grant`` puts users in these groups; so does the Django admin.

A request resolves this once (``Access.of``: the agents the user sees and their rights, one query
each) and passes the value down: services and templates read it instead of asking again.
``Access.for_agent`` is the one place an agent and the user's right to it are checked together;
an ``AgentAccess`` exists only once that check passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied

from agents_runtime import Agent
from approvals import agents
from approvals.groups import AGENT_GROUP_PREFIX, ALL_AGENTS_GROUPS, REVIEWERS, agent_group_name


def visible_agent_ids(user: Any) -> list[str]:
    """The ids of the agents ``user`` may see, in the runtime's order (empty when anonymous)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return []
    all_ids = [agent.id for agent in agents.all_agents()]
    if user.is_superuser:
        return all_ids
    groups = set(user.groups.values_list("name", flat=True))
    designated = {
        name.removeprefix(AGENT_GROUP_PREFIX) for name in groups if name.startswith(AGENT_GROUP_PREFIX)
    }
    if designated:
        return [agent_id for agent_id in all_ids if agent_id in designated]
    if groups & ALL_AGENTS_GROUPS or getattr(settings, "COUNTERSIGN_OPEN_VISIBILITY", False):
        return all_ids
    return []


def can_see_agent(user: Any, agent_id: str) -> bool:
    return agent_id in visible_agent_ids(user)


# -- rights --------------------------------------------------------------------------------------

DECIDE_PERMISSION = "approvals.decide_runs"
AUDIT_PERMISSION = "approvals.view_audit_log"
PERMISSION_LABELS = {
    DECIDE_PERMISSION: "Can approve, decline and answer suspended runs",
    AUDIT_PERMISSION: "Can view the audit log",
}


def groups_granting(permission: str) -> list[str]:
    """The names of the groups that hold ``permission`` ("app_label.codename")."""
    app_label, _, codename = permission.partition(".")
    return list(
        Group.objects.filter(permissions__codename=codename, permissions__content_type__app_label=app_label)
        .order_by("name")
        .values_list("name", flat=True)
    )


def require_permission(user: Any, permission: str, *, to: str) -> None:
    """Raise ``PermissionDenied`` naming the missing permission and the group that grants it."""
    if not user.has_perm(permission):
        raise permission_denied(permission, to=to)


def permission_denied(permission: str, *, to: str) -> PermissionDenied:
    """The refusal for a missing ``permission``: which one, and which group grants it."""
    label = PERMISSION_LABELS.get(permission, permission)
    groups = groups_granting(permission)
    if groups:
        names = " or ".join(f"“{g}”" for g in groups)
        flag = "--review AGENT" if REVIEWERS in groups else "--admin"
        ask = f"Ask an administrator to add you to the group {names} (manage.py grant USER {flag})."
    else:
        ask = "No group grants it yet: ask an administrator."
    return PermissionDenied(f"You need the permission “{label}” ({permission}) to {to}. {ask}")


def require_agent_access(user: Any, agent_id: str) -> None:
    """Designated reviewers (groups ``agent:<id>``) see and decide only their agents."""
    if not can_see_agent(user, agent_id):
        raise agent_denied(agent_id)


def agent_denied(agent_id: str) -> PermissionDenied:
    return PermissionDenied(
        f"You are not a reviewer of the agent “{agent_id}”. Ask an administrator to add you to its "
        f"group “{agent_group_name(agent_id)}” (manage.py grant USER --review {agent_id})."
    )


# -- one request's rights ------------------------------------------------------------------------

# Only ``Access.of`` and ``Access.for_agent`` hold this: a value built any other way (which would
# skip their checks) is refused.
_CHECKED = object()


@dataclass(frozen=True)
class Access:
    """What one user may see and do, resolved once (``Access.of``) and passed down."""

    user: Any
    #: The agents the user may see, in the runtime's order.
    agent_ids: tuple[str, ...]
    can_decide: bool
    can_audit: bool
    _checked: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._checked is not _CHECKED:
            raise TypeError("Build an Access with Access.of(user)")

    @classmethod
    def of(cls, user: Any) -> Access:
        return cls(
            user=user,
            agent_ids=tuple(visible_agent_ids(user)),
            can_decide=bool(user.has_perm(DECIDE_PERMISSION)),
            can_audit=bool(user.has_perm(AUDIT_PERMISSION)),
            _checked=_CHECKED,
        )

    @property
    def username(self) -> str:
        name: str = self.user.get_username()
        return name

    def require(self, permission: str, *, to: str) -> None:
        """``require_permission`` from what was resolved (the query is only for the refusal)."""
        held = {DECIDE_PERMISSION: self.can_decide, AUDIT_PERMISSION: self.can_audit}.get(permission)
        if held is None:
            require_permission(self.user, permission, to=to)
        elif not held:
            raise permission_denied(permission, to=to)

    def for_agent(self, agent_id: str) -> AgentAccess:
        """The agent ``agent_id`` with this user's right to it.

        Raises ``agents.UnknownAgent`` when no such agent is registered and ``PermissionDenied``
        when the user may not see it.
        """
        agent = agents.get(agent_id)
        if agent.id not in self.agent_ids:
            raise agent_denied(agent.id)
        return AgentAccess(self, agent, _CHECKED)


@dataclass(frozen=True)
class AgentAccess:
    """An agent the user may see (built by ``Access.for_agent``, which checks), and their rights."""

    access: Access
    agent: Agent
    _checked: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._checked is not _CHECKED:
            raise TypeError("Build an AgentAccess with Access.for_agent(agent_id)")

    @property
    def user(self) -> Any:
        return self.access.user

    @property
    def can_decide(self) -> bool:
        return self.access.can_decide

    @property
    def can_audit(self) -> bool:
        return self.access.can_audit
