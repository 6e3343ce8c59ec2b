"""Who may see and decide what: the desk's policy, one module for every door.

Seeing: deny by default. A user sees an agent only through a group that grants it:

- ``agent:<agent id>`` groups make a *designated* reviewer: they see (and, with the decide
  permission, decide) only those agents;
- otherwise the Reviewers, Admins and Auditors groups see every agent (Auditors read, decide nothing
  and manage nothing: they hold only the audit log's permission);
- anyone else sees nothing, unless ``settings.COUNTERSIGN_OPEN_VISIBILITY`` is on (small teams
  that want every logged-in user to see every agent). Superusers see everything.
- a call escalated to a group (``tool(on_expiry="escalate", escalate_to=...)``) may also be seen
  and decided by that group's members, and nothing else of its agent
  (``AgentAccess.escalated_only``: ``escalation_scope`` narrows its listings, ``sees`` a run,
  ``require_start`` refuses starting its runs). Being in the group is enough: the call was handed
  to its members by name, so they need no decide permission for it (which would also let them
  decide every agent they see). An agent the user sees is decided through the permission only, so
  an auditor in a target group still decides nothing.

``manage.py grant`` puts users in these groups (``--escalation`` in the groups the agents'
tools escalate to, ``escalation_groups``); so does the Django admin. A request resolves this
once (``Access.of``) and passes the value down; ``Access.for_agent`` is the one place an agent and
the user's right to it are checked together.

Deciding: ``DeskPolicy`` is the runtime's host policy (``agents_runtime.policy``), checked inside
every decision's atomic step whatever the door (card, keyboard, bulk, API, Mastra routes, grants,
deadlines): the decider's right to this very call (a grant's maker's, as they are now), and a
colleague's claim on it. The runtime's own rules (re-runs, stale arguments, risky calls, separation
of duties, votes) follow in the same step.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.contrib.auth import backends, get_user_model, hashers
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import PermissionDenied
from django.core.signals import setting_changed
from django.db import connections, router
from django.db.models import CharField, DateTimeField, Value
from django.utils import timezone

from agents_runtime import (
    Agent,
    CallClaimed,
    Confirmation,
    DecisionRequest,
    NotADecider,
    Origin,
    RunAlreadyDecided,
    RunNotFound,
)
from agents_runtime.store import ParkedCall, StoredRun
from approvals import agents
from approvals.models import CallClaim, GrantRecord, HeldDecision, ParkedCallRecord, RoutingRule
from approvals.server.database import fixed_rows

# -- the groups that carry access ------------------------------------------------------------------

#: May decide every agent's calls (unless designated for some).
REVIEWERS = "Reviewers"
#: May also read the audit log and manage users in the Django admin.
ADMINS = "Admins"
#: Reads every agent's calls, ended runs and audit log; decides and manages nothing.
AUDITORS = "Auditors"
#: ``agent:<agent id>``: a designated reviewer of that agent.
AGENT_GROUP_PREFIX = "agent:"
#: Groups that see every agent (unless the user is designated for some).
ALL_AGENTS_GROUPS = frozenset({REVIEWERS, ADMINS, AUDITORS})


def may_use_admin(user: Any) -> bool:
    """Whether ``user`` may sign in to the Django admin: staff, and members of Admins (who are not
    staff). What they may do there follows their permissions, and what they read there follows
    ``visible_agent_ids`` (``approvals.admin``)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return False
    return bool(user.is_staff or ADMINS in _groups(user))


def agent_group_name(agent_id: str) -> str:
    return f"{AGENT_GROUP_PREFIX}{agent_id}"


def _groups(user: Any) -> frozenset[str]:
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return frozenset()
    return _read_rights(user)[0]


def _read_rights(user: Any) -> tuple[frozenset[str], set[str]]:
    """The user's group names and permissions ("app_label.codename"), read together in one query
    and kept on the user object for the request (as Django keeps ``_perm_cache``). A user signed in
    through a session has them already: ``ModelBackend.get_user`` read them with the user."""
    if not hasattr(user, "_countersign_groups"):
        _keep_rights(user, fixed_rows("rights", Group, _rights, user_id=user.pk))
    groups_held: frozenset[str] = user._countersign_groups
    return groups_held, user._perm_cache if hasattr(user, "_perm_cache") else set()


def _keep_rights(user: Any, rows: Iterable[Sequence[Any]]) -> None:
    """Keep on ``user`` the rights in ``rows``, each ending ``(group, app_label, codename)``."""
    groups: set[str] = set()
    permissions: set[str] = set()
    for *_, group, app_label, codename in rows:
        if group is not None:
            groups.add(group)
        if codename is not None:
            permissions.add(f"{app_label}.{codename}")
    user._countersign_groups = frozenset(groups)
    if not hasattr(user, "_perm_cache") and not user.is_superuser:
        user._perm_cache = permissions


def _rights(user_id: int) -> Any:
    in_groups = Group.objects.filter(user=user_id).values_list(
        "name", "permissions__content_type__app_label", "permissions__codename"
    )
    own = Permission.objects.filter(user=user_id).values_list(
        Value(None, output_field=CharField()), "content_type__app_label", "codename"
    )
    return in_groups.order_by().union(own.order_by(), all=True)


def visible_agent_ids(user: Any, groups: frozenset[str] | None = None) -> list[str]:
    """The ids of the agents ``user`` may see, in the runtime's order (empty when anonymous)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return []
    all_ids = [agent.id for agent in agents.all_agents()]
    if user.is_superuser:
        return all_ids
    groups = _groups(user) if groups is None else groups
    designated = {
        name.removeprefix(AGENT_GROUP_PREFIX) for name in groups if name.startswith(AGENT_GROUP_PREFIX)
    }
    if designated:
        return [agent_id for agent_id in all_ids if agent_id in designated]
    if groups & ALL_AGENTS_GROUPS or getattr(settings, "COUNTERSIGN_OPEN_VISIBILITY", False):
        return all_ids
    return []


def escalated_agent_ids(groups: frozenset[str], seen: tuple[str, ...]) -> tuple[str, ...]:
    """Agents not in ``seen`` with a waiting call escalated to one of ``groups``."""
    unseen = [a.id for a in agents.all_agents() if a.id not in seen]
    if not groups or not unseen:
        return ()  # (a user who sees every agent has nothing to probe for: most requests)
    # An indexed probe (call_escalated_idx): escalated calls are few.
    found = set(
        ParkedCallRecord.objects.undecided()
        .filter(escalated_to__in=groups)
        .values_list("run__agent_id", flat=True)
        .distinct()
    )
    return tuple(agent_id for agent_id in unseen if agent_id in found)


def escalations_heard(
    user: Any, seen: Sequence[str], groups: frozenset[str] | None = None
) -> tuple[str, ...]:
    """The groups whose escalated calls ``user``'s open pages hear of (``live``), beyond the agents
    they see (``seen``, ``visible_agent_ids``'): all their groups, as a call escalated to any of them
    is theirs (``may_decide``), even one a run's own deadline named; none for a user who sees every
    agent (they hear of those calls through the agents)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return ()
    if {agent.id for agent in agents.all_agents()} <= set(seen):
        return ()
    return tuple(sorted(_groups(user) if groups is None else groups))


def escalation_groups() -> list[str]:
    """The groups the agents' tools escalate calls to (``tool(escalate_to=...)``), sorted."""
    return sorted(
        {
            tool.deadline.escalate_to
            for agent in agents.all_agents()
            for tool in agent.tools
            if tool.deadline is not None and tool.deadline.escalate_to
        }
    )


def can_see_agent(user: Any, agent_id: str) -> bool:
    return agent_id in visible_agent_ids(user)


def create_agent_groups(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """``post_migrate``: an ``agent:<id>`` group for every agent, to put its reviewers in, and
    the groups its tools escalate to, to put the people escalations reach in."""
    for name in [agent_group_name(agent.id) for agent in agents.all_agents()] + escalation_groups():
        Group.objects.using(using).get_or_create(name=name)


# -- rights --------------------------------------------------------------------------------------

DECIDE_PERMISSION = "approvals.decide_runs"
AUDIT_PERMISSION = "approvals.view_audit_log"
#: See and revoke everyone's standing grants (a reviewer sees and revokes their own).
MANAGE_GRANTS_PERMISSION = "approvals.manage_grants"
PERMISSION_LABELS = {
    DECIDE_PERMISSION: "Can approve, decline and answer suspended runs",
    AUDIT_PERMISSION: "Can view the audit log",
    MANAGE_GRANTS_PERMISSION: "Can see and revoke everyone's standing grants",
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
    #: Whether the user may decide anything: the agents they see (``holds_decide``), or the calls
    #: escalated to their groups (``escalated_agent_ids``).
    can_decide: bool
    can_audit: bool
    _checked: object = field(default=None, repr=False, compare=False)
    #: The user's groups, and the agents they see only for the calls escalated to those groups.
    groups: frozenset[str] = frozenset()
    escalated_agent_ids: tuple[str, ...] = ()
    #: The decide permission: the user decides the calls of the agents they see.
    holds_decide: bool = False

    def __post_init__(self) -> None:
        if self._checked is not _CHECKED:
            raise TypeError("Build an Access with Access.of(user)")

    @classmethod
    def of(cls, user: Any) -> Access:
        groups = _groups(user)
        seen = tuple(visible_agent_ids(user, groups))
        holds_decide = bool(user.has_perm(DECIDE_PERMISSION))
        escalated = escalated_agent_ids(groups, seen)
        return cls(
            user=user,
            agent_ids=seen,
            can_decide=holds_decide or bool(escalated),
            can_audit=bool(user.has_perm(AUDIT_PERMISSION)),
            _checked=_CHECKED,
            groups=groups,
            escalated_agent_ids=escalated,
            holds_decide=holds_decide,
        )

    @property
    def decidable_agent_ids(self) -> tuple[str, ...]:
        """The agents whose runs a decision may be about: those seen, and those seen for calls
        escalated to the user's groups (the services check the call)."""
        return (*self.agent_ids, *self.escalated_agent_ids)

    @property
    def decision_scope(self) -> tuple[tuple[str, frozenset[str] | None], ...]:
        """Each agent with calls the user may decide (``may_decide``), with the groups its calls must
        be escalated to for that (None: any of its calls): what a listing of them is narrowed to."""
        seen = self.agent_ids if self.holds_decide else ()
        return (
            *((agent_id, None) for agent_id in seen),
            *((agent_id, self.groups) for agent_id in self.escalated_agent_ids),
        )

    @property
    def username(self) -> str:
        name: str = self.user.get_username()
        return name

    def holds(self, permission: str) -> bool | None:
        """Whether the user holds ``permission``, as resolved with these rights (no query); None for
        a permission not resolved here."""
        return {DECIDE_PERMISSION: self.can_decide, AUDIT_PERMISSION: self.can_audit}.get(permission)

    def require(self, permission: str, *, to: str) -> None:
        """``require_permission`` from what was resolved (the query is only for the refusal)."""
        held = self.holds(permission)
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
        access = self
        if agent.id not in self.agent_ids and agent.id not in self.escalated_agent_ids:
            # Maybe served only now (``agents.get``: an external agent another process registered a
            # moment ago), after this access was resolved: resolved again, it counts.
            access = Access.of(self.user)
        if agent.id in access.agent_ids:
            return AgentAccess(access, agent, _CHECKED)
        if agent.id in access.escalated_agent_ids:
            return AgentAccess(access, agent, _CHECKED, escalated_only=True)
        raise agent_denied(agent.id)


@dataclass(frozen=True)
class AgentAccess:
    """An agent the user may see (built by ``Access.for_agent``, which checks), and their rights."""

    access: Access
    agent: Agent
    _checked: object = field(default=None, repr=False, compare=False)
    #: The user sees this agent only for the calls escalated to one of their groups.
    escalated_only: bool = False

    def __post_init__(self) -> None:
        if self._checked is not _CHECKED:
            raise TypeError("Build an AgentAccess with Access.for_agent(agent_id)")

    @property
    def escalation_scope(self) -> frozenset[str] | None:
        """The groups a listing of this agent is narrowed to (calls escalated to them); None: all."""
        return self.access.groups if self.escalated_only else None

    def sees(self, run: Any) -> bool:
        """Whether the user may see this waiting run (an ``AgentRun``) of the agent: all of them, or
        (escalation only) those with a call escalated to one of their groups."""
        if not self.escalated_only:
            return True
        return any(c.escalated_to in self.access.groups for c in run.tool_calls if c.escalated_to)

    def may_decide_call(self, run_id: str, tool_call_id: str) -> bool:
        """Whether this waiting call is the user's to decide (reads the run; the one door checks it
        again in the decision's own step)."""
        try:
            run = async_to_sync(self.agent.get_suspended_run)(run_id)
        except RunNotFound:
            return False
        call = next((c for c in run.tool_calls if c.tool_call_id == tool_call_id), None)
        return call is not None and self.decides(call)

    def decides(self, call: Any) -> bool:
        """Whether this waiting call of the agent (an ``AgentRunToolCall``) is the user's to decide."""
        return may_decide(self.access, self.agent.id, call.escalated_to)

    def require_start(self) -> None:
        """Starting runs of the agent needs the decide permission and the agent, not one call of it."""
        if self.escalated_only:
            raise PermissionDenied(
                f"You see the agent “{self.agent.id}” only for the calls escalated to you: you may not "
                "start its runs."
            )
        if not self.access.holds_decide:
            raise permission_denied(DECIDE_PERMISSION, to="start runs")

    @property
    def user(self) -> Any:
        return self.access.user

    @property
    def can_decide(self) -> bool:
        """Whether the user decides this agent's calls they see (escalation only: all of them)."""
        return self.escalated_only or self.access.holds_decide

    @property
    def can_audit(self) -> bool:
        return self.access.can_audit


# -- deciding: the desk's rules inside every decision ----------------------------------------------

#: The doors a person decides through (a grant decides as its maker; a deadline as nobody).
PERSON_DOORS = frozenset({Origin.DASHBOARD, Origin.BULK, Origin.API, Origin.MASTRA})


def may_decide(access: Access, agent_id: str, escalated_to: str | None) -> bool:
    """Whether the user these rights are of may decide a call of ``agent_id``'s run (escalated to
    ``escalated_to``, if it was)."""
    if agent_id in access.agent_ids:
        return access.holds_decide
    return escalated_to is not None and escalated_to in access.groups


def live_claim(run_id: str, tool_call_id: str, *, not_of: str) -> str | None:
    """Who holds someone else's claim on the call that is still live (None: nobody)."""
    return _claim_and_hold(run_id, tool_call_id, not_of=not_of).claimed_by


@dataclass(frozen=True)
class CallTaken:
    """Someone else's live claim on a call, and the decision held on it, if any."""

    claimed_by: str | None = None
    held_by: str | None = None
    #: The held decision is being taken (its undo window ended): it can no longer be undone.
    committing: bool = False


def _claim_and_hold(run_id: str, tool_call_id: str, *, not_of: str, claims: bool = True) -> CallTaken:
    """One read, in every person's decision: the claim (unless ``claims`` is False) and the hold."""
    rows = fixed_rows(
        "claim and hold" if claims else "hold",
        CallClaim,
        _claims_and_holds if claims else _holds,
        run_id=run_id,
        tool_call_id=tool_call_id,
        **({"now": timezone.now(), "not_of": not_of} if claims else {}),
    )
    taken = CallTaken()
    for username, kind, committing in rows:
        if kind == "held":
            taken = replace(taken, held_by=str(username), committing=committing is not None)
        elif taken.claimed_by is None:
            taken = replace(taken, claimed_by=str(username))
    return taken


def _holds(run_id: str, tool_call_id: str) -> Any:
    held = HeldDecision.objects.filter(run_id=run_id, tool_call_id=tool_call_id)
    return held.values_list("username", Value("held", output_field=CharField()), "committing_since")


def _claims_and_holds(run_id: str, tool_call_id: str, now: Any, not_of: str) -> Any:
    claims = CallClaim.objects.filter(run_id=run_id, tool_call_id=tool_call_id, expires_at__gt=now)
    claims_as_rows = claims.exclude(username=not_of).values_list(
        "username", Value("claim", output_field=CharField()), Value(None, output_field=DateTimeField())
    )
    return claims_as_rows.union(_holds(run_id, tool_call_id), all=True)


class CallHeld(RunAlreadyDecided):
    """Someone decided this call in the browser and may still undo it (its undo window): the call is
    taken, as if decided, until that decision is taken or undone. A lost race for anyone else."""

    def __init__(self, *, run_id: str, tool_call_id: str, held_by: str) -> None:
        super().__init__(run_id=run_id, tool_call_id=tool_call_id, decided_by=held_by)
        self.held_by = held_by


def may_grant(access: Access, agent_id: str) -> bool:
    """Whether the user may make a standing grant for ``agent_id``'s calls ("approve and allow"): only
    one who decides all of them. One who sees the agent only for calls escalated to them would grant
    calls that never were. The card offers a grant on this answer; ``grant_refusal`` refuses on it."""
    return agent_id in access.agent_ids and access.holds_decide


def grant_refusal(access: AgentAccess) -> str:
    """Why this user may not make a standing grant for the agent ("" when they may: ``may_grant``)."""
    if not may_grant(access.access, access.agent.id):
        return (
            "Nothing was decided: you see this agent only for the calls escalated to you, and a "
            "standing grant would let other calls through. Approve this call on its own."
        )
    return ""


def grants_in_sight(access: Access) -> frozenset[str] | None:
    """The agents whose standing grants the user reads (and, holding ``manage_grants``, revokes
    whoever made them): those they see; None (every agent's, those no longer served too) for one who
    manages grants and sees every agent. An admin designated for some agents manages theirs only."""
    if access.user.has_perm(MANAGE_GRANTS_PERMISSION) and set(access.agent_ids) >= {
        agent.id for agent in agents.all_agents()
    }:
        return None
    return frozenset(access.agent_ids)


def may_manage_rules(access: Access, agent_id: str) -> bool:
    """Whether the user may make, change and delete routing rules for ``agent_id``'s tools: the
    stricter of two rights, since a rule lets calls through (or stops them) with nobody asked: one
    who may make grants for the agent (decides all its calls: ``may_grant``) and who manages grants
    (``approvals.manage_grants``: the Admins group, or a designated admin of that agent)."""
    return may_grant(access, agent_id) and bool(access.user.has_perm(MANAGE_GRANTS_PERMISSION))


class DeskPolicy:
    """The desk's rules for the runtime (``Runtime(policy=...)``): who decides, and claims."""

    def admit(self, request: DecisionRequest, run: StoredRun, call: ParkedCall) -> None:
        if request.origin in PERSON_DOORS:
            self._person(request, run, call)
        elif request.origin == Origin.GRANT:
            self._grant_maker(request, run, call)
        elif request.origin == Origin.RULE:
            self._rule_maker(request, run, call)
        elif request.origin in (Origin.DEADLINE, Origin.REQUESTER):
            # A deadline that passes while a decision is held waits for it: the held decision (taken
            # by the sweep when its window ends) decides the call, not the default; undone, the next
            # sweep expires the call. So does the requester's cancel (it loses to the held decision).
            taken = _claim_and_hold(run.run_id, call.tool_call_id, not_of="", claims=False)
            if taken.held_by is not None:
                raise CallHeld(run_id=run.run_id, tool_call_id=call.tool_call_id, held_by=taken.held_by)
        # Origin.CODE (the application's own code) decides as it is; the requester (an external
        # agent, whose token the API checked) may only cancel (the runtime's rule).

    def _person(self, request: DecisionRequest, run: StoredRun, call: ParkedCall) -> None:
        access = request.principal
        if not isinstance(access, Access) or not may_decide(access, run.agent_id, call.escalated_to):
            raise NotADecider(
                "You may not decide this call.",
                run_id=run.run_id,
                tool_call_id=call.tool_call_id,
                actor=request.actor,
            )
        claims = not request.confirmed(Confirmation.CLAIMED)
        taken = _claim_and_hold(run.run_id, call.tool_call_id, not_of=access.username, claims=claims)
        if taken.held_by is not None:
            if taken.held_by == request.actor and taken.committing:
                # The held decision itself, taken as it was asked when its window ended.
                return
            raise CallHeld(run_id=run.run_id, tool_call_id=call.tool_call_id, held_by=taken.held_by)
        holder = taken.claimed_by
        if holder is not None:
            raise CallClaimed(
                f"{holder} is on this call (claimed it). Nothing was decided: confirm to decide it yourself.",
                run_id=run.run_id,
                tool_call_id=call.tool_call_id,
                actor=request.actor,
                holder=holder,
            )

    def _grant_maker(self, request: DecisionRequest, run: StoredRun, call: ParkedCall) -> None:
        """A grant approves only what its maker may decide now: an escalation-only reviewer's grant
        covers only calls escalated to them, and a maker who left or lost the right grants nothing."""
        maker = request.grant.created_by if request.grant is not None else None
        # The account that made it (by its record, not its name: a deleted maker's grant is nobody's,
        # whoever is given the name later).
        grant_id = request.grant.id if request.grant is not None else -1
        made_by = GrantRecord.objects.filter(pk=grant_id).values("created_by")
        user = get_user_model()._default_manager.filter(pk__in=made_by, is_active=True).first()
        if user is None or not may_decide(Access.of(user), run.agent_id, call.escalated_to):
            raise NotADecider(
                f"{maker} may not decide this call now: their grant does not apply to it.",
                run_id=run.run_id,
                tool_call_id=call.tool_call_id,
                actor=maker,
            )

    def _rule_maker(self, request: DecisionRequest, run: StoredRun, call: ParkedCall) -> None:
        """A routing rule decides only while whoever wrote its terms (``Rule.author``: its last
        changer, else its maker) may still make it: one who left or lost the right decides nothing
        through them (the call waits for a person). Nor does a rule deleted or changed since it
        matched the call: only its terms as they stand decide."""
        rule = request.rule
        fields = ("route", "condition", "changed_at", "changed_by", "created_by")
        row = RoutingRule.objects.filter(pk=rule.id).values(*fields).first() if rule is not None else None
        if rule is None or row is None or [row["route"], row["condition"]] != [rule.route, rule.condition]:
            raise NotADecider(
                "The routing rule that matched this call was changed or deleted since: it decides nothing "
                "here; the call waits for a person.",
                run_id=run.run_id,
                tool_call_id=call.tool_call_id,
                actor=request.actor,
            )
        maker = rule.author
        # Their account by the rule's record, not by name: a deleted author's rule is nobody's,
        # whoever is given the name later.
        author_id = row["changed_by"] if row["changed_at"] is not None else row["created_by"]
        user = get_user_model()._default_manager.filter(pk=author_id, is_active=True).first()
        if user is None or not may_manage_rules(Access.of(user), run.agent_id):
            raise NotADecider(
                f"{maker} may no longer manage routing rules: their rule does not apply to this call.",
                run_id=run.run_id,
                tool_call_id=call.tool_call_id,
                actor=request.actor,
            )


# -- password hashing, bounded -------------------------------------------------------------------
#
# PBKDF2 costs a good part of a second of CPU per login by design, and hashlib releases the GIL while
# it runs: twenty people signing in at once would take every core of the server from those already
# working. At most ``PASSWORD_HASHING_THREADS`` hashes run at once in a process (default: half its
# cores); the others wait their turn, and give their database connection back to the pool while
# they wait, so a burst of logins cannot hold every connection either.

_hashing_slots: threading.BoundedSemaphore | None = None
_hashing_slots_lock = threading.Lock()


def _hashing_slot() -> threading.BoundedSemaphore | None:
    global _hashing_slots
    with _hashing_slots_lock:
        if _hashing_slots is None:
            limit = int(getattr(settings, "PASSWORD_HASHING_THREADS", 0) or 0)
            if limit <= 0:
                return None
            _hashing_slots = threading.BoundedSemaphore(limit)
        return _hashing_slots


def _reset_hashing_slots(*, setting: str, **kwargs: Any) -> None:
    global _hashing_slots
    if setting == "PASSWORD_HASHING_THREADS":
        with _hashing_slots_lock:
            _hashing_slots = None


setting_changed.connect(_reset_hashing_slots)


class BoundedPBKDF2PasswordHasher(hashers.PBKDF2PasswordHasher):
    """Django's PBKDF2 (the same hashes, the same rounds), at most a few at once per process."""

    def encode(self, password: str, salt: str, iterations: int | None = None) -> str:
        slot = _hashing_slot()
        if slot is None:
            return super().encode(password, salt, iterations)
        if not slot.acquire(blocking=False):
            for connection in connections.all(initialized_only=True):
                if not connection.in_atomic_block:
                    connection.close()
            slot.acquire()
        try:
            return super().encode(password, salt, iterations)
        finally:
            slot.release()


# -- the sign-in backend: Django's ModelBackend, a user's permissions read in one query -------------
#
# Every page and API request resolves the user's rights (``Access.of``: may they decide, may they
# audit) and their groups (which agents they see). Django reads a user's own permissions and their
# groups' permissions in two queries, and the groups in a third; this reads all three in one
# (``_read_rights``, cached on the user object for the request, as Django does).


def _user_and_rights(user_id: Any) -> Any:
    """The user's row beside each of their rights (``_rights``): the columns, then group, app label,
    codename; one row at least (with no group and no permission) for a user who exists."""
    user_model = get_user_model()
    columns = [f.attname for f in user_model._meta.concrete_fields]
    users = user_model._default_manager.filter(pk=user_id).order_by()
    in_groups = users.values_list(
        *columns,
        "groups__name",
        "groups__permissions__content_type__app_label",
        "groups__permissions__codename",
    )
    own = users.values_list(
        *columns,
        Value(None, output_field=CharField()),
        "user_permissions__content_type__app_label",
        "user_permissions__codename",
    )
    return in_groups.union(own, all=True)


def _from_db(field: Any, value: Any, connection: Any) -> Any:
    """``value`` as the ORM would have converted it from ``field``'s column (dates on SQLite, say)."""
    for convert in connection.ops.get_db_converters(field.cached_col) + field.get_db_converters(connection):
        value = convert(value, field.cached_col, connection)
    return value


class ModelBackend(backends.ModelBackend):
    """Django's, reading a signed-in user and their rights in one statement (``get_user``), and their
    permissions from those rights."""

    def get_user(self, user_id: Any) -> Any:
        user_model = get_user_model()
        rows = fixed_rows("user and rights", user_model, _user_and_rights, user_id=user_id)
        if not rows:
            return None
        fields = user_model._meta.concrete_fields
        connection = connections[router.db_for_read(user_model)]
        values = [_from_db(field, value, connection) for field, value in zip(fields, rows[0], strict=False)]
        user = user_model.from_db(connection.alias, [f.attname for f in fields], values)
        _keep_rights(user, rows)
        return user if self.user_can_authenticate(user) else None

    async def aget_user(self, user_id: Any) -> Any:
        return await sync_to_async(self.get_user)(user_id)

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            if user_obj.is_superuser:
                held = Permission.objects.values_list("content_type__app_label", "codename").order_by()
                user_obj._perm_cache = {f"{app_label}.{codename}" for app_label, codename in held}
            else:
                _read_rights(user_obj)
        cached: set[str] = user_obj._perm_cache
        return cached

    async def aget_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return await sync_to_async(self.get_all_permissions)(user_obj, obj)
