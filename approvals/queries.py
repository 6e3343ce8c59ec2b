"""Reads for the dashboard's pages, all through the runtime's public API (and the audit log).

Each function is synchronous for the views, and so are the runtime's reads they make
(``list_suspended_runs_sync``, ``run_messages_sync``, the store's ``get_run``): the store is read on
the view's thread, with no event loop in between.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from agents_runtime import Agent, AgentRun, AgentRunToolCall, RunNotFound, RunUnreadable, Tool, agent_run
from agents_runtime.store import CallKind, StoredRun
from approvals import agents
from approvals.models import (
    AuditEntry,
    AuditEntryQuerySet,
    CallClaim,
    EndedRun,
    FollowedAgent,
    GrantRecord,
    HeldDecision,
    ParkedCallRecord,
    RoutingRule,
)
from approvals.policy import Access, grants_in_sight, may_decide, may_manage_rules
from approvals.server.database import fixed_models, fixed_rows


@dataclass(frozen=True)
class AgentSummary:
    agent_id: str
    name: str
    pending: int
    #: When the run that has waited longest suspended (None: nothing pending).
    oldest_suspended_at: datetime | None


def overview_rows(*, agent_ids: Collection[str] | None = None) -> list[AgentSummary]:
    """Every registered agent (or those of ``agent_ids``), with its pending count and oldest waiting run."""
    listed = [a for a in agents.all_agents() if agent_ids is None or a.id in agent_ids]

    def summarise(agent: Agent) -> AgentSummary:
        # A sub-agent's inner runs are counted once: on the supervisor that decides them.
        delegated = False if is_sub_agent(agent) else None
        oldest = agent.list_suspended_runs_sync(per_page=1, page=0, order="oldest", delegated=delegated)
        return AgentSummary(
            agent_id=agent.id,
            name=agent.name or agent.id,
            pending=oldest.total,
            oldest_suspended_at=oldest.runs[0].suspended_at if oldest.runs else None,
        )

    return [summarise(a) for a in listed]


def is_sub_agent(agent: Agent) -> bool:
    """Some agent delegates to this one: some of its runs may be a supervisor's inner runs, which
    are decided (and counted) on the supervisor's inbox."""
    return any(agent in other.agents for other in agents.all_agents())


@dataclass(frozen=True)
class InboxPage:
    runs: list[AgentRun]
    total: int
    #: 1-based, as in the query string.
    page: int
    per_page: int

    @property
    def num_pages(self) -> int:
        return max(1, math.ceil(self.total / self.per_page))

    @property
    def number(self) -> int:
        """The page's number, as the shared pager (and Django's ``Page``) names it."""
        return self.page

    @property
    def has_previous(self) -> bool:
        return self.page > 1

    @property
    def has_next(self) -> bool:
        return self.page < self.num_pages

    @property
    def previous_page(self) -> int:
        return max(1, min(self.page - 1, self.num_pages))

    @property
    def next_page(self) -> int:
        return self.page + 1

    @property
    def first_index(self) -> int:
        return (self.page - 1) * self.per_page + 1 if self.runs else 0

    @property
    def last_index(self) -> int:
        return (self.page - 1) * self.per_page + len(self.runs)


def inbox_page(
    agent: Agent,
    *,
    thread_id: str | None = None,
    resource_id: str | None = None,
    from_date: datetime | None = None,
    to_date: datetime | None = None,
    tool_name: str | None = None,
    kind: CallKind | None = None,
    order: Literal["newest", "oldest", "deadline"] = "oldest",
    page: int = 1,
    per_page: int = 20,
    delegated: bool | None = None,
    escalated_to: frozenset[str] | None = None,
) -> InboxPage:
    """One page of the agent's suspended runs; ``page`` is 1-based (the runtime's is 0-based).

    ``delegated=False`` leaves out a sub-agent's inner runs, ``True`` lists only them."""
    result = agent.list_suspended_runs_sync(
        thread_id=thread_id,
        resource_id=resource_id,
        from_date=from_date,
        to_date=to_date,
        tool_name=tool_name,
        kind=kind,
        order=order,
        per_page=per_page,
        page=page - 1,
        delegated=delegated,
        escalated_to=escalated_to,
    )
    return InboxPage(runs=list(result.runs), total=result.total, page=page, per_page=per_page)


def run_now(run_id: str) -> StoredRun | None:
    """The run ``run_id`` as the store holds it while it waits or a continuation works on it (None
    once it ended, for an unknown id, or for one whose calls no longer read: pages leave it out, as
    listings do), without its snapshot: one read, whichever its agent (run ids are unique in the
    store). ``waiting`` and ``continuing`` say which, for a user."""
    try:
        return agents.runtime().storage.get_run(run_id, with_snapshot=False)
    except RunUnreadable:
        return None


def waiting(
    run: StoredRun | None, *, agent_ids: Collection[str] | None = None
) -> tuple[Agent, AgentRun] | None:
    """``run`` (``run_now``'s) and the agent that owns it while it waits, or None (or, with
    ``agent_ids``, the agents the user may see, when its agent is not one of them)."""
    if run is None or run.status != "suspended":
        return None
    if agent_ids is not None and run.agent_id not in agent_ids:
        return None
    try:
        agent = agents.get(run.agent_id)
    except KeyError:  # a run of an agent this deployment no longer has
        return None
    return agent, agent_run(run)


def continuing(run: StoredRun | None, *, agent_ids: Collection[str] | None = None) -> StoredRun | None:
    """``run`` (``run_now``'s) while a continuation works on it (its decisions are all in), else None.

    Such a run is listed nowhere (it is not suspended), but its page should say what is going on
    rather than that it does not exist.
    """
    if run is None or run.status != "running":
        return None
    if agent_ids is not None and run.agent_id not in agent_ids:
        return None
    return run


def run_locate(run_id: str, *, agent_ids: Collection[str] | None = None) -> tuple[Agent, AgentRun] | None:
    """The suspended run ``run_id`` and the agent that owns it (``waiting``), found by one read."""
    return waiting(run_now(run_id), agent_ids=agent_ids)


def waiting_seen(access: Access, run: StoredRun | None) -> tuple[Agent, AgentRun] | None:
    """``run`` (``run_now``'s) and its agent while it waits, if the user may see it: a run of an agent
    they see, or (an agent seen only for escalations) one with a call escalated to their groups, with
    those calls only. What every page, card and form answer of one waiting run shows a user goes
    through here."""
    found = waiting(run, agent_ids=access.decidable_agent_ids)
    if found is None:
        return None
    agent, waiting_run = found
    seen = access.for_agent(agent.id)
    if not seen.sees(waiting_run):
        return None
    if seen.escalated_only:
        # Only the calls escalated to them: the run's others are none of theirs, arguments included.
        calls = [c for c in waiting_run.tool_calls if c.escalated_to in access.groups]
        return agent, replace(waiting_run, tool_calls=calls)
    return found


def run_seen(access: Access, run_id: str) -> tuple[Agent, AgentRun] | None:
    """``waiting_seen`` of the run ``run_id``, found by one read."""
    return waiting_seen(access, run_now(run_id))


class WaitingCall(NamedTuple):
    """A call as it waits now, with its run and the run's agent."""

    agent: Agent
    run: AgentRun
    call: AgentRunToolCall


def waiting_call(access: Access, run_id: str, tool_call_id: str) -> WaitingCall | None:
    """The call ``tool_call_id`` of the suspended run ``run_id`` while it waits, if the user may see
    the run (``run_seen``), or None."""
    found = run_seen(access, run_id)
    if found is None:
        return None
    agent, run = found
    call = next((c for c in run.tool_calls if c.tool_call_id == tool_call_id), None)
    return None if call is None else WaitingCall(agent, run, call)


def run_continuing(run_id: str, *, agent_ids: Collection[str] | None = None) -> StoredRun | None:
    """The run ``run_id`` while a continuation works on it (``continuing``), else None."""
    return continuing(run_now(run_id), agent_ids=agent_ids)


def run_conversation(agent: Agent, run_id: str) -> list[dict[str, Any]]:
    """The messages that led to the suspension (empty when the run is gone)."""
    try:
        return agent.run_messages_sync(run_id)
    except RunNotFound:
        return []


def run_decisions(run_id: str) -> AuditEntryQuerySet:
    """Decisions taken on this run in the dashboard, oldest first."""
    return AuditEntry.objects.for_run(run_id).chronological().select_related(None)


def follows(user: Any, agent_id: str) -> bool:
    """Whether ``user`` follows the agent (notifications of its new calls)."""
    return agent_id in followed_agent_ids(user)


def followed_agent_ids(user: Any) -> list[str]:
    """The ids of the agents ``user`` follows. Every page's header asks (the page's notifications), and
    an inbox whether its agent is one: read once for the user's request (kept on the user object, as
    Django keeps a user's permissions) and compiled once (``fixed_rows``)."""
    try:
        followed: list[str] = user._countersign_followed
    except AttributeError:
        rows = fixed_rows("followed agents", FollowedAgent, _followed, user_id=user.pk)
        followed = [agent_id for (agent_id,) in rows]
        user._countersign_followed = followed
    return followed


def _followed(user_id: int) -> QuerySet[FollowedAgent, tuple[str]]:
    return FollowedAgent.objects.filter(user_id=user_id).values_list("agent_id")


def run_record(run_id: str, *, agent_ids: Collection[str]) -> EndedRun | None:
    """The permanent record of the ended run ``run_id``, if it is of an agent of ``agent_ids``."""
    return EndedRun.objects.filter(run_id=run_id, agent_id__in=list(agent_ids)).first()


#: Rows on a page of the audit log.
AUDIT_PER_PAGE = 50
#: How far the count above the log counts: past it, "1,000+". Each row counted is a row read, and a
#: broad filter of a log of millions matches millions (the CSV export has them all).
AUDIT_COUNT_LIMIT = 1_000
#: The same for a search (text or arguments), which no index orders: counting a word that one row in
#: fifty holds reads fifty rows a match in the page's order, so a search says "250+" sooner.
AUDIT_SEARCH_COUNT_LIMIT = 250


@dataclass(frozen=True)
class AuditPage:
    entries: list[AuditEntry]
    count: int
    #: The count stopped at its limit (``AUDIT_COUNT_LIMIT``, a search's ``AUDIT_SEARCH_COUNT_LIMIT``):
    #: there are more.
    count_capped: bool
    #: The page starts below the newest row (``after``).
    after: bool
    #: The last row of this page, when there is a next one: it starts below it.
    next_after: AuditEntry | None


def is_search(filters: Mapping[str, Any]) -> bool:
    """Whether the audit filters ``filters`` (``AuditEntry.objects.matching``'s) search text: ids or
    the arguments, which no index orders (its count stops at ``AUDIT_SEARCH_COUNT_LIMIT``)."""
    return bool(filters.get("search") or filters.get("in_args"))


def audit_page(
    entries: AuditEntryQuerySet, *, after: tuple[datetime, int] | None, searching: bool = False
) -> AuditPage:
    """The page of ``entries`` (in the log's order) that starts below the row at ``after`` (None:
    at the newest). A page starts from a place, not an offset: page 100 reads what page 1 reads.
    ``searching``: the entries are a search's matches, counted to a lower limit."""
    limit = AUDIT_SEARCH_COUNT_LIMIT if searching else AUDIT_COUNT_LIMIT
    shown = list((entries.below(*after) if after is not None else entries)[: AUDIT_PER_PAGE + 1])
    # When the first page holds them all (a search for one order, typically), no second read;
    # else counted in the page's order, so the count reads the index the page reads, up to the
    # limit, rather than a bitmap of every match.
    first_holds_all = after is None and len(shown) <= AUDIT_PER_PAGE
    count = len(shown) if first_holds_all else entries[: limit + 1].count()
    return AuditPage(
        entries=shown[:AUDIT_PER_PAGE],
        count=min(count, limit),
        count_capped=count > limit,
        after=after is not None,
        next_after=shown[AUDIT_PER_PAGE - 1] if len(shown) > AUDIT_PER_PAGE else None,
    )


@dataclass(frozen=True)
class AuditChoices:
    """What the audit log's filters offer: agents (id, label), users and tools."""

    agents: list[tuple[str, str]]
    users: list[str]
    tools: list[str]


def _tools(agent: Agent) -> list[Tool]:
    # A sub-agent's calls are decided (and recorded) on its supervisor's run, under their own name.
    tools = list(agent.tools)
    for sub in agent.agents:
        tools += _tools(sub)
    return tools


def _tool_names(agent: Agent) -> set[str]:
    return {t.name for t in _tools(agent)}


def audit_choices(agent_ids: Collection[str]) -> AuditChoices:
    """The audit filters' choices for a viewer of ``agent_ids``: the registry's agents and tools,
    and whatever else the log holds for those agents (users, and agents or tools since removed)."""
    registered = [a for a in agents.all_agents() if a.id in agent_ids]
    seen = list(agent_ids)
    logged_agents = set(AuditEntry.objects.values_seen("agent_id", seen))
    agent_choices = [(a.id, f"{a.name} ({a.id})" if a.name and a.name != a.id else a.id) for a in registered]
    known = {a.id for a in registered}
    agent_choices += [(a, a) for a in sorted(logged_agents - known)]
    tools: set[str] = set()
    for agent in registered:
        tools |= _tool_names(agent)
    tools |= {t for t in AuditEntry.objects.values_seen("tool_name", seen) if t}
    users = sorted(u for u in AuditEntry.objects.values_seen("username", seen) if u)
    return AuditChoices(agents=agent_choices, users=users, tools=sorted(tools))


def call_claims(run_ids: Collection[str]) -> dict[tuple[str, str], CallClaim]:
    """The live claims on these runs' calls, by (run id, tool call id): one query for a page, compiled
    once for a page's length (``fixed_models``: every list of cards reads it)."""
    if not run_ids:
        return {}
    live = fixed_models("claims", CallClaim, _live_claims, run_ids=list(run_ids), now=timezone.now())
    return {(c.run_id, c.tool_call_id): c for c in live}


def _live_claims(run_ids: list[str], now: datetime) -> QuerySet[CallClaim]:
    return CallClaim.objects.filter(run_id__in=run_ids, expires_at__gt=now)


def call_holds(run_ids: Collection[str]) -> dict[tuple[str, str], HeldDecision]:
    """The decisions held for their undo window on these runs' calls, by (run id, tool call id): one
    query for a page (compiled once, as the claims)."""
    if not run_ids:
        return {}
    held = fixed_models("holds", HeldDecision, _holds, run_ids=list(run_ids))
    return {(h.run_id, h.tool_call_id): h for h in held}


def _holds(run_ids: list[str]) -> QuerySet[HeldDecision]:
    return HeldDecision.objects.filter(run_id__in=run_ids)


def grants_visible(access: Any, *, live_only: bool, limit: int = 500) -> list[GrantRecord]:
    """Standing grants on the agents the user sees (``policy.grants_in_sight``), newest first;
    ``live_only``: not revoked, used up or expired."""
    rows = GrantRecord.objects.all()
    seen = grants_in_sight(access)
    if seen is not None:
        rows = rows.filter(agent_id__in=seen)
    if live_only:
        rows = rows.live()
    return list(rows[:limit])


def rules_visible(access: Any) -> list[RoutingRule]:
    """The routing rules of the agents the user sees, by agent and tool, each tool's in order."""
    return list(RoutingRule.objects.filter(agent_id__in=access.agent_ids))


def rule_tools(access: Any) -> list[tuple[str, str]]:
    """The (agent id, tool name) pairs the user may make routing rules for."""
    return [
        (agent.id, name)
        for agent in agents.all_agents()
        if may_manage_rules(access, agent.id)
        for name in (t.name for t in agent.tools)
    ]


# -- the reviewer's queue across agents -------------------------------------------------------------


@dataclass(frozen=True)
class QueuePage:
    """A page of the user's queue: its runs (each with the calls the user may decide) and agents."""

    runs: list[AgentRun]
    agents_by_id: dict[str, Agent]
    #: Where the next page starts (None: this is the last).
    next_after: agents.QueuePosition | None
    #: Each run's place, by run id (a card's "start here" link).
    positions: dict[str, agents.QueuePosition]

    @property
    def call_count(self) -> int:
        return sum(len(run.tool_calls) for run in self.runs)


def queue_page(
    access: Access,
    *,
    agent_id: str | None = None,
    after: tuple[datetime | None, datetime, str] | None = None,
    per_page: int = 20,
    **filters: Any,
) -> QueuePage:
    """One page of every call ``access``'s user may decide (``Access.decision_scope``), across agents
    (or of ``agent_id``'s only), soonest deadline first, then oldest; ``filters``: ``QueueQuery``'s
    (parts of tool, thread and end-user names; creation dates)."""
    scope = tuple((a, groups) for a, groups in access.decision_scope if agent_id in (None, a))
    if not scope:
        return QueuePage(runs=[], agents_by_id={}, next_after=None, positions={})
    start = agents.QueuePosition(*after) if after is not None else None
    query = agents.QueueQuery(scope=scope, after=start, limit=per_page, **filters)
    page = agents.queue_page(query)
    by_id = {a.id: a for a in agents.all_agents()}
    # Of an agent seen for its escalated calls only, the card shows those (the others are not theirs).
    shown = [
        replace(run, tool_calls=[c for c in run.tool_calls if _decides(access, run, c)]) for run in page.runs
    ]
    return QueuePage(
        runs=[run for run in shown if run.tool_calls],
        agents_by_id={run.agent_id: by_id[run.agent_id] for run in shown if run.agent_id in by_id},
        next_after=page.next_after,
        positions={p.run_id: p for p in page.positions},
    )


def _decides(access: Access, run: AgentRun, call: AgentRunToolCall) -> bool:
    return may_decide(access, run.agent_id, call.escalated_to)


@dataclass(frozen=True)
class QueueCounts:
    #: Calls whose deadline is at most ``QUEUE_DUE_SOON_SECONDS`` off (or past, not yet expired).
    due_soon: int
    #: Calls escalated to one of the user's groups.
    escalated: int
    #: Calls the user claims ("I'm on it"), while the claim holds.
    claimed: int
    #: Calls that need several approvals, have some, and none yet of the user's.
    second_vote: int


def queue_counts(access: Access, *, now: datetime | None = None) -> QueueCounts:
    """What waits on the user, counted over their whole queue (whatever its filters)."""
    now = now or timezone.now()
    scope = access.decision_scope
    if not scope:
        return QueueCounts(0, 0, 0, 0)
    calls = ParkedCallRecord.objects.in_queue(scope)
    soon = now + timedelta(seconds=settings.QUEUE_DUE_SOON_SECONDS)
    held = calls.filter(run__run_id=OuterRef("run_id"), tool_call_id=OuterRef("tool_call_id"))
    claims = CallClaim.objects.filter(user=access.user, expires_at__gt=now).filter(Exists(held))
    agent_ids = {agent_id for agent_id, _ in scope}
    voting = {t.name for a in agents.all_agents() if a.id in agent_ids for t in _tools(a) if t.approvals > 1}
    votes = calls.filter(tool_name__in=voting).exclude(votes=[]).values_list("votes", flat=True)
    me = access.username
    return QueueCounts(
        due_soon=calls.filter(expires_at__isnull=False, expires_at__lte=soon).count(),
        escalated=escalated_count(access, calls),
        claimed=claims.count(),
        second_vote=sum(1 for cast in votes if _waits_on_a_vote_of(me, cast)) if voting else 0,
    )


def _waits_on_a_vote_of(username: str, votes: Any) -> bool:
    """Whether a call's stored ``votes`` (some approvals) lack ``username``'s. An unreadable value
    counts for nothing: its run is left out of the queue too (``store.queue_page``)."""
    if not isinstance(votes, list) or not all(isinstance(vote, dict) for vote in votes):
        return False
    return username not in {vote.get("actor") for vote in votes}


def escalated_count(access: Access, calls: QuerySet[ParkedCallRecord] | None = None) -> int:
    """Waiting calls escalated to one of the user's groups that they may decide (of ``calls``, the
    queue's: by default all of it)."""
    if not access.groups or not access.decision_scope:
        return 0
    calls = ParkedCallRecord.objects.in_queue(access.decision_scope) if calls is None else calls
    # (call_escalated_idx: escalated calls are few)
    return calls.filter(escalated_to__in=list(access.groups)).count()


#: How many names each of the queue's filters suggests.
SUGGESTED = 50


@dataclass(frozen=True)
class QueueSuggestions:
    """What the queue's filters suggest: agents (id, label), tools, threads and end users."""

    agents: list[tuple[str, str]]
    tools: list[str]
    threads: list[str]
    resources: list[str]


def queue_suggestions(access: Access, *, waiting: bool = True) -> QueueSuggestions:
    """The queue's agents and their tools (the registry), and (``waiting``) threads and end users
    that wait now (a list refetched without its filters needs none)."""
    scope = access.decision_scope
    agent_ids = {agent_id for agent_id, _ in scope}
    listed = [a for a in agents.all_agents() if a.id in agent_ids]
    tools: set[str] = set()
    for agent in listed:
        tools |= _tool_names(agent)

    def names(column: str) -> list[str]:
        if not scope or not waiting:
            return []
        return agents.queue_names(scope, column, SUGGESTED)

    return QueueSuggestions(
        agents=[(a.id, f"{a.name} ({a.id})" if a.name and a.name != a.id else a.id) for a in listed],
        tools=sorted(tools),
        threads=names("thread_id"),
        resources=names("resource_id"),
    )


def decided_run_id(agent_id: str, thread_id: str, tool_call_id: str) -> str | None:
    """The run of the agent's call ``tool_call_id`` on the thread that a decision was recorded on
    (the newest), for an answer that came after it (AG-UI's resume names a call, not its run)."""
    rows = AuditEntry.objects.filter(agent_id=agent_id, thread_id=thread_id, tool_call_id=tool_call_id)
    run_id: str | None = rows.order_by("-id").values_list("run_id", flat=True).first()
    return run_id
