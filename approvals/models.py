"""The app's tables, one section per family of tables, each opened by a comment on its job: runs and
their parked calls (the run store's), ended runs, the audit log, batches, claims, held decisions,
grants and their suggestions, routing rules, external agents and their requests, API tokens,
notifications, webhooks, health counts and the live outbox. ``OrderedJSONField`` (first) is the
model field of our own that several of them use."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Exists, F, Max, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents_runtime.grants import GrantScope
from agents_runtime.routing import Route
from agents_runtime.store import (
    NO_EFFECT_OUTCOMES,
    RECORDED_OUTCOMES,
    CallKind,
    DecisionAction,
    Outcome,
    choices,
    deadline_passed_line,
)
from approvals.outbound.posting import refused_as_typed

# A model field of our own -------------------------------------------------------------------------
# Model fields of our own.


class OrderedJSONField(models.JSONField):
    """JSON kept as written, its objects' keys in their order.

    For what people read, never queried into: a tool call's arguments as the model wrote them, a
    suspend payload, a resume schema whose properties are the form's fields in the tool author's
    order. PostgreSQL's ``jsonb`` (Django's ``JSONField``) sorts an object's keys by length; its
    ``json`` type keeps the text. Elsewhere (SQLite) JSON is stored as text anyway.
    """

    def db_type(self, connection: BaseDatabaseWrapper) -> str | None:
        if connection.vendor == "postgresql":
            return "json"
        return super().db_type(connection)

    def get_db_prep_value(self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False) -> Any:
        adapted = super().get_db_prep_value(value, connection, prepared)
        if connection.vendor == "postgresql":
            from psycopg.types.json import Json, Jsonb

            if isinstance(adapted, Jsonb):
                # Sent as jsonb, the server would sort the keys before storing it as json.
                return Json(adapted.obj, dumps=adapted.dumps)
        return adapted

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> Any:
        if value is not None and not isinstance(value, str):
            return value  # psycopg decodes PostgreSQL's json type itself
        return super().from_db_value(value, expression, connection)


# Runs ---------------------------------------------------------------------------------------------
# The persistent run store's tables: suspended runs, their parked calls, and thread memory.
#
# ``approvals.store.DjangoRunStore`` is the only writer. The indexes follow the listing queries of
# ``Agent.list_suspended_runs`` (owner + optional thread / resource, newest suspension first, ties by
# ``run_id``) and the store's own lookups (lease reclaim, inner runs of a supervisor run).


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
            due = ParkedCallRecord.objects.filter(run=OuterRef("pk")).due()
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
    """One run that waits for a human (``suspended``) or is being continued (``running``).

    On PostgreSQL its table also has ``waiting_keys``, which only triggers write and read (the tools
    and kinds its undecided calls are of: migration 0050), and the waiting counters' triggers."""

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
            # The reviewer's queue across agents (``in_queue``, ``approvals.store.queue_page``): the
            # runs it lists oldest first, walked in order whichever agents are in it (their ids
            # checked in the index). Partial, so that a prepared listing of one agent (its status a
            # parameter) cannot use it: its generic plan, which cannot tell a small agent from a big
            # one, walked every waiting run in this order to find a small agent's oldest. On SQLite,
            # which cannot match a bound status against a partial index's condition, migration 0048
            # keeps the whole index it replaced (status first) under this name.
            models.Index(
                fields=["suspended_at", "run_id", "agent_id"],
                condition=Q(status=RunStatus.SUSPENDED, parent_run_id__isnull=True),
                name="run_queue_waiting_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.run_id} ({self.status})"


class ParkedCallRecordQuerySet(models.QuerySet["ParkedCallRecord"]):
    def undecided(self) -> ParkedCallRecordQuerySet:
        return self.filter(action__isnull=True)

    def decided(self) -> ParkedCallRecordQuerySet:
        return self.filter(action__isnull=False)

    def due(self) -> ParkedCallRecordQuerySet:
        """Undecided calls that have a deadline (``call_undecided_expiry_idx``)."""
        return self.undecided().filter(expires_at__isnull=False)

    def soonest_of_their_runs(self) -> ParkedCallRecordQuerySet:
        """Of these, the due call of each run that is due first (ties by id): the run's place in
        deadline order, one row a run (a probe of the run's own few calls says which)."""
        soonest = OuterRef("expires_at")
        # Compared through COALESCE (a call without a deadline is never before): so that no index of
        # due calls can serve this probe, only the run's own. Statistics taken before many calls
        # gained a deadline say that almost none has one; the deadline index then looked like a
        # one-row probe and was scanned whole for every run (bench/stale_statistics.py).
        before = Q(deadline_or_soonest__lt=soonest) | Q(expires_at=soonest, pk__lt=OuterRef("pk"))
        earlier = (
            ParkedCallRecord.objects.undecided()
            .alias(deadline_or_soonest=Coalesce("expires_at", soonest, output_field=models.DateTimeField()))
            .filter(before, run=OuterRef("run"))
        )
        return self.due().exclude(Exists(earlier))

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

    @property
    def via_agent_id(self) -> str | None:
        """On a supervisor's mirror: the sub-agent, however deep, whose call it is (its tool is the
        call's: ``AgentRunToolCall.via_agent_id``); None on an agent's own call."""
        delegation = self.delegation if isinstance(self.delegation, dict) else {}
        agent_id = delegation.get("agent_id")
        return None if agent_id is None else str(agent_id)


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


# Ended runs ---------------------------------------------------------------------------------------
# The permanent record of an ended run: where it belonged, how it ended, and its transcript.
#
# A run's row (``RunRecord``) is deleted when it ends, with its snapshot: the snapshot is pydantic-ai's
# whole conversation with usage, model and provider details, kept only so that the run can continue.
# What people read later is kept here instead, written by the run store in the step that ends the run:
# the run's messages in the runtime's plain form (``RunEnding.transcript``). The decisions taken on the
# run are not copied: they are in the audit log, which the record page shows inline.
#
# ``manage.py prune_run_records`` empties records older than ``RUN_RECORD_RETENTION_DAYS``: the
# transcript and final answer go, a row saying when it was pruned stays (the audit log's links then say
# so, instead of "no such run").

#: How a recorded run ended.
ENDINGS = (Outcome.COMPLETED, Outcome.FAILED)


class EndedRunQuerySet(models.QuerySet["EndedRun"]):
    def visible_to(self, agent_ids: frozenset[str] | set[str] | list[str]) -> EndedRunQuerySet:
        return self.filter(agent_id__in=agent_ids)

    def kept(self) -> EndedRunQuerySet:
        return self.filter(pruned_at__isnull=True)

    def ended_before(self, moment: datetime) -> EndedRunQuerySet:
        return self.filter(ended_at__lt=moment)


class EndedRun(models.Model):
    run_id = models.CharField(max_length=255, unique=True)
    agent_id = models.CharField(max_length=255)
    thread_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    resource_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    parent_run_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=choices(ENDINGS))
    #: The final answer (completed) or the error (failed); emptied when pruned.
    detail = models.TextField(blank=True)
    #: The run's messages (``RunEnding.transcript``), oldest first; NULL once pruned.
    transcript = OrderedJSONField(null=True, blank=True)
    pruned_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[EndedRunQuerySet] = EndedRunQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "approvals_ended_run"
        indexes = [
            # Pruning: records ended before a moment and not pruned yet.
            models.Index(
                fields=["ended_at"], condition=models.Q(pruned_at__isnull=True), name="ended_run_kept_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.run_id} ({self.status})"

    @property
    def pruned(self) -> bool:
        return self.pruned_at is not None


# The audit log ------------------------------------------------------------------------------------
# The audit log: one append-only row per decision a person took (or tried to take).
#
# A decision that took effect is written by the run store (``approvals.store``) in the same atomic step
# that records it on the run, so a tool can never run without its decision on record. Its outcome is
# ``continuing`` until the run settles: the store's step that ends the run (``completed`` /
# ``failed``), parks it again (``suspended_again``) or takes the claim back (``interrupted``) sets it,
# once; that is the only change a row ever sees. Attempts that changed nothing (``lost_race``,
# ``invalid``) are written by ``approvals.services``. The username is copied so the record still reads
# right after the account is renamed or deleted.

#: ``AuditEntry.channel``: where a decision came from (``using_channel`` sets it).
CHANNEL_CHOICES = [
    ("dashboard", "dashboard"),
    ("api", "via API"),
    ("cli", "command line"),
    # The expiry sweep: nobody's decision (approvals/tasks.py).
    ("deadline", "deadline"),
    # A standing grant approved the call as it parked (``grant`` says which; ``username`` whose).
    ("grant", "standing grant"),
    # A routing rule allowed or declined the call as it parked (``username``: "rule #N of <user>").
    ("rule", "routing rule"),
]


class AppendOnlyError(Exception):
    """Audit records are never changed or deleted."""


#: What a record says, in order (the audit CSV's columns; the run store writes ``user_id`` besides).
RECORD_FIELDS = (
    "created_at",
    "username",
    "agent_id",
    "run_id",
    "thread_id",
    "resource_id",
    "tool_call_id",
    "tool_name",
    "args",
    "suspend_payload",
    "action",
    "reason",
    "resume_data",
    "edited_args",
    "outcome",
    "outcome_detail",
    "channel",
)


class ArgumentsText(models.Func):
    """A row's call arguments as stored text, for the argument search: the arguments as shown (or an
    input call's request) and, after a space, the reviewer's edit.

    On PostgreSQL the text of the ``json`` columns as written, and ``audit_args_trgm`` (migration
    0032) is a trigram index on exactly this expression, upper-cased as Django's
    ``icontains`` reads it: the search finds its rows from the index, not by reading the log.
    """

    output_field = models.TextField()

    def __init__(self) -> None:
        super().__init__(models.F("args"), models.F("suspend_payload"), models.F("edited_args"))

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:  # type: ignore[override]
        parts, params = [], []
        for expression in self.source_expressions:
            sql, more = compiler.compile(expression)
            parts.append(f"{sql}::text" if connection.vendor == "postgresql" else sql)
            params.extend(more)
        shown, payload, edited = parts
        return f"(COALESCE({shown}, {payload}, '') || ' ' || COALESCE({edited}, ''))", params


def json_fragment(text: str) -> str:
    """``text`` as it reads inside a stored JSON string (``"`` as ``\\"``, ``ü`` as ``\\u00fc``), so
    a search for what the card showed finds the stored arguments."""
    return json.dumps(text)[1:-1]


def expiry_verdict(resume_data: Any) -> str:
    """What an expiry's recorded decision did ("approve" or "decline"): its ``{"approved": ...}``."""
    return "approve" if resume_data == {"approved": True} else "decline"


class AuditEntryQuerySet(models.QuerySet["AuditEntry"]):
    def for_run(self, run_id: str) -> AuditEntryQuerySet:
        return self.filter(run_id=run_id)

    def for_call(self, run_id: str, tool_call_id: str) -> AuditEntryQuerySet:
        return self.filter(run_id=run_id, tool_call_id=tool_call_id)

    def winning(self) -> AuditEntryQuerySet:
        """Decisions that took effect (not lost races, not refused ones)."""
        return self.exclude(outcome__in=NO_EFFECT_OUTCOMES)

    def expired_as(self, run_id: str, tool_call_id: str) -> str | None:
        """What the call's deadline did when it passed, "approve" or "decline" (None: no expiry of
        the call is on record), as its row records it: not what the tool asked for (``on_expiry``),
        which the rules may have overruled (a risky value, a tool that may have run, an input call)."""
        expiry = self.for_call(run_id, tool_call_id).winning().filter(action=DecisionAction.EXPIRE)
        rows = expiry.order_by("-id").values_list("resume_data", flat=True)[:1]
        return next((expiry_verdict(data) for data in rows), None)

    def settle(self, run_id: str, outcome: str, detail: str, *, tool_call_ids: Iterable[str] = ()) -> int:
        """Give the run's ``continuing`` decisions (or only those of ``tool_call_ids``) how the run
        went on (the one change a row sees)."""
        rows = self.filter(run_id=run_id, outcome=Outcome.CONTINUING)
        if tool_call_ids:
            rows = rows.filter(tool_call_id__in=list(tool_call_ids))
        return rows.update(outcome=outcome, outcome_detail=detail)

    def chronological(self) -> AuditEntryQuerySet:
        return self.order_by("created_at", "id")

    def matching(
        self,
        *,
        agent_id: str | None = None,
        username: str | None = None,
        tool_name: str | None = None,
        action: str | None = None,
        outcome: str | None = None,
        search: str | None = None,
        in_args: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        include_invalid: bool = True,
    ) -> AuditEntryQuerySet:
        """The audit page's filters; ``None`` means "any". ``search`` is part of a run, thread or
        resource id, ``in_args`` of the call's arguments (``ArgumentsText``); invalid attempts are
        kept apart from decisions: left out unless included (or asked for by ``outcome``)."""
        qs = self
        if agent_id:
            qs = qs.filter(agent_id=agent_id)
        if username:
            qs = qs.filter(username=username)
        if tool_name:
            qs = qs.filter(tool_name=tool_name)
        if action:
            qs = qs.filter(action=action)
        if outcome:
            qs = qs.filter(outcome=outcome)
        elif not include_invalid:
            qs = qs.exclude(outcome=Outcome.INVALID)
        if search:
            qs = qs.filter(
                models.Q(run_id__icontains=search)
                | models.Q(thread_id__icontains=search)
                | models.Q(resource_id__icontains=search)
            )
        if in_args:
            qs = qs.alias(args_text=ArgumentsText()).filter(args_text__icontains=json_fragment(in_args))
        if start is not None:
            qs = qs.filter(created_at__gte=start)
        if end is not None:
            qs = qs.filter(created_at__lte=end)
        return qs

    def values_seen(self, column: str, agent_ids: Collection[str]) -> list[str]:
        """The distinct values of ``column`` (``agent_id``, ``username`` or ``tool_name``: each leads
        an index) in the rows of ``agent_ids``, in order.

        One index probe per value found (a loose index scan): a DISTINCT would read every row of the
        log, and the audit page's filters ask on every request.
        """
        if column not in ("agent_id", "username", "tool_name"):
            raise ValueError(f"no index leads with {column!r}")
        if not agent_ids:
            return []
        table = self.model._meta.db_table
        among = f"agent_id IN ({', '.join(['%s'] * len(agent_ids))})"
        sql = (
            f"WITH RECURSIVE seen(value) AS ("
            f" SELECT MIN({column}) FROM {table} WHERE {among}"
            f" UNION ALL SELECT (SELECT MIN({column}) FROM {table} WHERE {column} > seen.value AND {among})"
            f" FROM seen WHERE seen.value IS NOT NULL"
            f") SELECT value FROM seen WHERE value IS NOT NULL"
        )
        with connections[self.db].cursor() as cursor:
            cursor.execute(sql, [*agent_ids, *agent_ids])
            return [value for (value,) in cursor.fetchall()]

    def below(self, created_at: datetime, row_id: int) -> AuditEntryQuerySet:
        """The rows after this one in the log's order (newest first): where the next page starts.
        The bound on ``created_at`` alone is what an index on it seeks to."""
        return self.filter(created_at__lte=created_at).exclude(created_at=created_at, id__gte=row_id)

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("Audit entries cannot be deleted")


class AuditEntry(models.Model):
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # SET_NULL keeps the record when an account is deleted; ``username`` still says who it was.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    username = models.CharField(max_length=150)
    agent_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=255, db_index=True)
    thread_id = models.CharField(max_length=255, blank=True)
    resource_id = models.CharField(max_length=255, blank=True)
    tool_call_id = models.CharField(max_length=400)
    tool_name = models.CharField(max_length=255, blank=True)
    #: On a supervisor's mirror of a sub-agent's call, that sub-agent (``AgentRunToolCall.via_agent_id``):
    #: the row is titled by its tool, not by a namesake's ("": the agent's own call, or a row
    #: written before it was kept). Not a CSV column: the export's columns are stable.
    via_agent_id = models.CharField(max_length=255, blank=True, default="")
    #: The arguments as the reviewer saw them on the card (approval calls).
    args = OrderedJSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    #: What the call would do, as its card showed it (``agents_runtime.previews``; approval calls).
    preview = OrderedJSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    #: What the decider was shown, as one digest (``agents_runtime.policy.shown``: the arguments,
    #: the preview and the tool's version): the decision is bound to it. Empty on rows of other things.
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    #: When the decider was shown the call: their card was rendered then (dashboard decisions, from
    #: the card's signed ``shown`` field). None where the door cannot know.
    shown_at = models.DateTimeField(null=True, blank=True)
    #: What a ``suspend()``-ed tool showed the reviewer (input calls).
    suspend_payload = OrderedJSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    action = models.CharField(max_length=16, choices=choices(DecisionAction))
    reason = models.TextField(blank=True)
    resume_data = OrderedJSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    #: Approved with edited arguments: what the reviewer sent instead of ``args``.
    edited_args = OrderedJSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    outcome = models.CharField(max_length=24, choices=choices(RECORDED_OUTCOMES))
    #: The final answer, the error, or "already decided by X at T".
    outcome_detail = models.TextField(blank=True)
    #: Where the decision came from: the dashboard, the HTTP API (a token of ``user``) or a command.
    channel = models.CharField(max_length=16, choices=CHANNEL_CHOICES, default="dashboard")
    #: Decided as part of a bulk decision (not a CSV column: the export's columns are stable).
    batch = models.ForeignKey(
        "approvals.Batch", null=True, blank=True, on_delete=models.PROTECT, related_name="audit_entries"
    )
    #: Approved by a standing grant as the call parked (channel ``grant``), or the grant this row
    #: records the making or revoking of (actions ``allow`` / ``revoke``).
    grant = models.ForeignKey(
        "approvals.GrantRecord", null=True, blank=True, on_delete=models.PROTECT, related_name="audit_entries"
    )
    #: When the decided call was parked (its run's last suspension): time to decision is
    #: ``created_at - parked_at`` (the queue-health page, ``/metrics``). None on rows written
    #: before it was kept and on attempts the services write (lost races, invalid forms).
    parked_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[AuditEntryQuerySet] = AuditEntryQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"
        # No add/change/delete permissions: the log is written by the services only.
        default_permissions = ("view",)
        permissions = [
            ("decide_runs", "Can approve, decline and answer suspended runs"),
            ("view_audit_log", "Can view the audit log"),
        ]
        indexes = [
            models.Index(fields=["agent_id", "-created_at"], name="audit_agent_created"),
            models.Index(fields=["username", "-created_at"], name="audit_user_created"),
            models.Index(fields=["outcome", "-created_at"], name="audit_outcome_created"),
            models.Index(fields=["tool_name", "-created_at"], name="audit_tool_created"),
        ]

    def __str__(self) -> str:
        return f"{self.username} {self.action} {self.tool_name or self.tool_call_id} on {self.run_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError("Audit entries cannot be changed")
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("Audit entries cannot be deleted")

    @property
    def decided_by(self) -> str:
        """Who, as the log says it: "rita", or "grant #3 of rita" for a standing grant's approval."""
        if self.grant_id is not None and self.channel == "grant":
            return f"grant #{self.grant_id} of {self.username}"
        return self.username

    @property
    def verb(self) -> str:
        """As in "rita approved refund"."""
        return DecisionAction(self.action).verb

    @property
    def deadline_line(self) -> str:
        """ "Deadline passed: declined" for a call nobody answered in time ("" for any other row)."""
        if self.action != DecisionAction.EXPIRE:
            return ""
        return deadline_passed_line(expiry_verdict(self.resume_data))


# -- where the decisions of the current request or command come from ------------------------------------
#
# A context variable rather than a parameter: the row of a decision that took effect is written by
# the run store, deep under the runtime's public API, which knows nothing of channels. asgiref copies
# the context into the threads and loops it runs code on, so the store's step sees the value set.

Channel = Literal["dashboard", "api", "cli", "deadline", "grant", "rule"]

_channel: ContextVar[Channel] = ContextVar("countersign_audit_channel", default="dashboard")


def current_channel() -> Channel:
    return _channel.get()


@contextmanager
def using_channel(channel: Channel) -> Iterator[None]:
    token = _channel.set(channel)
    try:
        yield
    finally:
        _channel.reset(token)


# Batches ------------------------------------------------------------------------------------------
# Bulk decisions: a batch of approval calls decided one by one, and the agents a reviewer follows.
#
# A ``Batch`` is prepared from a selection (or every call matching an inbox's filters) as a draft the
# reviewer previews; once started, a background task decides each ``BatchItem`` on its own through the
# runtime's normal API, so the run store's exactly-once rule holds for every call: a call decided
# elsewhere meanwhile loses nothing and is reported as skipped. Audit rows written while a batch
# decides carry its id (``DECIDING_BATCH``), which ties the batch's entries together.

#: The batch whose decisions are being recorded in this context (the run store and the services
#: write it on the audit row). A context variable, not an argument: the runtime's API between the
#: batch and the store knows nothing of batches, and asgiref carries the context across its threads.
DECIDING_BATCH: ContextVar[int | None] = ContextVar("countersign_deciding_batch", default=None)

#: What a batch may do: approvals and declines only (answers to ``suspend()`` are one by one).
BULK_ACTIONS = (DecisionAction.APPROVE, DecisionAction.DECLINE)


class Batch(models.Model):
    class State(models.TextChoices):
        DRAFT = "draft", "Not started"
        RUNNING = "running", "Running"
        DONE = "done", "Finished"

    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    username = models.CharField(max_length=150)
    agent_id = models.CharField(max_length=255)
    action = models.CharField(max_length=16, blank=True, choices=[(a.value, a.label) for a in BULK_ACTIONS])
    reason = models.TextField(blank=True)
    #: The inbox filters "all matching" used (query-string names), or empty for a selection.
    filters = models.JSONField(default=dict, blank=True)
    all_matching = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=State.choices, default=State.DRAFT)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"batch {self.pk} of {self.username} on {self.agent_id} ({self.state})"

    @property
    def running(self) -> bool:
        return self.state == self.State.RUNNING


class BatchItem(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Waiting"
        DECIDING = "deciding", "Deciding"
        DECIDED = "decided", "Decided"
        SKIPPED = "skipped", "Skipped"

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=400)
    tool_name = models.CharField(max_length=255, blank=True)
    #: On a supervisor's mirror of a sub-agent's call, that sub-agent (``AgentRunToolCall.via_agent_id``):
    #: the call's tool is its, not a namesake's, in the preview's groups and money ("": the agent's own).
    via_agent_id = models.CharField(max_length=255, blank=True)
    #: The arguments as the preview showed them (model output: escaped wherever shown).
    args = models.JSONField(null=True, blank=True)
    #: The fingerprint of the call as the preview showed it (``agents_runtime.shown``): the batch's
    #: decision is bound to it, so a call changed since (edited, re-previewed, its tool upgraded) is
    #: skipped, not decided unseen. Empty for items never decidable.
    fingerprint = models.CharField(max_length=64, blank=True)
    #: What the call would do as the preview showed it (its tool's ``previews.Preview``, JSON form).
    preview = models.JSONField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    #: Why it was skipped, or what the decision led to.
    detail = models.TextField(blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "run_id", "tool_call_id"], name="batch_item_once")
        ]

    def __str__(self) -> str:
        return f"{self.tool_name or self.tool_call_id} on {self.run_id} ({self.state})"


class FollowedAgent(models.Model):
    """A reviewer follows an agent: their open pages notify them of its new calls (opt-in)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    agent_id = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)

    objects: ClassVar[models.Manager[FollowedAgent]]

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "agent_id"], name="follow_once")]

    def __str__(self) -> str:
        return f"{self.user_id} follows {self.agent_id}"


# Claims -------------------------------------------------------------------------------------------
# Claims: a reviewer's "I'm on it" on a parked call. Shown to the others, lapses unless renewed,
# never blocks a decision (``approvals.services.claims``).


class CallClaim(models.Model):
    """Who holds a parked call right now (at most one row per call; a lapsed row is as none)."""

    agent_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="call_claims")
    #: Kept as shown: the holder's name is on every card that shows the claim.
    username = models.CharField(max_length=150)
    claimed_at = models.DateTimeField()
    #: The claim lapses then unless its holder renews it.
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "approvals_call_claim"
        constraints = [models.UniqueConstraint(fields=["run_id", "tool_call_id"], name="claim_call_uniq")]

    def __str__(self) -> str:
        return f"{self.username} on {self.run_id}/{self.tool_call_id}"


# Held decisions -----------------------------------------------------------------------------------
# Held decisions: a decision taken in the browser, held for an undo window before it is taken.
#
# The row is the decision as asked (``DecisionRequest``'s fields) and when it is to be taken
# (``commit_at``). Nothing of the run changes while it is held; the sweep (``approvals.tasks``) takes
# it through the one door once ``commit_at`` passes, in whichever process sweeps, so a restart loses
# nothing. At most one per call: while it exists the call is taken (``approvals.policy.DeskPolicy``
# refuses every other decision on it, the deadline's included).


class HeldDecisionQuerySet(models.QuerySet["HeldDecision"]):
    def due(self, now: object) -> HeldDecisionQuerySet:
        return self.filter(commit_at__lte=now).order_by("commit_at", "pk")


class HeldDecision(models.Model):
    """A decision held for its undo window (deleted once taken or undone)."""

    agent_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    #: Kept as shown: other reviewers' cards say who is deciding.
    username = models.CharField(max_length=150)
    action = models.CharField(max_length=16, choices=choices(DecisionAction))
    reason = models.TextField(blank=True)
    resume_data = models.JSONField(null=True, blank=True)
    edited_args = models.JSONField(null=True, blank=True)
    #: The fingerprint of the arguments the card showed (``DecisionRequest.seen``).
    seen = models.CharField(max_length=64, blank=True)
    #: ``Confirmation`` values the reviewer ticked.
    confirmations = models.JSONField(default=list)
    #: When the card was shown to the reviewer (``DecisionRequest.shown_at``), for the record taken.
    shown_at = models.DateTimeField(null=True, blank=True)
    held_at = models.DateTimeField()
    #: Taken then (the end of the undo window, or the call's deadline if sooner).
    commit_at = models.DateTimeField()
    #: Set when a sweep starts taking it: from then on it cannot be undone.
    committing_since = models.DateTimeField(null=True, blank=True)

    objects = HeldDecisionQuerySet.as_manager()

    class Meta:
        db_table = "approvals_held_decision"
        constraints = [models.UniqueConstraint(fields=["run_id", "tool_call_id"], name="held_call_uniq")]
        indexes = [models.Index(fields=["commit_at"], name="held_commit_at_idx")]

    def __str__(self) -> str:
        return f"{self.username} {self.action} {self.run_id}/{self.tool_call_id} (held)"


# Grants -------------------------------------------------------------------------------------------
# Standing grants ("always allow"): the Django store's rows for ``agents_runtime.grants``.
#
# A grant is never deleted: revoking stamps ``revoked_at``, and audit rows of the approvals it gave
# point at it (``AuditEntry.grant``). ``uses`` only grows, by the conditional update the run store
# makes in the step that records each approval (``approvals.store.Grants``).


class GrantQuerySet(models.QuerySet["GrantRecord"]):
    def live(self, at: object | None = None) -> GrantQuerySet:
        """Not revoked, not used up, not expired at ``at`` (default: now)."""
        at = at or timezone.now()
        return self.filter(
            Q(revoked_at__isnull=True),
            Q(max_uses__isnull=True) | Q(uses__lt=F("max_uses")),
            Q(expires_at__isnull=True) | Q(expires_at__gt=at),
        )


class GrantRecord(models.Model):
    agent_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    scope = models.CharField(max_length=16, choices=[(s.value, s.label) for s in GrantScope])
    #: The thread or resource id for those scopes; empty for everyone.
    scope_value = models.CharField(max_length=255, blank=True)
    #: A CEL expression over the call's arguments; empty: any arguments.
    condition = models.TextField(blank=True)
    max_uses = models.PositiveIntegerField(null=True, blank=True)
    uses = models.PositiveIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # SET_NULL keeps the grant (and what it approved) when the account goes; the name stays.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=150)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by_name = models.CharField(max_length=150, blank=True)
    #: The call it was made from ("approve and allow ..."), if any.
    from_run_id = models.CharField(max_length=255, blank=True)
    from_tool_call_id = models.CharField(max_length=400, blank=True)
    #: Made for risky calls too; without it the grant never approves a call the tool marks risky.
    covers_risky = models.BooleanField(default=False)
    #: Calls this grant could have let through but whose arguments its condition could not be
    #: evaluated on (it raised, or was over its budget), and the latest reason: queue health shows them.
    condition_failures = models.PositiveIntegerField(default=0)
    last_condition_error = models.TextField(blank=True)
    last_condition_error_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[GrantQuerySet] = GrantQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "approvals_grant"
        ordering = ["-created_at", "-id"]
        verbose_name = "standing grant"
        default_permissions = ("view",)
        permissions = [("manage_grants", "Can see and revoke everyone's standing grants")]
        indexes = [
            # What a parking call asks: the unrevoked grants of one agent's tool.
            models.Index(
                fields=["agent_id", "tool_name"], name="grant_live_idx", condition=Q(revoked_at__isnull=True)
            ),
        ]

    def __str__(self) -> str:
        return (
            f"grant #{self.pk} of {self.created_by_name}: {self.agent_id}.{self.tool_name} for {self.scope}"
        )


# Grant suggestions --------------------------------------------------------------------------------
# What people did with the grants Countersign suggested from the decided history.
#
# A row per Accept or Dismiss (never changed): who, when, the suggestion's terms and what it said.
# An accepted suggestion points at the grant it made (whose making the audit log records too); a
# dismissed one keeps the same terms from being offered again for a while
# (``approvals.services.suggestions``).


class SuggestionChoice(models.TextChoices):
    ACCEPTED = "accepted", "accepted"
    DISMISSED = "dismissed", "dismissed"


class GrantSuggestionRecord(models.Model):
    agent_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    scope = models.CharField(max_length=16, choices=[(s.value, s.label) for s in GrantScope])
    scope_value = models.CharField(max_length=255, blank=True)
    condition = models.TextField(blank=True)
    choice = models.CharField(max_length=16, choices=SuggestionChoice.choices)
    #: What the suggestion said when it was chosen ("12 of 12 ... in 7 days. Would have matched ...").
    summary = models.TextField(blank=True)
    decided_at = models.DateTimeField(default=timezone.now)
    # SET_NULL keeps the record when the account goes; the name stays.
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_by_name = models.CharField(max_length=150)
    grant = models.ForeignKey(
        "approvals.GrantRecord", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        db_table = "approvals_grant_suggestion"
        ordering = ["-decided_at", "-id"]
        verbose_name = "grant suggestion chosen"
        default_permissions = ("view",)
        indexes = [models.Index(fields=["agent_id", "tool_name", "-decided_at"], name="suggestion_tool_idx")]

    def __str__(self) -> str:
        return f"{self.decided_by_name} {self.choice} {self.agent_id}.{self.tool_name} ({self.scope})"


# Routing rules ------------------------------------------------------------------------------------
# Routing rules per agent tool: the Django store's rows for ``agents_runtime.routing``.
#
# A rule is deleted when someone deletes it: what it did stays in the audit log (the rows of the
# decisions it took say "rule #N of <user>", and its making, changes and deletion are rows of their
# own), so nothing points at this table.


class RoutingRule(models.Model):
    agent_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    #: Where among the tool's rules (1: tried first); kept 1..n by the store.
    position = models.PositiveIntegerField()
    route = models.CharField(max_length=8, choices=[(r.value, r.label) for r in Route])
    #: A CEL expression over the call's arguments; empty: any arguments.
    condition = models.TextField(blank=True)
    #: Why, in a sentence: the model is told it when the rule denies a call.
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # SET_NULL keeps the rule (and what it decided) when the account goes; the name stays.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=150)
    changed_at = models.DateTimeField(null=True, blank=True)
    #: Who wrote its terms last (the rule decides on their rights: ``policy.DeskPolicy``).
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_by_name = models.CharField(max_length=150, blank=True)

    class Meta:
        db_table = "approvals_routing_rule"
        ordering = ["agent_id", "tool_name", "position", "id"]
        verbose_name = "routing rule"
        default_permissions = ("view",)
        indexes = [models.Index(fields=["agent_id", "tool_name", "position"], name="rule_order_idx")]

    def __str__(self) -> str:
        return f"rule #{self.pk} of {self.created_by_name}: {self.agent_id}.{self.tool_name} → {self.route}"


# External agents and their requests ---------------------------------------------------------------
# External agents and their approval requests (``/api/v1/approval-requests``).
#
# An ``ExternalAgent`` is an agent that runs in another process and only asks for decisions: registered
# here (``manage.py external_agent``, the admin), it is served as an ``agents_runtime.ExternalAgent``
# (``approvals.agents.sync_external``) like any agent of the runtime, and acts through tokens of its
# own (``ApiToken.external_agent``) that may only create and read its requests.
#
# An ``ApprovalRequest`` is the request as it was asked: its run (``run_id``, the request's id) lives in
# the run store like any run and its decision in the audit log; this row keeps what was asked (so the
# request reads the same after its run ended), the idempotency key it was asked with, and what the agent
# reported when it ran the call.

#: An external agent's id: what URLs, groups (``agent:<id>``) and the runtime take.
AGENT_ID = RegexValidator(
    r"^[a-z0-9][a-z0-9_-]{0,63}$",
    "1 to 64 lower-case letters, digits, '_' or '-', starting with a letter or digit",
)


class ExternalAgent(models.Model):
    agent_id = models.CharField(max_length=64, unique=True, validators=[AGENT_ID])
    name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    #: Rules by tool name, as ``agents_runtime.ToolRules.from_json`` reads them: ``{"deploy":
    #: {"approvals": 2, "separate_duties": true, "risky": {"env": ["production"]}}}``.
    tools = models.JSONField(default=dict, blank=True)
    #: Who its requests are started by (separation of duties refuses them): an account of its own,
    #: which signs in nowhere (no usable password, no group).
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="external_agent", editable=False
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["agent_id"]
        verbose_name = "external agent"

    def __str__(self) -> str:
        return self.name or self.agent_id


class ApprovalRequest(models.Model):
    #: The request's id, and its run's.
    run_id = models.CharField(max_length=255, unique=True)
    agent_id = models.CharField(max_length=64)
    tool_call_id = models.CharField(max_length=128)
    tool_name = models.CharField(max_length=128)
    args = models.JSONField()
    title = models.CharField(max_length=200, blank=True)
    #: What the call would do, as the agent that asked told it (``agents_runtime.previews``).
    preview = models.JSONField(null=True, blank=True)
    thread_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    resource_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    deadline_at = models.DateTimeField(null=True, blank=True)
    deadline_default = models.CharField(max_length=16, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    #: Who asked (its run's ``started_by``): only they withdraw it or report running it ("": asked
    #: before this was kept).
    asked_by = models.CharField(max_length=150, blank=True)
    #: ``Idempotency-Key``: a retry with the same key and body finds this row (the unique constraint
    #: settles two at once); ``body_digest`` tells a retry from another request under the same key.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    body_digest = models.CharField(max_length=64, blank=True)
    #: What the agent reported when it ran the approved call (once).
    result_ok = models.BooleanField(null=True, blank=True)
    result_output = models.TextField(blank=True)
    result_reported_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[models.Manager[ApprovalRequest]] = models.Manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent_id", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="approval_request_idempotency_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.run_id} ({self.tool_name})"


# Upstream calls of approved requests --------------------------------------------------------------
# ``RequestExecution``: a host's run of an approved request's call, for hosts that run it themselves.
#
# The MCP gateway (``approvals.mcp``) calls its upstream tool once a request is approved. So that it does
# so once per request, even when its client reconnects and asks again while the first call is still
# running, or from another process, it claims the request first (the row, unique per request) and keeps
# what the call answered, which is what a client asking again is given.


class RequestExecution(models.Model):
    request = models.OneToOneField(ApprovalRequest, on_delete=models.CASCADE, related_name="execution")
    started_at = models.DateTimeField(default=timezone.now)
    #: The claimer's last sign of life while the call runs: one that stops renewing it died.
    alive_at = models.DateTimeField(default=timezone.now)
    #: When the call answered (None: running, or its process died while it ran).
    finished_at = models.DateTimeField(null=True, blank=True)
    #: What the call answered, as the host hands it to whoever asks again (its wire form).
    result = models.JSONField(null=True, blank=True)

    objects: ClassVar[models.Manager[RequestExecution]] = models.Manager()

    def __str__(self) -> str:
        return f"execution of {self.request_id}"


# API tokens ---------------------------------------------------------------------------------------
# API tokens: a user's keys for the HTTP API (``Authorization: Bearer <token>``).
#
# A token is ``cs_<key id>_<secret>``. Only a salted SHA-256 of the secret is kept: the secret has 256
# bits of entropy, so a fast hash is enough (a token is not a password) and a database leak gives no
# working token. The key id is public and finds the row; the digest comparison is constant-time.


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def active(self) -> ApiTokenQuerySet:
        """Not revoked and not expired (now)."""
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    key_id = models.CharField(max_length=16, unique=True)
    salt = models.CharField(max_length=32)
    #: hex SHA-256 of salt + secret.
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    #: An external agent's token: it may only create and read that agent's approval requests (its
    #: ``user`` is the agent's own account). None: a person's token, with the person's rights.
    external_agent = models.ForeignKey(
        "approvals.ExternalAgent", null=True, blank=True, on_delete=models.CASCADE, related_name="tokens"
    )

    objects: ClassVar[ApiTokenQuerySet] = ApiTokenQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} (cs_{self.key_id}_…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"


# Notifications ------------------------------------------------------------------------------------
# Notifications to reviewers: each user's preference, each message sent (or due), the calls it covers.
#
# A message collects calls while it is open (pending, never attempted): calls parked on one agent
# within the collapse window, or everything of a digest's window, join one row instead of making
# their own. At most one open row per recipient, channel, kind and agent (a partial unique index), so
# two parks at once cannot open two.


class NotificationMode(models.TextChoices):
    EACH = "each", "Each call (bursts collapse into one message)"
    DIGEST = "digest", "A digest of what waited (daily, unless you choose how often below)"
    OFF = "off", "Off"


#: Who never chose gets one message a day listing what waited for them, not one per call.
DEFAULT_DIGEST_MINUTES = 24 * 60


class NotificationPreference(models.Model):
    """How one user hears of calls that wait for them (no row: the defaults, a daily digest)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    mode = models.CharField(max_length=8, choices=NotificationMode.choices, default=NotificationMode.DIGEST)
    email = models.BooleanField(default=True, help_text="To the address of your account.")
    chat_url = models.URLField(
        "Chat webhook URL",
        max_length=500,
        blank=True,
        help_text="A Slack-compatible incoming webhook; empty: no chat messages.",
    )
    digest_minutes = models.PositiveIntegerField(
        default=DEFAULT_DIGEST_MINUTES, validators=[MinValueValidator(1), MaxValueValidator(24 * 60)]
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects: ClassVar[models.Manager[NotificationPreference]]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.mode}"


class Notification(models.Model):
    """One message to one recipient on one channel, sent in the background and retried."""

    class Channel(models.TextChoices):
        EMAIL = "email", "email"
        CHAT = "chat", "chat"

    class Kind(models.TextChoices):
        PARKED = "parked", "calls wait"
        REMINDER = "reminder", "deadline soon"
        ESCALATED = "escalated", "escalated"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENDING = "sending", "sending"
        SENT = "sent", "sent"
        FAILED = "failed", "failed (gave up)"

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    channel = models.CharField(max_length=8, choices=Channel.choices)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    #: The agent whose calls it covers; empty on a digest (any agent).
    agent_id = models.CharField(max_length=255, blank=True)
    #: How many calls it covers (its ``calls`` rows; kept here so joining one is one UPDATE).
    call_count = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    #: The end of its collecting window, then of each wait before a retry.
    next_attempt_at = models.DateTimeField(default=timezone.now)
    #: Set while one sender holds it (a lease: a sender that died lets go after it).
    claimed_until = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[models.Manager[Notification]]

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="notification_due_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["recipient", "channel", "kind", "agent_id"],
                condition=Q(status="pending", attempts=0),
                name="notification_one_open_uniq",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} → {self.recipient_id} by {self.channel} ({self.status})"


class NotificationCall(models.Model):
    """One call a notification covers (ids only: the call itself goes once decided)."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="calls")
    agent_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    #: The call's title as its card reads it ("Refund $890.00 · A-1044", ``cards.call.call_title``),
    #: made when it joined: the line a message lists it by (model output: escaped where shown).
    title = models.CharField(max_length=300, blank=True)
    #: The call's arguments (model output: escaped wherever a message shows them).
    args = models.JSONField(null=True, blank=True)
    #: What the call would do, in one line (its preview's ``summary``; the tool's text, escaped too).
    preview = models.TextField(blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    escalated_to = models.CharField(max_length=150, blank=True)

    objects: ClassVar[models.Manager[NotificationCall]]

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.run_id}/{self.tool_call_id})"


class CallReminder(models.Model):
    """A deadline whose reminder went out: each deadline of a call is reminded of once."""

    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    objects: ClassVar[models.Manager[CallReminder]]

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run_id", "tool_call_id", "expires_at"], name="call_reminder_once_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.tool_call_id} at {self.expires_at}"


class ServedAddress(models.Model):
    """The address the site was last reached at by a signed-in person's browser (one row): where links
    in messages point when ``COUNTERSIGN_BASE_URL`` is not set (``approvals.site``). In the database,
    so a message sent by another process, or after a restart, has it."""

    url = models.CharField(max_length=300)
    seen_at = models.DateTimeField(default=timezone.now)

    objects: ClassVar[models.Manager[ServedAddress]]

    def __str__(self) -> str:
        return self.url


# Webhooks -----------------------------------------------------------------------------------------
# Webhooks out: endpoints an admin registers, and each delivery of an event to one of them.
#
# Signed per Standard Webhooks (https://www.standardwebhooks.com/): the secret is ``whsec_`` and
# base64 key bytes; each delivery keeps one ``webhook-id`` across its retries (a receiver dedupes on it).

#: The events an endpoint may subscribe to.
WEBHOOK_EVENTS = ("call.suspended", "call.decided", "run.completed", "run.failed")


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret (Standard Webhooks: base64 after the prefix)."""
    return base64.b64decode(secret.removeprefix("whsec_"), validate=True)


def _check_secret(value: str) -> None:
    try:
        key = secret_key(value)
    except ValueError:
        raise ValidationError("A secret is whsec_ followed by base64 (24 to 64 bytes).") from None
    if not value.startswith("whsec_") or not 24 <= len(key) <= 64:
        raise ValidationError("A secret is whsec_ followed by base64 (24 to 64 bytes).")


def _check_events(value: object) -> None:
    if not isinstance(value, list) or not value or any(e not in WEBHOOK_EVENTS for e in value):
        raise ValidationError(f"A non-empty list of: {', '.join(WEBHOOK_EVENTS)}.")


def _check_agents(value: object) -> None:
    if not isinstance(value, list) or any(not isinstance(a, str) or not a for a in value):
        raise ValidationError("A list of agent ids (empty: every agent).")


def _all_events() -> list[str]:
    return list(WEBHOOK_EVENTS)


class WebhookEndpoint(models.Model):
    url = models.URLField(max_length=500, help_text="Receives a POST per event (JSON body).")
    description = models.CharField(max_length=200, blank=True)
    secret = models.CharField(
        max_length=100,
        default=new_secret,
        validators=[_check_secret],
        help_text="Standard Webhooks secret (whsec_…): the receiver verifies webhook-signature with it.",
    )
    events = models.JSONField(
        default=_all_events, validators=[_check_events], help_text=", ".join(WEBHOOK_EVENTS)
    )
    agents = models.JSONField(
        default=list, blank=True, validators=[_check_agents], help_text="Agent ids; empty: every agent."
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        verbose_name = "webhook endpoint"

    def __str__(self) -> str:
        return self.url

    def clean(self) -> None:
        # Here rather than as the field's validator: the rule follows a setting, and migrations
        # would record the validator.
        refused = refused_as_typed(self.url)
        if refused:
            raise ValidationError({"url": refused})

    def wants(self, event_type: str, agent_id: str) -> bool:
        return self.active and event_type in self.events and (not self.agents or agent_id in self.agents)


class WebhookDelivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENDING = "sending", "sending"
        DELIVERED = "delivered", "delivered"
        FAILED = "failed", "failed (gave up)"

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    #: The ``webhook-id`` header: one per event and endpoint, the same on every retry.
    message_id = models.CharField(max_length=64, unique=True)
    event_type = models.CharField(max_length=32)
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    #: Set while one sender holds the delivery (a lease: a sender that died lets go after it).
    claimed_until = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[models.Manager[WebhookDelivery]]

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event_type} → {self.endpoint_id} ({self.status})"


# Health counts ------------------------------------------------------------------------------------
# The queue-health rollup: the audit log folded into hourly counts, so the health page and
# ``/metrics`` read a few hundred rows whatever the size of the log.
#
# ``approvals.health.rollup`` folds audit rows past ``HealthWatermark.last_id`` (and ended runs past
# ``ended_last_id``) into ``HealthCount`` in one transaction (the watermark moves in the same one, so
# a row is counted once). The run store adds the calls of runs that ended without parking (never
# recorded otherwise). Both write with ``add_counts``, which only adds. Pending calls are not here:
# they are read live from the parked calls (``approvals.health``).

#: The ``hour`` of the all-time rows (``/metrics``' counters): one row per key, whatever the age.
EVER = datetime(1970, 1, 1, tzinfo=UTC)


class Series(models.TextChoices):
    #: Decided calls by the hour they were parked (pending ones are counted live).
    PARKED = "parked", "parked"
    #: Audit rows by the hour they were written; label: ``<action>:<outcome class>``.
    DECIDED = "decided", "decided"
    #: Time to decision of final decisions; label: the histogram bucket's upper bound in seconds.
    WAIT = "wait", "wait"
    #: A reviewer's decisions and votes; label: the username.
    REVIEWER = "reviewer", "reviewer"
    #: Decisions a standing grant took; label: the grant.
    GRANT = "grant", "grant"
    #: Tool calls made, from the transcripts of ended runs, by the hour the run ended.
    CALLS = "calls", "calls"
    #: The interruption budget per agent and tool (``counting.BUDGET_LABELS``; ``wait:<bound>``:
    #: time to decision of the calls a person or deadline decided, not a grant).
    BUDGET = "budget", "budget"


class HealthCount(models.Model):
    series = models.CharField(max_length=12, choices=Series.choices)
    #: The UTC hour the counts fall in (``EVER``: all time).
    hour = models.DateTimeField()
    agent_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255, blank=True)
    label = models.CharField(max_length=255, blank=True)
    count = models.BigIntegerField(default=0)
    #: ``wait``: the sum of the times to decision in the bucket (the histogram's ``_sum``).
    seconds = models.FloatField(default=0.0)

    class Meta:
        db_table = "approvals_health_count"
        constraints = [
            # The fold's upsert key, and the reads' index: a series over a range of hours.
            models.UniqueConstraint(
                fields=["series", "hour", "agent_id", "tool_name", "label"], name="health_count_key"
            ),
        ]

    def __str__(self) -> str:
        where = f"{self.agent_id}/{self.tool_name}"
        return f"{self.series} {self.hour:%Y-%m-%d %H}h {where} {self.label}: {self.count}"


class HealthWatermark(models.Model):
    """One row: the id of the last audit row (and of the last ended run) folded into ``HealthCount``."""

    last_id = models.BigIntegerField(default=0)
    ended_last_id = models.BigIntegerField(default=0)
    folded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "approvals_health_watermark"

    def __str__(self) -> str:
        return f"folded up to audit row {self.last_id}"


#: One ``HealthCount`` row's key and what to add to it.
CountRow = tuple[str, datetime, str, str, str, int, float]
_ADD_CHUNK = 500
_KEY = ("series", "hour", "agent_id", "tool_name", "label")


def add_counts(rows: Iterable[CountRow], *, using: str = "default") -> None:
    """Add each ``(series, hour, agent, tool, label, count, seconds)`` to its row (created when
    new), in upserts of ``_ADD_CHUNK`` rows."""
    connection = connections[using]
    table = HealthCount._meta.db_table
    key = ", ".join(_KEY)
    hour_field = HealthCount._meta.get_field("hour")
    items = list(rows)
    with connection.cursor() as cursor:
        for start in range(0, len(items), _ADD_CHUNK):
            chunk = items[start : start + _ADD_CHUNK]
            params: list[Any] = []
            for series, hour, agent_id, tool_name, label, count, seconds in chunk:
                prepared = hour_field.get_db_prep_value(hour, connection)
                params += [series, prepared, agent_id, tool_name, label, count, seconds]
            values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(chunk))
            cursor.execute(
                f"INSERT INTO {table} ({key}, count, seconds) VALUES {values}"
                f" ON CONFLICT ({key}) DO UPDATE SET count = {table}.count + excluded.count,"
                f" seconds = {table}.seconds + excluded.seconds",
                params,
            )


# The live outbox ----------------------------------------------------------------------------------
# The live outbox: how run events, run output and sign-outs cross processes when there is no Redis.


class LiveEvent(models.Model):
    """One message for the open pages, written by whichever process has it, read by every server process.

    Only used with the in-process channel layer (the embedded default): each server process polls
    this table and forwards new rows to its own websocket consumers. With Redis, messages go straight
    through the channel layer and this table stays empty.
    """

    class Kind(models.TextChoices):
        #: A run event (``payload`` is the event): for the pages showing the run's agent.
        EVENT = "event", "Run event"
        #: A run's streamed output (``payload["chunks"]``, in order): for the pages watching that run.
        OUTPUT = "output", "Run output"
        #: A session logged out (``payload["group"]``): its open sockets close.
        SIGN_OUT = "sign-out", "Sign-out"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.EVENT)
    agent_id = models.CharField(max_length=200)
    run_id = models.CharField(max_length=200)
    payload = models.JSONField()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.agent_id}/{self.run_id}"
