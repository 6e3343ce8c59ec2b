"""The persistent run store's tables: suspended runs, their parked calls, and thread memory.

``approvals.store.DjangoRunStore`` is the only writer. The indexes follow the listing queries of
``Agent.list_suspended_runs`` (owner + optional thread / resource, newest suspension first, ties by
``run_id``) and the store's own lookups (lease reclaim, inner runs of a supervisor run).
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from django.db import models
from django.db.models import Exists, F, Max, OuterRef, Q, Subquery

from agents_runtime.vocabulary import CallKind, DecisionAction, choices

from .fields import OrderedJSONField


class RunStatus(models.TextChoices):
    SUSPENDED = "suspended", "Suspended"
    RUNNING = "running", "Running"


#: Whose queue: each agent with the groups its calls must be escalated to for them to count (None:
#: every call of it). ``policy.AgentAccess.escalation_scope`` says which, for each agent a user sees.
QueueScope = tuple[tuple[str, frozenset[str] | None], ...]


def _queue_agents(scope: QueueScope) -> tuple[list[str], dict[frozenset[str], list[str]]]:
    """The agents seen whole, and those seen for their escalated calls only, by the groups."""
    whole = [agent_id for agent_id, groups in scope if groups is None]
    escalated: dict[frozenset[str], list[str]] = {}
    for agent_id, groups in scope:
        if groups is not None:
            escalated.setdefault(groups, []).append(agent_id)
    return whole, escalated


def queue_condition(scope: QueueScope, run: str = "") -> Q:
    """Waiting runs of ``scope``'s agents that someone decides here (a sub-agent's inner runs are
    decided through their supervisor's); of an escalation-only agent, those with an undecided call
    escalated to its groups. ``run``: the path to the run from the rows filtered (``"run__"``)."""
    whole, escalated = _queue_agents(scope)
    seen = Q(**{f"{run}agent_id__in": whole})
    key = OuterRef(run.removesuffix("__") or "pk")
    for groups, agent_ids in escalated.items():
        calls = ParkedCallRecord.objects.filter(run=key, escalated_to__in=list(groups)).undecided()
        seen |= Q(**{f"{run}agent_id__in": agent_ids}) & Q(Exists(calls))
    return seen & Q(**{f"{run}status": RunStatus.SUSPENDED, f"{run}parent_run_id": None})


class RunRecordQuerySet(models.QuerySet["RunRecord"]):
    def for_agent(self, agent_id: str) -> RunRecordQuerySet:
        return self.filter(agent_id=agent_id)

    def suspended(self) -> RunRecordQuerySet:
        return self.filter(status=RunStatus.SUSPENDED)

    def running(self) -> RunRecordQuerySet:
        return self.filter(status=RunStatus.RUNNING)

    def lease_expired(self, now: datetime) -> RunRecordQuerySet:
        return self.running().filter(lease_expires_at__lt=now)

    def unstarted_claims(self, decided_before: datetime) -> RunRecordQuerySet:
        """Claimed runs whose continuation has not started (no lease yet) though their last decision
        was before ``decided_before``; supervisors' own runs only (a sub-agent's run is continued by
        its supervisor's continuation)."""
        last_decision = Max("calls__decided_at")
        waiting = self.running().filter(lease_expires_at=None, parent_run_id=None)
        waited = waiting.annotate(last_decision=last_decision).filter(last_decision__lt=decided_before)
        return waited.order_by("last_decision")

    def children_of(self, run_id: str) -> RunRecordQuerySet:
        return self.filter(parent_run_id=run_id)

    def created_between(self, start: datetime | None, end: datetime | None) -> RunRecordQuerySet:
        qs = self
        if start is not None:
            qs = qs.filter(created_at__gte=start)
        if end is not None:
            qs = qs.filter(created_at__lte=end)
        return qs

    def waiting_on(self, *, tool_name: str | None = None, kind: str | None = None) -> RunRecordQuerySet:
        """Runs with an undecided call of ``tool_name`` and one of ``kind`` (indexed EXISTS each)."""
        qs = self
        undecided = ParkedCallRecord.objects.filter(run=OuterRef("pk")).undecided()
        if tool_name is not None:
            qs = qs.filter(Exists(undecided.filter(tool_name=tool_name)))
        if kind is not None:
            qs = qs.filter(Exists(undecided.filter(kind=kind)))
        return qs

    def escalated_to(self, groups: frozenset[str] | None) -> RunRecordQuerySet:
        """Runs with an undecided call escalated to one of ``groups`` (None: any run)."""
        if groups is None:
            return self
        calls = ParkedCallRecord.objects.filter(run=OuterRef("pk"), escalated_to__in=list(groups))
        return self.filter(Exists(calls.undecided()))

    def in_queue(self, scope: QueueScope) -> RunRecordQuerySet:
        """The runs of ``scope``'s queue (``queue_condition``)."""
        return self.filter(queue_condition(scope))

    def expiring_before(self, when: datetime | None) -> RunRecordQuerySet:
        """Runs with an undecided call whose deadline is before ``when`` (None: any run)."""
        if when is None:
            return self
        return self.filter(
            Exists(ParkedCallRecord.objects.filter(run=OuterRef("pk"), expires_at__lt=when).undecided())
        )

    def in_suspension_order(
        self, *, oldest_first: bool = False, by_deadline: bool = False
    ) -> RunRecordQuerySet:
        # Ties by run_id ascending either way, so pages are stable.
        if by_deadline:
            due = ParkedCallRecord.objects.filter(run=OuterRef("pk"), expires_at__isnull=False).undecided()
            return self.alias(
                next_deadline=Subquery(due.order_by("expires_at").values("expires_at")[:1])
            ).order_by(F("next_deadline").asc(nulls_last=True), "suspended_at", "run_id")
        return self.order_by("suspended_at" if oldest_first else "-suspended_at", "run_id")

    def with_calls(self) -> RunRecordQuerySet:
        """Prefetch each run's parked calls in their original order (one extra query)."""
        return self.prefetch_related(
            models.Prefetch("calls", queryset=ParkedCallRecord.objects.order_by("position"))
        )

    def without_snapshot(self) -> RunRecordQuerySet:
        """Listing rows: never load the (large) snapshots."""
        return self.defer("snapshot").with_calls()


class RunRecord(models.Model):
    """One run that waits for a human (``suspended``) or is being continued (``running``)."""

    # NULL, not "", for "none": the runtime tells a missing thread / resource / reason from an empty one.
    run_id = models.CharField(max_length=255, unique=True)
    #: The agent that started the run: listings and decisions are scoped to it.
    agent_id = models.CharField(max_length=255)
    thread_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    resource_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    #: Set on a sub-agent's inner run: the supervisor's run id.
    parent_run_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField()
    suspended_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.SUSPENDED)
    #: Grows on every change of status or calls: the compare-and-swap token.
    version = models.PositiveBigIntegerField(default=1)
    interrupted = models.BooleanField(default=False)
    #: While ``running``: the claim is reclaimed once this passes without a heartbeat.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    #: The runtime's continuation state (opaque JSON object).
    snapshot = models.JSONField()
    #: Decisions overturned by an interrupted continuation, oldest first.
    history = models.JSONField(default=list, blank=True)
    #: Who started the run (username), when known: ``tool(separate_duties=True)`` refuses them.
    started_by = models.CharField(max_length=150, null=True, blank=True)  # noqa: DJ001

    objects: ClassVar[RunRecordQuerySet] = RunRecordQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "approvals_run"
        indexes = [
            # Listings: owner (+ thread / resource), suspended only, newest first, ties by run_id.
            # Not partial indexes: SQLite binds status as a parameter, cannot prove it matches the
            # index condition, and then checks every row in the table (bench/list_suspended_runs.py).
            # created_at last: a date-range filter is checked inside the index while it is walked
            # in order, instead of fetching every skipped row (creation and suspension times
            # correlate, so an old window lies deep down the order).
            models.Index(
                fields=["agent_id", "status", "-suspended_at", "run_id", "created_at"],
                name="run_agent_listing_idx",
            ),
            # The same, oldest first (the inbox's default): ties by run_id ascending both ways, so no
            # one index can be walked in both orders.
            models.Index(
                fields=["agent_id", "status", "suspended_at", "run_id", "created_at"],
                name="run_agent_oldest_idx",
            ),
            models.Index(
                fields=["agent_id", "thread_id", "status", "-suspended_at", "run_id"],
                name="run_thread_listing_idx",
            ),
            models.Index(
                fields=["agent_id", "resource_id", "status", "-suspended_at", "run_id"],
                name="run_resource_listing_idx",
            ),
            # Date ranges (on creation time): counted here, and a page's ids picked from it without
            # touching the table (suspended_at and run_id are in it for the sort).
            models.Index(
                fields=["agent_id", "status", "created_at", "-suspended_at", "run_id"],
                name="run_agent_created_idx",
            ),
            # Counting an agent's waiting runs: few distinct keys, so PostgreSQL deduplicates this
            # index to a fraction of the others and its COUNT reads fewer pages. parent_run_id
            # last: a sub-agent's inbox counts its own runs apart from its supervisors' inner runs
            # (``parent_run_id IS [NOT] NULL``) from the index alone.
            models.Index(fields=["agent_id", "status", "parent_run_id"], name="run_agent_status_parent_idx"),
            # Sub-agents' waiting runs in suspension order (the inbox's delegated list): only those
            # rows, so a page of them never walks the agent's own waiting runs to find a few.
            models.Index(
                fields=["agent_id", "status", "suspended_at", "run_id"],
                condition=Q(parent_run_id__isnull=False),
                name="run_delegated_oldest_idx",
            ),
            # Lease reclaim: only running rows, a handful at any time (the probe's status is a
            # literal in its SQL, so SQLite can use this partial index).
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status=RunStatus.RUNNING),
                name="run_running_lease_idx",
            ),
            models.Index(fields=["parent_run_id"], name="run_parent_idx"),
            # The reviewer's queue across agents (``in_queue``, store/queue.py): waiting runs oldest
            # first, walked in order whichever agents are in it (their ids checked in the index).
            models.Index(
                fields=["status", "suspended_at", "run_id", "agent_id", "parent_run_id"],
                name="run_queue_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.run_id} ({self.status})"


class ParkedCallRecordQuerySet(models.QuerySet["ParkedCallRecord"]):
    def undecided(self) -> ParkedCallRecordQuerySet:
        return self.filter(action__isnull=True)

    def decided(self) -> ParkedCallRecordQuerySet:
        return self.filter(action__isnull=False)

    def in_queue(self, scope: QueueScope) -> ParkedCallRecordQuerySet:
        """The undecided calls of ``RunRecordQuerySet.in_queue``'s runs that count there: every call
        of an agent seen whole, the escalated ones of the others."""
        whole, escalated = _queue_agents(scope)
        counted = Q(run__agent_id__in=whole)
        for groups, agent_ids in escalated.items():
            counted |= Q(run__agent_id__in=agent_ids, escalated_to__in=list(groups))
        return self.undecided().filter(counted, run__status=RunStatus.SUSPENDED, run__parent_run_id=None)


class ParkedCallRecord(models.Model):
    """One tool call a run waits on, and the decision taken on it (at most one)."""

    # DB_CASCADE: deleting a run is one statement, so ``finish`` stays a single compare-and-delete.
    run = models.ForeignKey(RunRecord, on_delete=models.DB_CASCADE, related_name="calls", db_index=False)
    position = models.PositiveSmallIntegerField()
    tool_call_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, choices=choices(CallKind))
    args = OrderedJSONField(null=True, blank=True)
    suspend_payload = OrderedJSONField(null=True, blank=True)
    suspend_schema = OrderedJSONField(null=True, blank=True)
    resume_schema = OrderedJSONField(null=True, blank=True)
    #: On a supervisor's mirror of a sub-agent's call: where the call really lives.
    delegation = models.JSONField(null=True, blank=True)
    #: NULL while undecided; set once by a conditional UPDATE (exactly once).
    action = models.CharField(  # noqa: DJ001
        max_length=16, choices=choices(DecisionAction), null=True, blank=True
    )
    actor = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(null=True, blank=True)  # noqa: DJ001
    resume_data = OrderedJSONField(null=True, blank=True)
    #: An approval with edited arguments: what the tool runs with instead of ``args``.
    edited_args = OrderedJSONField(null=True, blank=True)
    #: Approved by this standing grant as the call parked (``GrantRecord``'s id; a grant is never
    #: deleted, so no key constraint is needed on the hot table).
    grant_id = models.PositiveIntegerField(null=True, blank=True)
    #: Written before a continuation calls the tool; kept when the continuation dies and the call is
    #: parked again (the tool may have run: a new approval must be confirmed).
    tool_started_at = models.DateTimeField(null=True, blank=True)
    #: Why the call waits, gathered when it parked (``ParkedCall.context``): the card's "why".
    context = OrderedJSONField(null=True, blank=True)
    #: When nobody answering decides the call (``ParkedCall.deadline`` says how, its JSON form).
    expires_at = models.DateTimeField(null=True, blank=True)
    deadline = models.JSONField(null=True, blank=True)
    #: The reviewer group the call moved to when its first deadline passed (``on_expiry="escalate"``).
    escalated_to = models.CharField(max_length=150, null=True, blank=True)  # noqa: DJ001
    #: ``tool(approvals=N)``: the approvals recorded before the one that decides (``Decision`` JSON).
    votes = models.JSONField(default=list, blank=True)

    objects: ClassVar[ParkedCallRecordQuerySet] = ParkedCallRecordQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "approvals_parked_call"
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="call_run_tool_call_uniq"),
        ]
        indexes = [
            # "Has an undecided call named X / of kind K": an index probe per candidate run.
            models.Index(
                fields=["run", "tool_name"], condition=Q(action__isnull=True), name="call_undecided_tool_idx"
            ),
            models.Index(
                fields=["run", "kind"], condition=Q(action__isnull=True), name="call_undecided_kind_idx"
            ),
            # The expiry sweep: undecided calls with a deadline, earliest first (a range scan of
            # the few that are due).
            models.Index(
                fields=["expires_at"],
                condition=Q(action__isnull=True, expires_at__isnull=False),
                name="call_undecided_expiry_idx",
            ),
            # Calls of the tools that take several approvals: the queue's "waiting on my second vote".
            models.Index(
                fields=["tool_name"], condition=Q(action__isnull=True), name="call_undecided_by_tool_idx"
            ),
            # Who sees an agent for its escalated calls (access.escalated_agent_ids): only those.
            models.Index(
                fields=["escalated_to"],
                condition=Q(action__isnull=True, escalated_to__isnull=False),
                name="call_escalated_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.tool_call_id})"


class ThreadMessageQuerySet(models.QuerySet["ThreadMessage"]):
    def for_thread(self, agent_id: str, thread_id: str) -> ThreadMessageQuerySet:
        return self.filter(agent_id=agent_id, thread_id=thread_id).order_by("pk")


class ThreadMessage(models.Model):
    """Messages an ended run added to its agent's thread (one row per run; oldest first by id)."""

    agent_id = models.CharField(max_length=255)
    thread_id = models.CharField(max_length=255)
    #: A JSON list of the run's new messages.
    messages = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects: ClassVar[ThreadMessageQuerySet] = ThreadMessageQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "approvals_thread_message"
        indexes = [models.Index(fields=["agent_id", "thread_id", "id"], name="thread_message_idx")]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.thread_id} #{self.pk}"


class ChosenRunId(models.Model):
    """A run id a caller chose (Mastra's ``runId`` on ``stream``), kept for good: a run that ends
    without parking leaves no other row, and its id must not name a second run."""

    run_id = models.CharField(max_length=255, unique=True)
    agent_id = models.CharField(max_length=255)
    chosen_by = models.CharField(max_length=150)
    chosen_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "approvals_chosen_run_id"

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.run_id}"
