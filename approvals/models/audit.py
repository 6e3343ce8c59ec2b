"""The audit log: one append-only row per decision a person took (or tried to take).

A decision that took effect is written by the run store (``approvals.store``) in the same atomic step
that records it on the run, so a tool can never run without its decision on record. Its outcome is
``continuing`` until the run settles: the store's step that ends the run (``completed`` /
``failed``), parks it again (``suspended_again``) or takes the claim back (``interrupted``) sets it,
once; that is the only change a row ever sees. Attempts that changed nothing (``lost_race``,
``invalid``) are written by ``approvals.services``. The username is copied so the record still reads
right after the account is renamed or deleted.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, ClassVar, Literal

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, models
from django.utils import timezone

from agents_runtime.vocabulary import (
    NO_EFFECT_OUTCOMES,
    RECORDED_OUTCOMES,
    DecisionAction,
    Outcome,
    choices,
    deadline_passed_line,
)

from .fields import OrderedJSONField

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
